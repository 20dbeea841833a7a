// FlashAttention-3 forward for Hopper (sm_90a only): TMA + mbarrier producer, wgmma consumers.
//
// A tile is block_m query rows of one (batch, head). Warpgroup 0 is the producer, warpgroups 1..NC
// (NC = block_m / 64) are consumers; consumer c owns query rows [64c, 64c + 64) of the tile.
// Grid: persistent (one thread block per SM, tiles b, b + grid, ...; the host's default when non-causal)
// or one thread block per tile (the default when causal, where tile costs differ and the hardware's
// block scheduler balances them). Tiles of one head are consecutive, heaviest query block first.
//
// Shared memory (tiles stored as 128-byte swizzled panels of 64 16-bit columns, 1024-byte aligned):
//   Q              block_m x d, refilled per tile
//   K[s], V[s]     block_n x d each, s = 0..STAGES-1, a circular buffer whose stage/phase run on across tiles
//   barriers       q_full, k_full[s], v_full[s]: TMA transaction counts (the producer's arrive.expect_tx)
//                  q_empty, k_empty[s], v_empty[s]: NC * 128 consumer arrivals each
//
// Pipeline (key blocks j visited from the last to the first, so the masked ones come first):
//   producer, one thread, per tile:
//     wait q_empty (consumers done with the last tile's Q); q_full <- TMA(Q)
//     for each block, it counting over all tiles: s = it % STAGES, phase = (it / STAGES) & 1
//       wait k_empty[s] (phase ^ 1); k_full[s] <- TMA(K_j)
//       wait v_empty[s] (phase ^ 1); v_full[s] <- TMA(V_j)
//   consumer warpgroup, OVERLAP (FA3's intra-warpgroup pipelining), per tile:
//     wait q_full; S = Q K_first^T; wait; arrive k_empty; softmax -> P_first
//     for the next blocks: [PINGPONG: bar.sync own turn]
//                   wait k_full[s]; issue S = Q K_j^T             (wgmma group 1, both operands in smem)
//                   wait v_full[s']; issue O += P_prev V_prev     (wgmma group 2, P from registers)
//                   [PINGPONG: bar.arrive next warpgroup's turn]
//                   wait group 1 -> arrive k_empty[s]; mask; online softmax of S (overlaps group 2)
//                   wait group 2 -> arrive v_empty[s']; rescale O; P = bf16/fp16(S) in the A layout
//     arrive q_empty; [turn] O += P V_last; arrive v_empty; O /= l; store from registers (rows >= N skipped)
//   consumer warpgroup, !OVERLAP: per block, S GEMM, wait, softmax, PV GEMM, wait (no pipelining).
//   PINGPONG: named barriers 1..NC; warpgroup c waits on barrier c, issues its GEMMs, then signals barrier
//   c + 1 (mod NC), so one warpgroup's GEMMs run while the others do softmax. Turns continue across tiles.
//   setmaxnreg: producer drops to 24 (NC = 2) / 32 (NC = 3) registers, consumers rise to 240 / 160.
//
// Causal (top-left aligned as SDPA's is_causal: key > query masked): blocks wholly above the diagonal are
// never loaded. Ragged N: TMA zero-fills rows past N, scores of keys >= N are masked, output rows >= N are
// not stored. GQA: K/V head = query head / (H / Hkv).
//
// Built here: bf16 and fp16; d128 128x176 (non-causal) and 128x128; d64 192x128 and 128x128. These are
// FA3's defaults except d64 non-causal, where FA3 takes 192x192: with the overlapped loop that tile needs
// more than the 160 registers three consumers get (ptxas spills), so d64 runs 192x128. d256 is not built.
// The fp8 variant (v3_fp8.cu) reuses this file with T = E4m3.

#include <cuda.h>
#include <stdint.h>

#include "v3_wgmma.cuh"

struct V3Params {
  void* o;                       // (B, H, Nq, d) by the strides below, bf16 or fp16
  const float* q_scale;          // fp8 only: (B, H, ceil(Nq / block_m)) dequantisation scales
  const float* k_scale;          // fp8 only: (B, Hkv, ceil(Nk / block_n))
  const float* v_scale;          // fp8 only: (B, Hkv, ceil(Nk / block_n))
  long long o_stride_b, o_stride_h, o_stride_n;  // elements
  int nq, nk, heads, group;      // group = H / Hkv
  float scale_log2;              // softmax scale * log2(e)
  int batch;
};
// The host mirrors this layout (kernels/hopper.py, _Params); tests compare the offsets.
static_assert(sizeof(V3Params) == 80 && __builtin_offsetof(V3Params, scale_log2) == 72 &&
                  __builtin_offsetof(V3Params, batch) == 76,
              "V3Params layout changed: update kernels/hopper.py");

namespace v3 {

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// ---- mbarrier ---------------------------------------------------------------------------------------
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
__device__ __forceinline__ bool mbar_try_wait(uint32_t bar, uint32_t parity) {
  uint32_t ok;
  asm volatile(
      "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(ok)
      : "r"(bar), "r"(parity)
      : "memory");
  return ok != 0;
}
// Waits for the phase of parity `parity` to complete. (No timeout trap: a trap in the consumer path makes
// ptxas ignore setmaxnreg's larger budget and spill; the host runs untrusted configurations in a subprocess.)
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  while (!mbar_try_wait(bar, parity)) {
  }
}

// ---- TMA ----------------------------------------------------------------------------------------------
__device__ __forceinline__ void tma_load_4d(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0, int c1,
                                            int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], "
      "[%6];" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
      : "memory");
}

// ---- wgmma and warpgroup control -------------------------------------------------------------------------
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wg_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// Pins accumulator registers at this point so the compiler never moves their uses across a wgmma wait.
template <int N>
__device__ __forceinline__ void pin(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N>
__device__ __forceinline__ void pin(uint32_t (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i])::"memory");
}
__device__ __forceinline__ void bar_sync(int id, int count) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(count) : "memory");
}
__device__ __forceinline__ void bar_arrive(int id, int count) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(count) : "memory");
}
template <int R>
__device__ __forceinline__ void regs_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(R));
}
template <int R>
__device__ __forceinline__ void regs_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(R));
}

// Shared-memory matrix descriptor: start address, leading and stride byte offsets, and the swizzle of
// rows `width` bytes wide (128 -> mode 1, 64 -> 2, 32 -> 3); 8 such rows form one swizzle atom.
template <int width>
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  constexpr uint64_t mode = width == 128 ? 1 : width == 64 ? 2 : 3;
  static_assert(width == 128 || width == 64 || width == 32, "swizzle width");
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | (static_cast<uint64_t>(lbo >> 4) << 16) |
         (static_cast<uint64_t>(sbo >> 4) << 32) | (mode << 62);
}

__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

template <class T> struct Elem;
template <> struct Elem<Bf16> {
  static constexpr int bytes = 2;
  static __device__ __forceinline__ uint32_t pack2(float lo, float hi) {
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
  }
};
template <> struct Elem<Fp16> {
  static constexpr int bytes = 2;
  static __device__ __forceinline__ uint32_t pack2(float lo, float hi) {
    uint32_t r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
  }
};
template <> struct Elem<E4m3> {
  static constexpr int bytes = 1;
  // Four floats to four e4m3 bytes, x0 in the lowest byte.
  static __device__ __forceinline__ uint32_t pack4(float x0, float x1, float x2, float x3) {
    uint16_t lo, hi;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(lo) : "f"(x1), "f"(x0));
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(hi) : "f"(x3), "f"(x2));
    return static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
  }
};

template <class T_, int D_, int BM_, int BN_, int STAGES_, bool CAUSAL_, bool PINGPONG_, bool OVERLAP_>
struct Cfg {
  using T = T_;
  static constexpr int D = D_, BM = BM_, BN = BN_, STAGES = STAGES_;
  static constexpr bool CAUSAL = CAUSAL_, PINGPONG = PINGPONG_, OVERLAP = OVERLAP_;
  static constexpr bool FP8 = Elem<T>::bytes == 1;
  static constexpr int NC = BM / 64;            // consumer warpgroups
  static constexpr int THREADS = 128 * (NC + 1);
  static constexpr int EB = Elem<T>::bytes;
  // Tiles are stored as panels of rows W bytes wide, swizzled in W-byte mode: Q/K (and 16-bit V) rows
  // hold head-dim columns (W = 128 unless d is 64 fp8 bytes); fp8 V^T rows hold keys (W divides block_n).
  static constexpr int QK_W = D * EB >= 128 ? 128 : D * EB;
  static constexpr int V_W = !FP8 ? 128 : BN % 128 == 0 ? 128 : BN % 64 == 0 ? 64 : 32;
  static constexpr int KSTEP = 32 / EB;          // K of one wgmma instruction
  static constexpr int Q_BYTES = BM * D * EB;
  static constexpr int KV_BYTES = BN * D * EB;   // one K or V stage
  static constexpr int OFF_K = Q_BYTES;
  static constexpr int OFF_V = OFF_K + STAGES * KV_BYTES;
  static constexpr int OFF_BAR = OFF_V + STAGES * KV_BYTES;
  static constexpr int SMEM = OFF_BAR + 8 * (2 + 4 * STAGES) + 1024;  // + slack to align the base
  static constexpr int PRODUCER_REGS = NC == 2 ? 24 : 32;
  static constexpr int CONSUMER_REGS = NC == 2 ? 240 : 160;
  static_assert(BM % 64 == 0 && (NC == 2 || NC == 3), "block_m must be 128 or 192");
  static_assert((D * EB) % QK_W == 0 && (QK_W == 128 || QK_W == 64), "head dim must fill 64/128-byte panels");
  static_assert(FP8 || QK_W == 128, "16-bit V is read N-major from 128-byte panels");
  static_assert(BN % 16 == 0 && BN <= 256, "block_n must be a multiple of 16, at most 256");
  static_assert(!FP8 || BN % 32 == 0, "fp8 P fragments cover 32 keys");
  static_assert(!PINGPONG || OVERLAP, "ping-pong schedules the two GEMMs of the overlapped loop");
  static_assert(OFF_BAR + 8 * (2 + 4 * STAGES) <= 227 * 1024, "tiles exceed shared memory");
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
        // V tile read N-major: LBO = distance between 64-column panels, SBO = 8 keys.
        b = smem_desc<128>(v_base + kk * 16 * 128, C::BN * 128, 1024);
      }
      const uint32_t a[4] = {p[4 * kk], p[4 * kk + 1], p[4 * kk + 2], p[4 * kk + 3]};
      Wpv::rs(o, a, b);
    }
    wg_commit();
  }

  // Masks S of key block j for rows row0 and row0 + 8: keys >= nk, and keys > query when causal.
  __device__ __forceinline__ void mask(int j, int row0, int col0, int nk) {
#pragma unroll
    for (int c = 0; c < C::BN / 8; ++c) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int col = j * C::BN + col0 + 8 * c + e;
        const bool out = col >= nk;
        if (out || (C::CAUSAL && col > row0)) s[4 * c + e] = -INFINITY;
        if (out || (C::CAUSAL && col > row0 + 8)) s[4 * c + 2 + e] = -INFINITY;
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

template <class T> struct OutElem;
template <> struct OutElem<Bf16> { using Pack = Elem<Bf16>; };
template <> struct OutElem<Fp16> { using Pack = Elem<Fp16>; };
template <> struct OutElem<E4m3> { using Pack = Elem<Bf16>; };  // fp8 inputs write bf16

// One (m_block, head, batch) of the tile list; tiles of a head are consecutive (K/V stay in L2), heaviest
// (last) query block first so a causal grid's long tiles start early.
struct Tile {
  int m_block, head, batch, kv_head, n_blocks;
};
template <class C>
__device__ __forceinline__ Tile tile_at(int t, int n_mblocks, const V3Params& prm) {
  Tile x;
  x.m_block = n_mblocks - 1 - t % n_mblocks;
  x.head = (t / n_mblocks) % prm.heads;
  x.batch = t / (n_mblocks * prm.heads);
  x.kv_head = x.head / prm.group;
  x.n_blocks = (prm.nk + C::BN - 1) / C::BN;
  if (C::CAUSAL) x.n_blocks = min(x.n_blocks, ((x.m_block + 1) * C::BM + C::BN - 1) / C::BN);
  return x;
}

// Persistent: thread block b takes tiles b, b + gridDim.x, ... (a grid of one block per tile is the plain
// launch). The K/V ring's stage and phase run on across tiles; Q is refilled once consumers release it.
template <class C>
__device__ __forceinline__ void attention_fwd(const CUtensorMap& tm_q, const CUtensorMap& tm_k,
                                              const CUtensorMap& tm_v, const V3Params& prm) {
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t base = (raw + 1023) & ~1023u;
  const uint32_t sq = base, sk = base + C::OFF_K, sv = base + C::OFF_V, sbar = base + C::OFF_BAR;
  const uint32_t q_full = sbar, q_empty = sbar + 8;
  auto k_full = [&](int s) { return sbar + 8 * (2 + s); };
  auto v_full = [&](int s) { return sbar + 8 * (2 + C::STAGES + s); };
  auto k_empty = [&](int s) { return sbar + 8 * (2 + 2 * C::STAGES + s); };
  auto v_empty = [&](int s) { return sbar + 8 * (2 + 3 * C::STAGES + s); };

  const int n_mblocks = (prm.nq + C::BM - 1) / C::BM;
  const int n_tiles = n_mblocks * prm.heads * prm.batch;
  const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
  if (threadIdx.x == 0) {
    mbar_init(q_full, 1);
    mbar_init(q_empty, C::NC * 128);
    for (int s = 0; s < C::STAGES; ++s) {
      mbar_init(k_full(s), 1);
      mbar_init(v_full(s), 1);
      mbar_init(k_empty(s), C::NC * 128);
      mbar_init(v_empty(s), C::NC * 128);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  if (wg == 0) {
    // ---------------- producer ----------------
    regs_dec<C::PRODUCER_REGS>();
    if (tid == 0) {
      constexpr int QK_COLS = C::QK_W / C::EB, QK_PANELS = C::D / QK_COLS;
      int it = 0;  // K/V blocks issued so far, over all tiles
      for (int t = blockIdx.x, n = 0; t < n_tiles; t += gridDim.x, ++n) {
        const Tile x = tile_at<C>(t, n_mblocks, prm);
        mbar_wait(q_empty, (n & 1) ^ 1);
        mbar_expect_tx(q_full, C::Q_BYTES);
        for (int p = 0; p < QK_PANELS; ++p)
          tma_load_4d(sq + p * C::BM * C::QK_W, &tm_q, q_full, p * QK_COLS, x.m_block * C::BM, x.head, x.batch);
        for (int i = 0; i < x.n_blocks; ++i, ++it) {
          const int j = x.n_blocks - 1 - i, s = it % C::STAGES;
          const uint32_t ph = (it / C::STAGES) & 1;
          mbar_wait(k_empty(s), ph ^ 1);
          mbar_expect_tx(k_full(s), C::KV_BYTES);
          for (int p = 0; p < QK_PANELS; ++p)
            tma_load_4d(sk + s * C::KV_BYTES + p * C::BN * C::QK_W, &tm_k, k_full(s), p * QK_COLS, j * C::BN,
                        x.kv_head, x.batch);
          mbar_wait(v_empty(s), ph ^ 1);
          mbar_expect_tx(v_full(s), C::KV_BYTES);
          if constexpr (C::FP8) {
            for (int p = 0; p < C::BN / C::V_W; ++p)
              tma_load_4d(sv + s * C::KV_BYTES + p * C::D * C::V_W, &tm_v, v_full(s), j * C::BN + p * C::V_W, 0,
                          x.kv_head, x.batch);
          } else {
            for (int p = 0; p < QK_PANELS; ++p)
              tma_load_4d(sv + s * C::KV_BYTES + p * C::BN * 128, &tm_v, v_full(s), p * QK_COLS, j * C::BN,
                          x.kv_head, x.batch);
          }
        }
      }
    }
    return;
  }

  // ---------------- consumers ----------------
  regs_inc<C::CONSUMER_REGS>();
  const int c = wg - 1, warp = tid / 32, lane = tid % 32;
  const int col0 = 2 * (lane % 4);
  const int my_bar = 1 + c, next_bar = 1 + (c + 1) % C::NC;
  const bool last_wg = c == C::NC - 1;
  const int kv_blocks = (prm.nk + C::BN - 1) / C::BN;
  if (C::PINGPONG && last_wg) bar_arrive(1, 256);  // warpgroup 0 takes the first turn

  int it = 0;  // K/V blocks consumed so far, over all tiles
  for (int t = blockIdx.x, n = 0; t < n_tiles; t += gridDim.x, ++n) {
    const Tile x = tile_at<C>(t, n_mblocks, prm);
    const bool last_tile = t + gridDim.x >= n_tiles;
    const int row0 = x.m_block * C::BM + c * 64 + warp * 16 + lane / 4;  // this thread's rows: row0, row0 + 8
    // Blocks that need masking: the ragged last one, and (causal) those reaching past the first row.
    auto needs_mask = [&](int j) {
      return (j + 1) * C::BN > prm.nk || (C::CAUSAL && (j + 1) * C::BN - 1 > x.m_block * C::BM);
    };
    float q_scale = 1.f;
    const float *k_scale = nullptr, *v_scale = nullptr;
    if constexpr (C::FP8) {
      q_scale = prm.q_scale[(x.batch * prm.heads + x.head) * n_mblocks + x.m_block];
      k_scale = prm.k_scale + (x.batch * (prm.heads / prm.group) + x.kv_head) * kv_blocks;
      v_scale = prm.v_scale + (x.batch * (prm.heads / prm.group) + x.kv_head) * kv_blocks;
    }
    auto block_sl2 = [&](int j) {
      if constexpr (C::FP8) return prm.scale_log2 * q_scale * k_scale[j];
      return prm.scale_log2;
    };
    auto stage = [&](int i) { return (it + i) % C::STAGES; };
    auto phase = [&](int i) { return static_cast<uint32_t>(((it + i) / C::STAGES) & 1); };

    Consumer<C> cs;
#pragma unroll
    for (int i = 0; i < Consumer<C>::NO; ++i) cs.o[i] = 0.f;
    cs.m[0] = cs.m[1] = -INFINITY;
    cs.l[0] = cs.l[1] = 0.f;
    float dv = 1.f;  // fp8: V scale of the block whose P is in registers; O is kept in those units
    const int nb = x.n_blocks;

    mbar_wait(q_full, n & 1);
    if constexpr (C::OVERLAP) {
      {
        const int j = nb - 1;
        const float sl2 = block_sl2(j);
        if (C::PINGPONG) bar_sync(my_bar, 256);
        mbar_wait(k_full(stage(0)), phase(0));
        cs.gemm_qk(sq, sk + stage(0) * C::KV_BYTES, c);
        if (C::PINGPONG) bar_arrive(next_bar, 256);
        wg_wait<0>();
        pin(cs.s);
        mbar_arrive(k_empty(stage(0)));
        if (needs_mask(j)) cs.mask(j, row0, col0, prm.nk);
        float alpha[2];
        cs.softmax(sl2, alpha);
        if constexpr (C::FP8) dv = v_scale[j];
        cs.convert_p();
      }
      for (int i = 1; i < nb; ++i) {
        const int j = nb - 1 - i;
        const float sl2 = block_sl2(j);
        if (C::PINGPONG) bar_sync(my_bar, 256);
        mbar_wait(k_full(stage(i)), phase(i));
        cs.gemm_qk(sq, sk + stage(i) * C::KV_BYTES, c);
        mbar_wait(v_full(stage(i - 1)), phase(i - 1));
        cs.gemm_pv(sv + stage(i - 1) * C::KV_BYTES);
        if (C::PINGPONG) bar_arrive(next_bar, 256);
        wg_wait<1>();
        pin(cs.s);
        mbar_arrive(k_empty(stage(i)));
        if (needs_mask(j)) cs.mask(j, row0, col0, prm.nk);
        float alpha[2];
        cs.softmax(sl2, alpha);
        wg_wait<0>();
        pin(cs.o);
        pin(cs.p);
        mbar_arrive(v_empty(stage(i - 1)));
        float extra = 1.f;
        if constexpr (C::FP8) {
          const float dv_new = v_scale[j];
          extra = dv / dv_new;
          dv = dv_new;
        }
        cs.rescale_o(alpha, extra);
        cs.convert_p();
      }
      mbar_arrive(q_empty);  // every S GEMM of this tile has completed
      {
        if (C::PINGPONG) bar_sync(my_bar, 256);
        mbar_wait(v_full(stage(nb - 1)), phase(nb - 1));
        cs.gemm_pv(sv + stage(nb - 1) * C::KV_BYTES);
        if (C::PINGPONG && !(last_wg && last_tile)) bar_arrive(next_bar, 256);
        wg_wait<0>();
        pin(cs.o);
        mbar_arrive(v_empty(stage(nb - 1)));
      }
    } else {
      for (int i = 0; i < nb; ++i) {
        const int j = nb - 1 - i;
        const float sl2 = block_sl2(j);
        mbar_wait(k_full(stage(i)), phase(i));
        cs.gemm_qk(sq, sk + stage(i) * C::KV_BYTES, c);
        wg_wait<0>();
        pin(cs.s);
        mbar_arrive(k_empty(stage(i)));
        if (needs_mask(j)) cs.mask(j, row0, col0, prm.nk);
        float alpha[2];
        cs.softmax(sl2, alpha);
        float extra = 1.f;
        if constexpr (C::FP8) {
          const float dv_new = v_scale[j];
          extra = i == 0 ? 1.f : dv / dv_new;
          dv = dv_new;
        }
        cs.rescale_o(alpha, extra);
        cs.convert_p();
        mbar_wait(v_full(stage(i)), phase(i));
        cs.gemm_pv(sv + stage(i) * C::KV_BYTES);
        wg_wait<0>();
        pin(cs.o);
        mbar_arrive(v_empty(stage(i)));
      }
      mbar_arrive(q_empty);
    }
    it += nb;

    // ---------------- epilogue: O / l, stored from registers ----------------
    using Pack = typename OutElem<typename C::T>::Pack;
    float inv[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      float sum = cs.l[i];
      sum += __shfl_xor_sync(0xffffffff, sum, 1);
      sum += __shfl_xor_sync(0xffffffff, sum, 2);
      inv[i] = (sum > 0.f ? 1.f / sum : 0.f) * dv;
    }
    uint16_t* out = static_cast<uint16_t*>(prm.o) + x.batch * prm.o_stride_b + x.head * prm.o_stride_h;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int row = row0 + 8 * i;
      if (row < prm.nq) {
        uint16_t* orow = out + row * prm.o_stride_n + col0;
#pragma unroll
        for (int cc = 0; cc < C::D / 8; ++cc) {
          const uint32_t v = Pack::pack2(cs.o[4 * cc + 2 * i] * inv[i], cs.o[4 * cc + 2 * i + 1] * inv[i]);
          *reinterpret_cast<uint32_t*>(orow + 8 * cc) = v;
        }
      }
    }
  }
}

}  // namespace v3

#define V3_ENTRY(TY, D, BM, BN, ST, CAUSAL, PP, OV)                                                       \
  extern "C" __global__ void __launch_bounds__(128 * (BM / 64 + 1), 1)                                    \
      v3_##TY##_d##D##_m##BM##_n##BN##_s##ST##_c##CAUSAL##_p##PP##_o##OV(                                \
          const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,              \
          const __grid_constant__ CUtensorMap tm_v, const V3Params prm) {                                 \
    v3::attention_fwd<v3::Cfg<v3::TY, D, BM, BN, ST, CAUSAL, PP, OV>>(tm_q, tm_k, tm_v, prm);            \
  }

#ifndef V3_NO_ENTRIES
// Default schedule (ping-pong + intra-warpgroup overlap) for every supported tile, both 16-bit dtypes.
#define V3_DTYPE(TY)                          \
  V3_ENTRY(TY, 128, 128, 176, 2, 0, 1, 1)     \
  V3_ENTRY(TY, 128, 128, 128, 2, 0, 1, 1)     \
  V3_ENTRY(TY, 128, 128, 128, 2, 1, 1, 1)     \
  V3_ENTRY(TY, 64, 192, 128, 2, 0, 1, 1)      \
  V3_ENTRY(TY, 64, 192, 128, 2, 1, 1, 1)      \
  V3_ENTRY(TY, 64, 128, 128, 2, 0, 1, 1)      \
  V3_ENTRY(TY, 64, 128, 128, 2, 1, 1, 1)
V3_DTYPE(Bf16)
V3_DTYPE(Fp16)
// Ablations (bf16): no ping-pong; neither ping-pong nor overlap (the plain warp-specialised loop).
V3_ENTRY(Bf16, 128, 128, 176, 2, 0, 0, 1)
V3_ENTRY(Bf16, 128, 128, 176, 2, 0, 0, 0)
V3_ENTRY(Bf16, 128, 128, 128, 2, 1, 0, 0)
V3_ENTRY(Bf16, 64, 192, 128, 2, 0, 0, 0)
#endif
