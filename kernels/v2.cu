// FlashAttention-2 forward (Dao 2023, arXiv 2307.08691, Algorithm 1), the schedule algorithms/ calls "v2".
//
// Schedule: one thread block per (Q block, head, batch); outer loop over nothing, inner loop over the
// K/V blocks of that Q block, walked from the last to the first so the masked blocks (the ragged tail and
// the causal diagonal) come first. Warps split Q ("split-Q"): warp w owns rows [w*BM/WARPS, ...) and
// reads all of K and V, so no warp ever needs another warp's results. O stays unnormalised in registers
// (one rescale per block by exp2 of the max change) and is written once, with the logsumexp.
//
// Tile parameters (a Tiling of algorithms/tiling.py): block_m = BM query rows, block_n = BN key rows,
// warps = WARPS, stages = 2: one K and one V buffer, each loaded with cp.async while the other is in use
// (V_j streams in during S = Q K_j^T, K_{j-1} during softmax and P V_j), which is what
// algorithms.tiling.smem_bytes('v2') counts: (BM + 2 BN) * D * 2 bytes. Defaults are the public FA2 tiles
// (algorithms.tiling.default_tiling('v2')): d64 128x128x4, d128 128x64x4.
//
// Inner step, per warp, with RW = BM / WARPS rows (RW / 16 m16 tiles):
//   S = Q_i K_j^T        mma.sync m16n8k16; Q and K fragments by ldmatrix from swizzled shared memory
//   mask                 only blocks that cross the diagonal or the end of K (a uniform branch)
//   m_new = max(m, rowmax(S)); P = exp2(S * scale_log2 - m_new * scale_log2)    (one FFMA + MUFU.EX2)
//   l = l * exp2(m - m_new) + rowsum(P);  O = O * exp2(m - m_new) + P V_j
// P never leaves registers: the fp32 S accumulator of two n8 tiles is exactly the A fragment of a
// k16 step of P V once packed to 16 bits, and V's B fragments come from ldmatrix.trans.
// Causal is top-left aligned as in torch SDPA (query i sees keys j <= i); fully masked blocks are skipped.
#include "include/common.cuh"
#include "include/phase_stamps.cuh"

namespace flashsim {
namespace v2 {

template <typename T, int D, int BM, int BN, int WARPS>
struct Config {
  static constexpr int kThreads = WARPS * 32;
  static constexpr int kRowsPerWarp = BM / WARPS;
  static constexpr int kMT = kRowsPerWarp / 16;  // m16 tiles per warp
  static constexpr int kNT = BN / 8;             // n8 tiles of S per warp
  static constexpr int kDT = D / 8;              // n8 tiles of O per warp
  using QTile = SmemTile<BM, D>;
  using KVTile = SmemTile<BN, D>;
  static constexpr int kSmemBytes = QTile::kBytes + 2 * KVTile::kBytes;
  static_assert(kRowsPerWarp % 16 == 0, "each warp needs whole m16 tiles");
  static_assert(BN % 16 == 0 && D % 16 == 0, "tiles must be whole k16 steps");
};

// Phase stamps, for experiments only (experiments/phase_stamps.py builds with FLASHSIM_PHASE_STAMPS): lane 0 of
// every warp notes clock64 at each phase boundary, 16 slots a warp in p.ws_ml (a workspace v2 does not use);
// slot 14 holds %globaltimer at entry and slot 15 the SM. A stamp after tensor-core or special-function work
// marks its issue, not its results. Without the macro the stamps compile to nothing.
#ifdef FLASHSIM_PHASE_STAMPS
#define FLASHSIM_PHASE(K)                                                                                  \
  do {                                                                                                     \
    if ((threadIdx.x & 31) == 0)                                                                           \
      flashsim_phase_stamp(reinterpret_cast<unsigned long long*>(p.ws_ml) +                                \
                               (((blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x) *          \
                                    (blockDim.x / 32) + threadIdx.x / 32) * 16,                             \
                           K);                                                                             \
  } while (0)
#else
#define FLASHSIM_PHASE(K) \
  do {                    \
  } while (0)
#endif

template <typename T, int D, int BM, int BN, int WARPS>
__device__ __forceinline__ void forward(const AttnParams& p) {
  FLASHSIM_PHASE(0);  // entry
  using Cfg = Config<T, D, BM, BN, WARPS>;
  using QTile = typename Cfg::QTile;
  using KVTile = typename Cfg::KVTile;
  constexpr int kMT = Cfg::kMT, kNT = Cfg::kNT, kDT = Cfg::kDT, kRW = Cfg::kRowsPerWarp;

  extern __shared__ __align__(128) unsigned char smem[];
  require_dynamic_smem(Cfg::kSmemBytes);
  const uint32_t sQ = smem_u32(smem);
  const uint32_t sK = sQ + QTile::kBytes;
  const uint32_t sV = sK + KVTile::kBytes;

  // Reversed so the Q blocks with the most causal work start first and the tail wave is short.
  const int m_block = gridDim.x - 1 - blockIdx.x;
  const int head = blockIdx.y, batch = blockIdx.z;
  const int kv_head = head / p.kv_group;
  const int m0 = m_block * BM;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane >> 2, t = lane & 3;

  const uint16_t* q = static_cast<const uint16_t*>(p.q) + batch * p.q_batch_stride + head * p.q_head_stride;
  const uint16_t* k = static_cast<const uint16_t*>(p.k) + batch * p.k_batch_stride + kv_head * p.k_head_stride;
  const uint16_t* v = static_cast<const uint16_t*>(p.v) + batch * p.v_batch_stride + kv_head * p.v_head_stride;

  // Blocks past the last key this Q block sees are fully masked; none when causal hides every key.
  const int n_blocks = (visible_keys(p, m0 + BM) + BN - 1) / BN;

  const int k_stride = static_cast<int>(p.k_row_stride), v_stride = static_cast<int>(p.v_row_stride);
  if (p.start_stagger_cycles > 0) stagger_start(p, reinterpret_cast<int*>(smem));
  load_tile_async<Cfg::kThreads, QTile, BM>(sQ, q, m0, static_cast<int>(p.q_row_stride), p.seqlen_q);
  load_tile_async<Cfg::kThreads, KVTile, BN>(sK, k, max(n_blocks - 1, 0) * BN, k_stride, p.seqlen_k);
  cp_async_commit();
  FLASHSIM_PHASE(1);  // Q's and the first K tile's copies issued
  // The loop's first step waits for these copies anyway; waiting here as well covers a Q block with no block
  // to visit (causal, no visible key), whose epilogue reuses sQ while Q's copy could still be landing.
  cp_async_wait<0>();
  FLASHSIM_PHASE(2);  // Q and the first K tile landed

  float acc_o[kMT][kDT][4];
  float row_max[kMT][2], row_sum[kMT][2];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int dt = 0; dt < kDT; ++dt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_o[mt][dt][e] = 0.f;
    row_max[mt][0] = row_max[mt][1] = -INFINITY;
    row_sum[mt][0] = row_sum[mt][1] = 0.f;
  }
  const int warp_row0 = warp * kRW;
  // ldmatrix anchors: lane l addresses row l % 16 (Q), or the rows/chunks of its x4 matrix (K, V).
  const uint32_t q_anchor = QTile::addr(sQ, warp_row0 + (lane & 15), lane >> 4);
  const uint32_t k_anchor = KVTile::addr(sK, (lane & 7) + ((lane >> 4) << 3), (lane >> 3) & 1);
  const uint32_t v_anchor = KVTile::addr(sV, (lane & 7) + (((lane >> 3) & 1) << 3), lane >> 4);

  for (int nb = n_blocks - 1; nb >= 0; --nb) {
    const int n0 = nb * BN;
    cp_async_wait<0>();
    __syncthreads();  // K_nb landed; every warp is done reading V_{nb+1}
    load_tile_async<Cfg::kThreads, KVTile, BN>(sV, v, n0, v_stride, p.seqlen_k);
    cp_async_commit();

    // S = Q K^T (raw scores; the scale is folded into the exponent).
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
      for (int mt = 0; mt < kMT; ++mt)
        ldmatrix_x4(a[mt], QTile::at(q_anchor, mt * 16, kk * 2));
#pragma unroll
      for (int nt2 = 0; nt2 < kNT / 2; ++nt2) {
        uint32_t b[4];  // n8 tile 2*nt2: b[0], b[1]; tile 2*nt2+1: b[2], b[3]
        ldmatrix_x4(b, KVTile::at(k_anchor, nt2 * 16, kk * 2));
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          mma16816<T>(s[mt][2 * nt2], a[mt], b[0], b[1]);
          mma16816<T>(s[mt][2 * nt2 + 1], a[mt], b[2], b[3]);
        }
      }
    }

    if (nb == n_blocks - 1) FLASHSIM_PHASE(3);  // the first step's S = Q K^T issued
    // The causal offset is recomputed per block (opaque): hoisted, it would hold a register across the loop,
    // which makes d64 128x128 spill on sm_80.
    const int offset = opaque(causal_offset(p));
    if (n0 + BN > p.seqlen_k || (p.causal && n0 + BN - 1 > m0 + offset)) {
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int row = m0 + warp_row0 + mt * 16 + g + (e >> 1) * 8;
            const int col = n0 + nt * 8 + t * 2 + (e & 1);
            if (col >= p.seqlen_k || (p.causal && col > row + offset)) s[mt][nt][e] = -INFINITY;
          }
    }

    cp_async_wait<0>();
    __syncthreads();  // V_nb landed; every warp is done reading K_nb
    if (nb == n_blocks - 1) FLASHSIM_PHASE(4);  // the first step's V landed
    if (nb > 0) {
      load_tile_async<Cfg::kThreads, KVTile, BN>(sK, k, n0 - BN, k_stride, p.seqlen_k);
      cp_async_commit();
    }

    // Online softmax; each thread holds rows g and g+8 of each m16 tile, a quad shares a row.
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float mx = row_max[mt][r];
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) mx = fmaxf(mx, fmaxf(s[mt][nt][2 * r], s[mt][nt][2 * r + 1]));
        mx = quad_max(mx);
        // A row with every key masked so far keeps max -inf; offset 0 keeps exp2 at 0 instead of NaN.
        const float m_scaled = mx == -INFINITY ? 0.f : mx * p.scale_log2;
        const float corr = fast_exp2(row_max[mt][r] * p.scale_log2 - m_scaled);
        row_max[mt][r] = mx;
        float sum = 0.f;
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
          s[mt][nt][2 * r] = fast_exp2(s[mt][nt][2 * r] * p.scale_log2 - m_scaled);
          s[mt][nt][2 * r + 1] = fast_exp2(s[mt][nt][2 * r + 1] * p.scale_log2 - m_scaled);
          sum += s[mt][nt][2 * r] + s[mt][nt][2 * r + 1];
        }
        row_sum[mt][r] = row_sum[mt][r] * corr + sum;  // per-thread partial; quad-reduced at the end
#pragma unroll
        for (int dt = 0; dt < kDT; ++dt) {
          acc_o[mt][dt][2 * r] *= corr;
          acc_o[mt][dt][2 * r + 1] *= corr;
        }
      }

    if (nb == n_blocks - 1) FLASHSIM_PHASE(5);  // the first step's softmax issued
    // O += P V: two n8 tiles of P make one k16 A fragment.
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      uint32_t a[kMT][4];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        a[mt][0] = Elem<T>::pack(s[mt][2 * kk][0], s[mt][2 * kk][1]);
        a[mt][1] = Elem<T>::pack(s[mt][2 * kk][2], s[mt][2 * kk][3]);
        a[mt][2] = Elem<T>::pack(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
        a[mt][3] = Elem<T>::pack(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
      }
#pragma unroll
      for (int dt2 = 0; dt2 < kDT / 2; ++dt2) {
        uint32_t b[4];  // d tile 2*dt2: b[0], b[1]; d tile 2*dt2+1: b[2], b[3]
        ldmatrix_x4_trans(b, KVTile::at(v_anchor, kk * 16, dt2 * 2));
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          mma16816<T>(acc_o[mt][2 * dt2], a[mt], b[0], b[1]);
          mma16816<T>(acc_o[mt][2 * dt2 + 1], a[mt], b[2], b[3]);
        }
      }
    }
    if (nb == n_blocks - 1) FLASHSIM_PHASE(6);  // the first step's O += P V issued
  }

  FLASHSIM_PHASE(7);  // the K/V loop done
  // Epilogue: normalise, stage this warp's rows through its own part of sQ (only this warp ever read
  // them), then write 16-byte chunks so each row goes out coalesced.
  uint16_t* sQp = reinterpret_cast<uint16_t*>(smem);
  const int64_t lse_base = (static_cast<int64_t>(batch) * p.heads + head) * p.seqlen_q;
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float l = quad_sum(row_sum[mt][r]);
      const float inv = l > 0.f ? __fdividef(1.f, l) : 0.f;  // MUFU.RCP, no IEEE slow-path call
      const int row_local = warp_row0 + mt * 16 + g + 8 * r;
      const int row = m0 + row_local;
      if (p.lse != nullptr && t == 0 && row < p.seqlen_q)
        p.lse[lse_base + row] = l > 0.f ? (row_max[mt][r] * p.scale_log2 + __log2f(l)) * 0.69314718056f : -INFINITY;
#pragma unroll
      for (int dt = 0; dt < kDT; ++dt)
        *reinterpret_cast<uint32_t*>(sQp + QTile::offset(row_local, dt) + t * 2) =
            Elem<T>::pack(acc_o[mt][dt][2 * r] * inv, acc_o[mt][dt][2 * r + 1] * inv);
    }
  __syncwarp();
  FLASHSIM_PHASE(8);  // O staged in shared memory
  uint16_t* o = static_cast<uint16_t*>(p.o) + batch * p.o_batch_stride + head * p.o_head_stride;
#pragma unroll
  for (int it = 0; it < kRW * kDT / 32; ++it) {
    const int idx = it * 32 + lane;
    const int row_local = warp_row0 + idx / kDT;
    const int chunk = idx % kDT;
    const int row = m0 + row_local;
    if (row < p.seqlen_q)
      *reinterpret_cast<uint4*>(o + row * p.o_row_stride + chunk * 8) =
          *reinterpret_cast<const uint4*>(sQp + QTile::offset(row_local, chunk));
  }
  FLASHSIM_PHASE(9);  // O's stores issued
}

}  // namespace v2
}  // namespace flashsim

// One instantiation: NAME_fwd, grid (ceil(Nq / BM), H, B), WARPS * 32 threads,
// Config::kSmemBytes of dynamic shared memory. Only 2 stages are implemented.
#define FLASHSIM_V2(NAME, DTYPE, D, BM, BN, WARPS, STAGES)                                                  \
  static_assert(STAGES == 2, "v2 implements 2 stages (one K and one V buffer)");                          \
  extern "C" __global__ void __launch_bounds__(WARPS * 32) NAME##_fwd(const __grid_constant__ flashsim::AttnParams p) { \
    flashsim::v2::forward<FLASHSIM_T_##DTYPE, D, BM, BN, WARPS>(p);                                        \
  }
