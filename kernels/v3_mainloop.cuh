// The mainloop's pieces (FA3's mainloop_fwd): the compile-time configuration of one kernel (tile, stages,
// schedule, shared-memory layout, register split) and a consumer warpgroup's work per key block: the two
// GEMMs (S = Q K^T from shared memory, O += P V with P from registers), the causal / ragged mask, the
// online softmax and P's conversion to the A-fragment layout. The producer and the block loop are in v3.cu.
#pragma once

#include "v3_primitives.cuh"

namespace v3 {

template <class T_, int D_, int BM_, int BN_, int STAGES_, bool CAUSAL_, bool PINGPONG_, bool OVERLAP_,
          int Q_BUFS_ = 1>
struct Cfg {
  using T = T_;
  static constexpr int D = D_, BM = BM_, BN = BN_, STAGES = STAGES_;
  // Q buffers: 1, refilled once a tile's last S GEMM has read it; 2, so the producer loads the next tile's Q
  // (and, taking tiles from the grid's counter, learns which tile that is) while the current one runs.
  static constexpr int Q_BUFS = Q_BUFS_;
  static constexpr bool CAUSAL = CAUSAL_, PINGPONG = PINGPONG_, OVERLAP = OVERLAP_;
  static constexpr bool FP8 = Elem<T>::bytes == 1;
  static constexpr int NC = BM / 64;            // consumer warpgroups
  static constexpr int THREADS = 128 * (NC + 1);
  static constexpr int EB = Elem<T>::bytes;
  // Tiles are stored as panels of rows W bytes wide, swizzled in W-byte mode: Q/K (and 16-bit V) rows
  // hold head-dim columns, W the widest of 128/64/32 that divides a row (d96: 64 bf16, 32 fp8; d192 fp8:
  // 64); fp8 V^T rows hold keys (W divides block_n). The host's tensor maps use the same widths.
  static constexpr int QK_W = (D * EB) % 128 == 0 ? 128 : (D * EB) % 64 == 0 ? 64 : 32;
  static constexpr int V_W = !FP8 ? 128 : BN % 128 == 0 ? 128 : BN % 64 == 0 ? 64 : 32;
  static constexpr int KSTEP = 32 / EB;          // K of one wgmma instruction
  static constexpr int Q_BYTES = BM * D * EB;
  static constexpr int KV_BYTES = BN * D * EB;   // one K or V stage
  static constexpr int OFF_K = Q_BUFS * Q_BYTES;
  static constexpr int OFF_V = OFF_K + STAGES * KV_BYTES;
  static constexpr int OFF_BAR = OFF_V + STAGES * KV_BYTES;
  // Barriers (q_full, q_empty per Q buffer; four per K/V stage), then with two Q buffers one 8-byte slot per
  // buffer naming the tile its Q belongs to.
  static constexpr int BAR_BYTES = 8 * (2 * Q_BUFS + 4 * STAGES) + (Q_BUFS > 1 ? 8 * Q_BUFS : 0);
  static constexpr int OFF_SLOT = OFF_BAR + 8 * (2 * Q_BUFS + 4 * STAGES);
  static constexpr int SMEM = OFF_BAR + BAR_BYTES + 1024;  // + slack to align the base
  static constexpr int PRODUCER_REGS = NC == 2 ? 24 : 32;
  static constexpr int CONSUMER_REGS = NC == 2 ? 240 : 160;
  static_assert(BM % 64 == 0 && (NC == 2 || NC == 3), "block_m must be 128 or 192");
  static_assert((D * EB) % QK_W == 0, "head dim must fill 32/64/128-byte panels");
  static_assert(FP8 || QK_W >= 64, "16-bit V is read N-major from 64/128-byte panels");
  // Every panel starts on a swizzle-atom boundary (8 rows of W bytes; the base is 1024-byte aligned).
  static_assert(Q_BYTES % 1024 == 0 && KV_BYTES % 1024 == 0, "tiles must keep the panels 1024-byte aligned");
  static_assert(BN % 16 == 0 && BN <= 256, "block_n must be a multiple of 16, at most 256");
  static_assert(!FP8 || BN % 32 == 0, "fp8 P fragments cover 32 keys");
  static_assert(!PINGPONG || OVERLAP, "ping-pong schedules the two GEMMs of the overlapped loop");
  static_assert(Q_BUFS == 1 || Q_BUFS == 2, "one or two Q buffers");
  static_assert(OFF_BAR + BAR_BYTES <= 227 * 1024, "tiles exceed shared memory");
};

template <class C>
struct Consumer {
  using T = typename C::T;
  using Wqk = Wgmma<T, C::BN>;
  using Wpv = Wgmma<T, C::D>;
  static constexpr int NS = C::BN / 2;             // S accumulators per thread
  static constexpr int NO = C::D / 2;              // O accumulators per thread
  static constexpr int NP = C::BN / (C::FP8 ? 8 : 4);  // P registers (A fragments) per thread

  float s[NS], o[NO], m[2], l[2];
  uint32_t p[NP];

  // S = Q K^T for consumer `wg` from stage base `k_base`; issued and committed, not waited.
  __device__ __forceinline__ void gemm_qk(uint32_t q_base, uint32_t k_base, int wg) {
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < C::D / C::KSTEP; ++kk) {
      constexpr int W = C::QK_W;
      const int panel = kk * 32 / W;  // one instruction spans 32 bytes of K
      const uint32_t col = kk * 32 % W;
      const uint64_t a = smem_desc<W>(q_base + panel * C::BM * W + wg * 64 * W + col, 16, 8 * W);
      const uint64_t b = smem_desc<W>(k_base + panel * C::BN * W + col, 16, 8 * W);
      Wqk::ss(s, a, b, kk > 0);
    }
    wg_commit();
  }

  // O += P V from stage base `v_base`; issued and committed.
  __device__ __forceinline__ void gemm_pv(uint32_t v_base) {
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < C::BN / C::KSTEP; ++kk) {
      uint64_t b;
      if constexpr (C::FP8) {
        // V^T tile: d rows x block_n keys, K-major panels of V_W keys.
        constexpr int W = C::V_W;
        b = smem_desc<W>(v_base + (kk * 32 / W) * C::D * W + kk * 32 % W, 16, 8 * W);
      } else {
        // V tile read N-major: LBO = distance between panels of head-dim columns, SBO = 8 keys.
        constexpr int W = C::QK_W;
        b = smem_desc<W>(v_base + kk * 16 * W, C::BN * W, 8 * W);
      }
      const uint32_t a[4] = {p[4 * kk], p[4 * kk + 1], p[4 * kk + 2], p[4 * kk + 3]};
      Wpv::rs(o, a, b);
    }
    wg_commit();
  }

  // Masks S of key block j for rows row0 and row0 + 8: keys >= nk, and (causal) keys > query + offset,
  // offset = nk - nq (bottom-right alignment).
  __device__ __forceinline__ void mask(int j, int row0, int col0, int nk, int offset) {
#pragma unroll
    for (int c = 0; c < C::BN / 8; ++c) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int col = j * C::BN + col0 + 8 * c + e;
        const bool out = col >= nk;
        if (out || (C::CAUSAL && col > row0 + offset)) s[4 * c + e] = -INFINITY;
        if (out || (C::CAUSAL && col > row0 + 8 + offset)) s[4 * c + 2 + e] = -INFINITY;
      }
    }
  }

  // Online softmax of S (scaled by sl2 into log2 units): S becomes P in fp32, returns O's rescale factors.
  __device__ __forceinline__ void softmax(float sl2, float (&alpha)[2]) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      float mx = -INFINITY;
#pragma unroll
      for (int c = 0; c < C::BN / 8; ++c) mx = fmaxf(mx, fmaxf(s[4 * c + 2 * i], s[4 * c + 2 * i + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 2));
      const float m_new = fmaxf(m[i], mx * sl2);
      const float m_use = m_new == -INFINITY ? 0.f : m_new;  // a row with nothing visible yet
      alpha[i] = ex2(m[i] - m_use);
      float sum = 0.f;
#pragma unroll
      for (int c = 0; c < C::BN / 8; ++c) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float x = ex2(fmaf(s[4 * c + 2 * i + e], sl2, -m_use));
          s[4 * c + 2 * i + e] = x;
          sum += x;
        }
      }
      l[i] = l[i] * alpha[i] + sum;
      m[i] = m_new;
    }
  }

  __device__ __forceinline__ void rescale_o(const float (&alpha)[2], float extra) {
#pragma unroll
    for (int c = 0; c < C::D / 8; ++c) {
      o[4 * c + 0] *= alpha[0] * extra;
      o[4 * c + 1] *= alpha[0] * extra;
      o[4 * c + 2] *= alpha[1] * extra;
      o[4 * c + 3] *= alpha[1] * extra;
    }
  }

  // P (fp32 in S's accumulator layout) to wgmma A fragments. 16-bit: the layouts coincide. fp8: a fragment
  // holds keys 4t..4t+3 of 16, the accumulator keys 2t, 2t+1, 2t+8, 2t+9; V^T's keys are permuted to match.
  __device__ __forceinline__ void convert_p() {
    if constexpr (C::FP8) {
#pragma unroll
      for (int kk = 0; kk < C::BN / 32; ++kk) {
        const float* x = s + 16 * kk;
        p[4 * kk + 0] = Elem<T>::pack4(x[0], x[1], x[4], x[5]);
        p[4 * kk + 1] = Elem<T>::pack4(x[2], x[3], x[6], x[7]);
        p[4 * kk + 2] = Elem<T>::pack4(x[8], x[9], x[12], x[13]);
        p[4 * kk + 3] = Elem<T>::pack4(x[10], x[11], x[14], x[15]);
      }
    } else {
#pragma unroll
      for (int i = 0; i < NP; ++i) p[i] = Elem<T>::pack2(s[2 * i], s[2 * i + 1]);
    }
  }
};

}  // namespace v3
