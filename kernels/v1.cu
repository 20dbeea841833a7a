// FlashAttention V1 forward (Dao et al. 2022, arXiv 2205.14135, Algorithm 1), the schedule algorithms/
// calls "v1".
//
// Loop order of Algorithm 1: OUTER loop over K/V blocks j (K_j, V_j loaded to shared memory once),
// INNER loop over Q blocks i. Each inner step reads Q_i, O_i, l_i, m_i from global memory, folds block j
// in, and writes O_i, l_i, m_i back; O is kept normalised (rescaled by diag(l) every step):
//   S = scale Q_i K_j^T;  m~ = rowmax(S);  P~ = exp(S - m~);  l~ = rowsum(P~)
//   m_new = max(m_i, m~);  l_new = e^(m_i - m_new) l_i + e^(m~ - m_new) l~
//   O_i = (l_i e^(m_i - m_new) O_i + e^(m~ - m_new) P~ V_j) / l_new
// O_i lives in an fp32 workspace between steps (AttnParams.ws_o), not the input dtype, so the Tc
// round trips add no rounding; (m_i, l_i) in ws_ml. The step that visits a Q block's last K/V block
// writes O_i in the input dtype and the logsumexp instead, so no finishing kernel is needed.
//
// Warps split the K/V block ("split-K", as the V1 kernels do): warp w owns keys [w BC/W, (w+1) BC/W) and
// computes its slice of S and of P~ V_j for all BR rows. Rows meet in shared memory twice: the row max
// and row sum of each warp (to form m~ and l~), and the partial products P~_w V_w, summed across warps
// in column chunks of 32 (an fp32 buffer of WARPS x BR x 32) so a thread never holds all of O_i.
//
// Tile parameters (a Tiling): block_m = BR, block_n = BC, warps = W, stages = 1 (no prefetch across
// blocks; Q_i is loaded when its step starts). Shared memory: Q_i, K_j, V_j tiles plus the reduction
// buffers; algorithms.tiling.smem_bytes('v1') counts Q_i, K_j, V_j and an O_i tile instead.
//
// Grid: the paper runs one thread block per (batch, head). That leaves most SMs idle at long sequences
// (batch * heads = 32 blocks for 16k tokens at hidden 2048), so the grid is (splits, heads, batch): split s
// takes Q blocks s, s + splits, ... (interleaved, so causal work stays balanced) and still walks every
// K/V block in the outer loop. splits = 1 is the paper's grid. Causal (top-left, as torch SDPA) skips the
// (i, j) pairs above the diagonal and masks only the blocks that cross it.
#include "include/common.cuh"

namespace flashsim {
namespace v1 {

template <typename T, int D, int BR, int BC, int WARPS>
struct Config {
  static constexpr int kThreads = WARPS * 32;
  static constexpr int kKW = BC / WARPS;  // keys per warp
  static constexpr int kMT = BR / 16;
  static constexpr int kNT = kKW / 8;
  static constexpr int kDC = D < 32 ? D : 32;  // O columns per reduction chunk
  static constexpr int kRedStride = kDC + 8;   // floats; shifts rows by 32 bytes (conflict-free float2)
  using QTile = SmemTile<BR, D>;
  using KVTile = SmemTile<BC, D>;
  static constexpr int kRedBytes = WARPS * BR * kRedStride * 4;
  static constexpr int kRedIters = (BR * kDC / 4 + kThreads - 1) / kThreads;  // float4s of O_i per thread per chunk
  static constexpr int kSmemBytes = QTile::kBytes + 2 * KVTile::kBytes + kRedBytes + 2 * WARPS * BR * 4 + BR * 8;
  static_assert(kKW % 16 == 0 && BR % 16 == 0 && D % kDC == 0, "tiles must be whole mma steps");
  static_assert(BR <= kThreads, "one thread per row combines the statistics");
};

template <typename T, int D, int BR, int BC, int WARPS>
__device__ __forceinline__ void forward(const AttnParams& p) {
  using Cfg = Config<T, D, BR, BC, WARPS>;
  using QTile = typename Cfg::QTile;
  using KVTile = typename Cfg::KVTile;
  constexpr int kMT = Cfg::kMT, kNT = Cfg::kNT, kKW = Cfg::kKW, kDC = Cfg::kDC, kThreads = Cfg::kThreads;
  constexpr int kRedIters = Cfg::kRedIters;

  extern __shared__ __align__(128) unsigned char smem[];
  require_dynamic_smem(Cfg::kSmemBytes);
  const uint32_t sQ = smem_u32(smem);
  const uint32_t sK = sQ + QTile::kBytes;
  const uint32_t sV = sK + KVTile::kBytes;
  float* red = reinterpret_cast<float*>(smem + QTile::kBytes + 2 * KVTile::kBytes);  // [W][BR][kRedStride]
  float* warp_max = red + WARPS * BR * Cfg::kRedStride;                              // [W][BR]
  float* warp_sum = warp_max + WARPS * BR;                                           // [W][BR]
  float2* coef = reinterpret_cast<float2*>(warp_sum + WARPS * BR);                   // [BR] (alpha, beta)

  const int split = blockIdx.x, head = blockIdx.y, batch = blockIdx.z;
  const int kv_head = head / p.kv_group;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane >> 2, t = lane & 3;
  const uint16_t* q = static_cast<const uint16_t*>(p.q) + batch * p.q_batch_stride + head * p.q_head_stride;
  const uint16_t* k = static_cast<const uint16_t*>(p.k) + batch * p.k_batch_stride + kv_head * p.k_head_stride;
  const uint16_t* v = static_cast<const uint16_t*>(p.v) + batch * p.v_batch_stride + kv_head * p.v_head_stride;
  const int64_t bh_rows = (static_cast<int64_t>(batch) * p.heads + head) * p.seqlen_q;
  float* ws_o = p.ws_o + bh_rows * D;
  float2* ws_ml = reinterpret_cast<float2*>(p.ws_ml) + bh_rows;
  float* lse = p.lse + bh_rows;
  uint16_t* o = static_cast<uint16_t*>(p.o) + batch * p.o_batch_stride + head * p.o_head_stride;

  const int n_kblocks = (p.seqlen_k + BC - 1) / BC;
  const int n_qblocks = (p.seqlen_q + BR - 1) / BR;
  const uint32_t q_anchor = QTile::addr(sQ, lane & 15, lane >> 4);
  const uint32_t k_anchor = KVTile::addr(sK, warp * kKW + (lane & 7) + ((lane >> 4) << 3), (lane >> 3) & 1);
  const uint32_t v_anchor = KVTile::addr(sV, warp * kKW + (lane & 7) + (((lane >> 3) & 1) << 3), lane >> 4);

  // Causal with seqlen_q > seqlen_k: the first n_empty Q blocks see no key, so no K/V step below visits
  // them; their output is 0 and their logsumexp -inf (each split writes the blocks it owns).
  // The causal offset is recomputed where used (opaque): held across the loops it costs registers.
  const int n_empty = min(n_qblocks, max(0, -causal_offset(p)) / BR);
  for (int i = split; i < n_empty; i += p.num_splits)
    for (int idx = tid; idx < BR * (D / 8); idx += kThreads) {
      const int row = i * BR + idx / (D / 8);
      *reinterpret_cast<uint4*>(o + row * p.o_row_stride + idx % (D / 8) * 8) = make_uint4(0, 0, 0, 0);
      if (idx % (D / 8) == 0 && p.lse != nullptr) lse[row] = -INFINITY;
    }

  for (int j = 0; j < n_kblocks; ++j) {
    const int n0 = j * BC;
    // Causal: Q block i sees block j only if its last row reaches key n0 (row m0 + BR - 1 + offset >= n0).
    const int i_lo = p.causal ? max(0, n0 - opaque(causal_offset(p))) / BR : 0;
    const int i_first = i_lo + ((split - i_lo % p.num_splits) + p.num_splits) % p.num_splits;
    if (i_first >= n_qblocks) continue;
    __syncthreads();  // every warp is done with K_{j-1}, V_{j-1}
    load_tile_async<kThreads, KVTile, BC>(sK, k, n0, static_cast<int>(p.k_row_stride), p.seqlen_k);
    load_tile_async<kThreads, KVTile, BC>(sV, v, n0, static_cast<int>(p.v_row_stride), p.seqlen_k);
    cp_async_commit();

    for (int i = i_first; i < n_qblocks; i += p.num_splits) {
      const int m0 = i * BR;
      const int j_last = p.causal ? min(n_kblocks - 1, (m0 + BR - 1 + opaque(causal_offset(p))) / BC) : n_kblocks - 1;
      const bool last = j == j_last;
      load_tile_async<kThreads, QTile, BR>(sQ, q, m0, static_cast<int>(p.q_row_stride), p.seqlen_q);
      cp_async_commit();
      // O_i and (m_i, l_i) are read now, with Q_i, so their latency overlaps Q_i's and the GEMM's: each
      // thread loads the values it folds in below (the same thread wrote them at step j - 1).
      float4 o_old[D / kDC][kRedIters];
      float2 ml = make_float2(-INFINITY, 0.f);
#pragma unroll
      for (int c = 0; c < D / kDC; ++c)
#pragma unroll
        for (int it = 0; it < kRedIters; ++it) {
          const int idx = tid + it * kThreads;
          const int row = m0 + idx / (kDC / 4), col = (idx % (kDC / 4)) * 4;
          o_old[c][it] = make_float4(0.f, 0.f, 0.f, 0.f);  // the workspace holds nothing before block 0
          if (j > 0 && idx < BR * kDC / 4 && row < p.seqlen_q)
            o_old[c][it] = *reinterpret_cast<const float4*>(ws_o + static_cast<int64_t>(row) * D + c * kDC + col);
        }
      if (j > 0 && tid < BR && m0 + tid < p.seqlen_q) ml = ws_ml[m0 + tid];
      cp_async_wait<0>();
      __syncthreads();

      // This warp's slice of S = Q_i K_j^T: BR rows x kKW keys.
      float s[kMT][kNT][4];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) s[mt][nt][e] = 0.f;
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        uint32_t a[kMT][4];
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) ldmatrix_x4(a[mt], QTile::at(q_anchor, mt * 16, kk * 2));
#pragma unroll
        for (int nt2 = 0; nt2 < kNT / 2; ++nt2) {
          uint32_t b[4];
          ldmatrix_x4(b, KVTile::at(k_anchor, nt2 * 16, kk * 2));
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt) {
            mma16816<T>(s[mt][2 * nt2], a[mt], b[0], b[1]);
            mma16816<T>(s[mt][2 * nt2 + 1], a[mt], b[2], b[3]);
          }
        }
      }
      const int key0 = n0 + warp * kKW;
      const int offset = opaque(causal_offset(p));
      if (n0 + BC > p.seqlen_k || (p.causal && n0 + BC - 1 > m0 + offset)) {
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
          for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int row = m0 + mt * 16 + g + (e >> 1) * 8;
              const int col = key0 + nt * 8 + t * 2 + (e & 1);
              if (col >= p.seqlen_k || (p.causal && col > row + offset)) s[mt][nt][e] = -INFINITY;
            }
      }

      // m~: each warp's row max, then the max over warps through shared memory.
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          float mx = -INFINITY;
#pragma unroll
          for (int nt = 0; nt < kNT; ++nt) mx = fmaxf(mx, fmaxf(s[mt][nt][2 * r], s[mt][nt][2 * r + 1]));
          mx = quad_max(mx);
          if (t == 0) warp_max[warp * BR + mt * 16 + g + 8 * r] = mx;
        }
      __syncthreads();
      uint32_t pa[kMT][kKW / 16][4];  // P~ as A fragments of P~_w V_w
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int row_local = mt * 16 + g + 8 * r;
          float mx = -INFINITY;
#pragma unroll
          for (int w = 0; w < WARPS; ++w) mx = fmaxf(mx, warp_max[w * BR + row_local]);
          const float m_scaled = mx == -INFINITY ? 0.f : mx * p.scale_log2;
          float sum = 0.f;
#pragma unroll
          for (int nt = 0; nt < kNT; ++nt) {
            s[mt][nt][2 * r] = fast_exp2(s[mt][nt][2 * r] * p.scale_log2 - m_scaled);
            s[mt][nt][2 * r + 1] = fast_exp2(s[mt][nt][2 * r + 1] * p.scale_log2 - m_scaled);
            sum += s[mt][nt][2 * r] + s[mt][nt][2 * r + 1];
          }
          sum = quad_sum(sum);
          if (t == 0) warp_sum[warp * BR + row_local] = sum;
        }
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int kk = 0; kk < kKW / 16; ++kk) {
          pa[mt][kk][0] = Elem<T>::pack(s[mt][2 * kk][0], s[mt][2 * kk][1]);
          pa[mt][kk][1] = Elem<T>::pack(s[mt][2 * kk][2], s[mt][2 * kk][3]);
          pa[mt][kk][2] = Elem<T>::pack(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
          pa[mt][kk][3] = Elem<T>::pack(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
        }
      __syncthreads();

      // One thread per row: fold (m~, l~) into (m_i, l_i) and leave the O update's coefficients.
      if (tid < BR) {
        float mt_ = -INFINITY, lt = 0.f;
#pragma unroll
        for (int w = 0; w < WARPS; ++w) {
          mt_ = fmaxf(mt_, warp_max[w * BR + tid]);
          lt += warp_sum[w * BR + tid];
        }
        const int row = m0 + tid;
        const float m_new = fmaxf(ml.x, mt_);
        // A block that masks the whole row adds e = 0. A row that has seen no key yet (causal, bottom-right)
        // keeps m = -inf and l = 0: reference 0 keeps the exponents -inf instead of NaN, and O stays 0.
        const float m_ref = m_new == -INFINITY ? 0.f : m_new;
        const float e_old = fast_exp2((ml.x - m_ref) * p.scale_log2);
        const float e_blk = fast_exp2((mt_ - m_ref) * p.scale_log2);
        const float l_new = e_old * ml.y + e_blk * lt;
        const float inv_l = l_new > 0.f ? __fdividef(1.f, l_new) : 0.f;  // MUFU.RCP, not IEEE's slow path
        coef[tid] = make_float2(e_old * ml.y * inv_l, e_blk * inv_l);
        if (row < p.seqlen_q) {
          if (!last)
            ws_ml[row] = make_float2(m_new, l_new);
          else if (p.lse != nullptr)
            lse[row] = l_new > 0.f ? (m_new * p.scale_log2 + __log2f(l_new)) * 0.69314718056f : -INFINITY;
        }
      }

      // O_i update, kDC columns at a time: partial P~_w V_w[:, chunk] -> shared memory -> sum over warps.
#pragma unroll
      for (int c = 0; c < D / kDC; ++c) {
        float acc[kMT][kDC / 8][4];
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
          for (int dt = 0; dt < kDC / 8; ++dt)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[mt][dt][e] = 0.f;
#pragma unroll
        for (int kk = 0; kk < kKW / 16; ++kk)
#pragma unroll
          for (int dt2 = 0; dt2 < kDC / 16; ++dt2) {
            uint32_t b[4];
            ldmatrix_x4_trans(b, KVTile::at(v_anchor, kk * 16, c * (kDC / 8) + dt2 * 2));
#pragma unroll
            for (int mt = 0; mt < kMT; ++mt) {
              mma16816<T>(acc[mt][2 * dt2], pa[mt][kk], b[0], b[1]);
              mma16816<T>(acc[mt][2 * dt2 + 1], pa[mt][kk], b[2], b[3]);
            }
          }
        float* my_red = red + warp * BR * Cfg::kRedStride;
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
          for (int dt = 0; dt < kDC / 8; ++dt)
#pragma unroll
            for (int r = 0; r < 2; ++r)
              *reinterpret_cast<float2*>(my_red + (mt * 16 + g + 8 * r) * Cfg::kRedStride + dt * 8 + t * 2) =
                  make_float2(acc[mt][dt][2 * r], acc[mt][dt][2 * r + 1]);
        __syncthreads();  // partials and coefficients visible
#pragma unroll
        for (int it = 0; it < kRedIters; ++it) {
          const int idx = tid + it * kThreads;
          const int row_local = idx / (kDC / 4), col = (idx % (kDC / 4)) * 4;
          const int row = m0 + row_local;
          if (idx >= BR * kDC / 4 || row >= p.seqlen_q) continue;
          float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
          for (int w = 0; w < WARPS; ++w) {
            const float4 x = *reinterpret_cast<const float4*>(red + (w * BR + row_local) * Cfg::kRedStride + col);
            sum.x += x.x;
            sum.y += x.y;
            sum.z += x.z;
            sum.w += x.w;
          }
          const float2 ab = coef[row_local];
          const float4 old = o_old[c][it];
          float4* ws = reinterpret_cast<float4*>(ws_o + static_cast<int64_t>(row) * D + c * kDC + col);
          const float4 nw = make_float4(ab.x * old.x + ab.y * sum.x, ab.x * old.y + ab.y * sum.y,
                                        ab.x * old.z + ab.y * sum.z, ab.x * old.w + ab.y * sum.w);
          if (!last) {
            *ws = nw;
          } else {
            uint2 out;
            out.x = Elem<T>::pack(nw.x, nw.y);
            out.y = Elem<T>::pack(nw.z, nw.w);
            *reinterpret_cast<uint2*>(o + row * p.o_row_stride + c * kDC + col) = out;
          }
        }
        __syncthreads();  // buffer free for the next chunk, Q tile free for the next step
      }
    }
    cp_async_wait<0>();
  }
}

}  // namespace v1
}  // namespace flashsim

// One instantiation: NAME_fwd, grid (splits, H, B), WARPS * 32 threads, Config::kSmemBytes of dynamic
// shared memory; needs AttnParams.ws_o and ws_ml (fp32 workspaces) and num_splits. Only 1 stage.
#define FLASHSIM_V1(NAME, DTYPE, D, BR, BC, WARPS, STAGES)                                                  \
  static_assert(STAGES == 1, "v1 implements 1 stage (no prefetch across blocks)");                        \
  extern "C" __global__ void __launch_bounds__(WARPS * 32) NAME##_fwd(const __grid_constant__ flashsim::AttnParams p) { \
    flashsim::v1::forward<FLASHSIM_T_##DTYPE, D, BR, BC, WARPS>(p);                                        \
  }
