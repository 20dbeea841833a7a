// FlashAttention-2 backward (Dao 2023, arXiv 2307.08691, Algorithm 2), the schedule algorithms/ calls
// "v2-bwd" (algorithms/schedules/v2_bwd.py). Five kernels per instantiation:
//
//   NAME_dot_do_o    per Q block: D = rowsum(dO * O) in fp32, and the fp32 dQ accumulator zeroed
//   NAME_bwd         one thread block per (K/V block j, batch, head): K_j and V_j in shared memory, dK_j and
//                    dV_j in registers; for each Q block i that sees block j (causal: from the diagonal):
//                      S = Q_i K_j^T;  P = exp(scale S - LSE_i)       recomputed from the forward's logsumexp
//                      dP = dO_i V_j^T;  dS = P (dP - D_i)
//                      dV_j += P^T dO_i;  dK_j += dS^T Q_i;  dQaccum_i += dS K_j   (fp32 red.global.add)
//   NAME_convert_dq  dQ = scale * dQaccum in the input dtype
//   NAME_zero_dkv    GQA only: the fp32 dK, dV accumulators of each K/V head zeroed ...
//   NAME_convert_dkv ... and converted, after the query heads of a group added their dK_j, dV_j into them
//
// The softmax scale stays out of dS (the 16-bit dS keeps P (dP - D)'s magnitude, as FA2 does): dK_j is
// scaled once in registers before it leaves, dQ when it is converted.
//
// Shared memory (what algorithms/schedules/v2_bwd.py's smem_bytes counts): Q_i double-buffered, dO_i, K_j,
// V_j, and P and dS, which every warp writes and other warps read transposed for dV and dK. Q_{i+1} streams
// in (cp.async) during step i; dO_{i+1} once every warp is done with dO_i (after dV).
//
// One step, three barriers: [Q_i, dO_i landed] S, dP, P, dS (P and dS to shared memory) [P, dS complete]
// dV [dO_i free: load dO_{i+1}] dK, dQ, as the schedule's step (computing dS before dV lets one barrier cover
// both staged tiles).
//
// Every product is a warp-tiled mma.sync m16n8k16 with both operands read by ldmatrix from XOR-swizzled
// tiles; an operand stored with its reduction dimension along rows (P^T, dS^T, dO, Q, K as B of dS K) uses
// ldmatrix.trans. Warp grids are FA2's (AtomLayoutMSdP, AtomLayoutNdKV, AtomLayoutMdQ) for its tiles.
#include "include/common.cuh"

namespace flashsim {

// Arguments of the backward's kernels; kernels/v2_bwd.py mirrors it. Every tensor is contiguous:
// q, o, dout, dq (B, H, Nq, D); k, v, dk, dv (B, Hkv, Nk, D); lse, dpsum (B, H, Nq); dq_accum
// (B, H, Nq, D) fp32; dk_accum, dv_accum (B, Hkv, Nk, D) fp32 (GQA only, else null).
struct BwdParams {
  const void* q;
  const void* k;
  const void* v;
  const void* o;
  const void* dout;
  const float* lse;
  float* dpsum;  // D = rowsum(dO * O)
  float* dq_accum;
  float* dk_accum;
  float* dv_accum;
  void* dq;
  void* dk;
  void* dv;
  int32_t batch, heads, kv_group, seqlen_q, seqlen_k;
  int32_t causal;  // bottom-right aligned, as the forward
  float scale;
  float scale_log2;
};
static_assert(sizeof(BwdParams) == 136, "BwdParams layout changed: update kernels/v2_bwd.py");

namespace v2bwd {

// FA2's warp grids (rows of S / dP, of dK / dV, of dQ), as algorithms/schedules/v2_bwd.py's table.
constexpr int sdp_rows(int d, int bm, int bn) { return (bm == 64 && !(d == 128 && bn == 64)) ? 2 : 4; }
constexpr int dkv_rows(int d, int bm, int bn) { return (d == 128 && bn == 64) ? 2 : 4; }
constexpr int dq_rows(int d, int bm, int bn) { return (d == 128) ? 2 : 4; }

// C (WM x WN, per warp) += A (WM x K) B (K x WN). A_T: A is stored K-major (tile row = k), else M-major;
// B_T: B is stored K-major (tile row = k), else N-major. m0, n0: the warp's first row of C and column; in
// every warp grid here they are multiples of 32, so the anchors' chunk bits stay clear of the even chunk
// steps that SmemTile::at XORs in.
template <typename T, int WM, int WN, int K, bool A_T, bool B_T, typename ATile, typename BTile>
__device__ __forceinline__ void warp_gemm(float (&c)[WM / 16][WN / 8][4], uint32_t a_base, int m0, uint32_t b_base,
                                          int n0, int lane) {
  static_assert(WM % 16 == 0 && WN % 16 == 0 && K % 16 == 0, "whole m16 / n16 / k16 steps");
  const uint32_t a_anchor = A_T ? ATile::addr(a_base, (lane & 7) + ((lane >> 4) << 3), m0 / 8 + ((lane >> 3) & 1))
                                : ATile::addr(a_base, m0 + (lane & 15), lane >> 4);
  const uint32_t b_anchor = B_T ? BTile::addr(b_base, (lane & 7) + (((lane >> 3) & 1) << 3), n0 / 8 + (lane >> 4))
                                : BTile::addr(b_base, n0 + (lane & 7) + ((lane >> 4) << 3), (lane >> 3) & 1);
#pragma unroll
  for (int kk = 0; kk < K / 16; ++kk) {
    uint32_t a[WM / 16][4];
#pragma unroll
    for (int mt = 0; mt < WM / 16; ++mt) {
      if constexpr (A_T)
        ldmatrix_x4_trans(a[mt], ATile::at(a_anchor, kk * 16, mt * 2));
      else
        ldmatrix_x4(a[mt], ATile::at(a_anchor, mt * 16, kk * 2));
    }
#pragma unroll
    for (int nt2 = 0; nt2 < WN / 16; ++nt2) {
      uint32_t b[4];  // n8 tile 2*nt2: b[0], b[1]; tile 2*nt2+1: b[2], b[3]
      if constexpr (B_T)
        ldmatrix_x4_trans(b, BTile::at(b_anchor, kk * 16, nt2 * 2));
      else
        ldmatrix_x4(b, BTile::at(b_anchor, nt2 * 16, kk * 2));
#pragma unroll
      for (int mt = 0; mt < WM / 16; ++mt) {
        mma16816<T>(c[mt][2 * nt2], a[mt], b[0], b[1]);
        mma16816<T>(c[mt][2 * nt2 + 1], a[mt], b[2], b[3]);
      }
    }
  }
}

template <int M, int N>
__device__ __forceinline__ void zero(float (&c)[M][N][4]) {
#pragma unroll
  for (int i = 0; i < M; ++i)
#pragma unroll
    for (int j = 0; j < N; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) c[i][j][e] = 0.f;
}

template <typename T, int D, int BM, int BN, int WARPS>
struct Config {
  static constexpr int kThreads = WARPS * 32;
  // S and dP: BM x BN; dK and dV: BN x D; dQ: BM x D. Warp (wr, wc) of an R x (WARPS / R) grid.
  static constexpr int kSdpR = sdp_rows(D, BM, BN), kSdpC = WARPS / kSdpR;
  static constexpr int kKvR = dkv_rows(D, BM, BN), kKvC = WARPS / kKvR;
  static constexpr int kDqR = dq_rows(D, BM, BN), kDqC = WARPS / kDqR;
  static constexpr int kSdpWM = BM / kSdpR, kSdpWN = BN / kSdpC;
  static constexpr int kKvWM = BN / kKvR, kKvWN = D / kKvC;
  static constexpr int kDqWM = BM / kDqR, kDqWN = D / kDqC;
  using QTile = SmemTile<BM, D>;   // Q, dO
  using KVTile = SmemTile<BN, D>;  // K, V
  using PTile = SmemTile<BM, BN>;  // P, dS
  // dP's GEMM straight after S's: measured faster at d128 (64 x 128 tiles); at d64 (128 x 128) it spills.
  static constexpr bool kDpFirst = BM * BN <= 64 * 128;
  static constexpr int kSmemBytes = 3 * QTile::kBytes + 2 * KVTile::kBytes + 2 * PTile::kBytes;
  static_assert(WARPS % kSdpR == 0 && WARPS % kKvR == 0 && WARPS % kDqR == 0, "warp grids must tile the warps");
  static_assert(kSdpWM % 16 == 0 && kSdpWN % 16 == 0 && kKvWM % 16 == 0 && kKvWN % 16 == 0 && kDqWM % 16 == 0 &&
                    kDqWN % 16 == 0,
                "warp tiles must be whole m16 x n16 tiles");
};

template <typename T, int D, int BM, int BN, int WARPS>
__device__ __forceinline__ void backward(const BwdParams& p) {
  using Cfg = Config<T, D, BM, BN, WARPS>;
  using QTile = typename Cfg::QTile;
  using KVTile = typename Cfg::KVTile;
  using PTile = typename Cfg::PTile;
  constexpr int kThreads = Cfg::kThreads;
  constexpr int kSMT = Cfg::kSdpWM / 16, kSNT = Cfg::kSdpWN / 8;
  constexpr int kKMT = Cfg::kKvWM / 16, kKNT = Cfg::kKvWN / 8;
  constexpr int kQMT = Cfg::kDqWM / 16, kQNT = Cfg::kDqWN / 8;

  extern __shared__ __align__(128) unsigned char smem[];
  require_dynamic_smem(Cfg::kSmemBytes);
  const uint32_t sQ0 = smem_u32(smem);
  const uint32_t sQ1 = sQ0 + QTile::kBytes;
  const uint32_t sdO = sQ1 + QTile::kBytes;
  const uint32_t sK = sdO + QTile::kBytes;
  const uint32_t sV = sK + KVTile::kBytes;
  const uint32_t sP = sV + KVTile::kBytes;
  const uint32_t sdS = sP + PTile::kBytes;
  uint16_t* const smem16 = reinterpret_cast<uint16_t*>(smem);
  uint16_t* const sP_ptr = smem16 + (sP - sQ0) / 2;
  uint16_t* const sdS_ptr = smem16 + (sdS - sQ0) / 2;

  const int n_block = blockIdx.x, batch = blockIdx.y, head = blockIdx.z;
  const int kv_head = head / p.kv_group;
  const int n0 = n_block * BN;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane >> 2, t = lane & 3;

  const int64_t q_off = ((int64_t)batch * p.heads + head) * p.seqlen_q * D;
  const int64_t kv_off = ((int64_t)batch * p.heads / p.kv_group + kv_head) * p.seqlen_k * D;
  const uint16_t* q = static_cast<const uint16_t*>(p.q) + q_off;
  const uint16_t* dout = static_cast<const uint16_t*>(p.dout) + q_off;
  const uint16_t* k = static_cast<const uint16_t*>(p.k) + kv_off;
  const uint16_t* v = static_cast<const uint16_t*>(p.v) + kv_off;
  const float* lse = p.lse + ((int64_t)batch * p.heads + head) * p.seqlen_q;
  const float* dpsum = p.dpsum + ((int64_t)batch * p.heads + head) * p.seqlen_q;
  float* dq_accum = p.dq_accum + q_off;

  // Bottom-right causal: query row r sees keys up to r + shift; Q blocks before `first` see none of this block.
  const int shift = p.seqlen_k - p.seqlen_q;
  const int first = (p.causal && n0 - shift > 0) ? (n0 - shift) / BM : 0;
  const int n_q_blocks = (p.seqlen_q + BM - 1) / BM;

  load_tile_async<kThreads, KVTile, BN>(sK, k, n0, D, p.seqlen_k);
  load_tile_async<kThreads, KVTile, BN>(sV, v, n0, D, p.seqlen_k);
  if (first < n_q_blocks) {
    load_tile_async<kThreads, QTile, BM>(sQ0, q, first * BM, D, p.seqlen_q);
    load_tile_async<kThreads, QTile, BM>(sdO, dout, first * BM, D, p.seqlen_q);
  }
  cp_async_commit();

  float acc_dk[kKMT][kKNT][4], acc_dv[kKMT][kKNT][4];
  zero(acc_dk);
  zero(acc_dv);

  const int sdp_m0 = (warp % Cfg::kSdpR) * Cfg::kSdpWM, sdp_n0 = (warp / Cfg::kSdpR) * Cfg::kSdpWN;
  const int kv_m0 = (warp % Cfg::kKvR) * Cfg::kKvWM, kv_n0 = (warp / Cfg::kKvR) * Cfg::kKvWN;
  const int dq_m0 = (warp % Cfg::kDqR) * Cfg::kDqWM, dq_n0 = (warp / Cfg::kDqR) * Cfg::kDqWN;

  for (int mb = first; mb < n_q_blocks; ++mb) {
    const int m0 = mb * BM;
    const uint32_t sQ = ((mb - first) & 1) ? sQ1 : sQ0;
    // LSE and D of this thread's rows of S, read before the barrier so that their latency hides behind it.
    float lse2[kSMT][2], dsum[kSMT][2];
#pragma unroll
    for (int mt = 0; mt < kSMT; ++mt)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = m0 + sdp_m0 + mt * 16 + g + 8 * r;
        lse2[mt][r] = row < p.seqlen_q ? lse[row] : -INFINITY;
        dsum[mt][r] = row < p.seqlen_q ? dpsum[row] : 0.f;
      }

    cp_async_wait<0>();
    __syncthreads();  // Q_i and dO_i landed; every warp is done with step i-1 (the other Q buffer, P, dS)
    if (mb + 1 < n_q_blocks) {
      load_tile_async<kThreads, QTile, BM>(sQ == sQ0 ? sQ1 : sQ0, q, m0 + BM, D, p.seqlen_q);
      cp_async_commit();
    }

    // LSE in log2 units; +inf where a row sees no key or lies past the end, so that its P is 0.
#pragma unroll
    for (int mt = 0; mt < kSMT; ++mt)
#pragma unroll
      for (int r = 0; r < 2; ++r)
        lse2[mt][r] = lse2[mt][r] == -INFINITY ? INFINITY : lse2[mt][r] * 1.4426950408889634f;

    // S = Q_i K_j^T, P = exp2(S scale log2(e) - LSE log2(e)), written to sP for dV. dP = dO_i V_j^T runs
    // right after S where that does not make ptxas spill (one long run of mma for the scheduler), else
    // after P is stored.
    float s[kSMT][kSNT][4], dp[kSMT][kSNT][4];
    zero(s);
    zero(dp);
    warp_gemm<T, Cfg::kSdpWM, Cfg::kSdpWN, D, false, false, QTile, KVTile>(s, sQ, sdp_m0, sK, sdp_n0, lane);
    if constexpr (Cfg::kDpFirst)
      warp_gemm<T, Cfg::kSdpWM, Cfg::kSdpWN, D, false, false, QTile, KVTile>(dp, sdO, sdp_m0, sV, sdp_n0, lane);
#pragma unroll
    for (int mt = 0; mt < kSMT; ++mt)
#pragma unroll
      for (int nt = 0; nt < kSNT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mt][nt][e] = fast_exp2(s[mt][nt][e] * p.scale_log2 - lse2[mt][e >> 1]);
    // Only tiles that cross the causal diagonal or the end of K are masked: a uniform branch, kept apart from
    // the exponentials so unmasked tiles pay no per-element compare.
    if (n0 + BN > p.seqlen_k || (p.causal && n0 + BN - 1 > m0 + shift)) {
      const int row_base = m0 + sdp_m0 + g + shift, col_base = n0 + sdp_n0 + t * 2;
#pragma unroll
      for (int mt = 0; mt < kSMT; ++mt)
#pragma unroll
        for (int nt = 0; nt < kSNT; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int col = col_base + nt * 8 + (e & 1);
            if (col >= p.seqlen_k || (p.causal && col > row_base + mt * 16 + (e >> 1) * 8)) s[mt][nt][e] = 0.f;
          }
    }
#pragma unroll
    for (int mt = 0; mt < kSMT; ++mt)
#pragma unroll
      for (int nt = 0; nt < kSNT; ++nt)
#pragma unroll
        for (int r = 0; r < 2; ++r)
          *reinterpret_cast<uint32_t*>(sP_ptr + PTile::offset(sdp_m0 + mt * 16 + g + 8 * r, (sdp_n0 >> 3) + nt) +
                                       t * 2) = Elem<T>::pack(s[mt][nt][2 * r], s[mt][nt][2 * r + 1]);

    if constexpr (!Cfg::kDpFirst)
      warp_gemm<T, Cfg::kSdpWM, Cfg::kSdpWN, D, false, false, QTile, KVTile>(dp, sdO, sdp_m0, sV, sdp_n0, lane);
    // dS = P (dP - D_i), written to sdS for dK and dQ.
#pragma unroll
    for (int mt = 0; mt < kSMT; ++mt)
#pragma unroll
      for (int nt = 0; nt < kSNT; ++nt)
#pragma unroll
        for (int r = 0; r < 2; ++r)
          *reinterpret_cast<uint32_t*>(sdS_ptr + PTile::offset(sdp_m0 + mt * 16 + g + 8 * r, (sdp_n0 >> 3) + nt) +
                                       t * 2) = Elem<T>::pack(s[mt][nt][2 * r] * (dp[mt][nt][2 * r] - dsum[mt][r]),
                                                              s[mt][nt][2 * r + 1] * (dp[mt][nt][2 * r + 1] - dsum[mt][r]));
    __syncthreads();  // P and dS complete

    // dV_j += P^T dO_i, then dO's buffer is free for dO_{i+1}.
    warp_gemm<T, Cfg::kKvWM, Cfg::kKvWN, BM, true, true, PTile, QTile>(acc_dv, sP, kv_m0, sdO, kv_n0, lane);
    __syncthreads();  // every warp is done with dO_i
    if (mb + 1 < n_q_blocks) {
      load_tile_async<kThreads, QTile, BM>(sdO, dout, m0 + BM, D, p.seqlen_q);
      cp_async_commit();
    }

    // dK_j += dS^T Q_i.
    warp_gemm<T, Cfg::kKvWM, Cfg::kKvWN, BM, true, true, PTile, QTile>(acc_dk, sdS, kv_m0, sQ, kv_n0, lane);

    // dQaccum_i += dS K_j (fp32 reductions in the L2; the result is not read back).
    {
      float dq[kQMT][kQNT][4];
      zero(dq);
      warp_gemm<T, Cfg::kDqWM, Cfg::kDqWN, BN, false, true, PTile, KVTile>(dq, sdS, dq_m0, sK, dq_n0, lane);
#pragma unroll
      for (int mt = 0; mt < kQMT; ++mt)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int row = m0 + dq_m0 + mt * 16 + g + 8 * r;
          if (row < p.seqlen_q) {
            float* dst = dq_accum + (int64_t)row * D + dq_n0 + t * 2;
#pragma unroll
            for (int nt = 0; nt < kQNT; ++nt) {
#if __CUDA_ARCH__ >= 900
              atomicAdd(reinterpret_cast<float2*>(dst + nt * 8), make_float2(dq[mt][nt][2 * r], dq[mt][nt][2 * r + 1]));
#else
              atomicAdd(dst + nt * 8, dq[mt][nt][2 * r]);
              atomicAdd(dst + nt * 8 + 1, dq[mt][nt][2 * r + 1]);
#endif
            }
          }
        }
    }
  }

  // Epilogue: dK_j (scaled) and dV_j leave once; with GQA they are added into the K/V head's fp32 sums.
#pragma unroll
  for (int mt = 0; mt < kKMT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = n0 + kv_m0 + mt * 16 + g + 8 * r;
      if (row >= p.seqlen_k) continue;
      const int64_t base = kv_off + (int64_t)row * D + kv_n0 + t * 2;
#pragma unroll
      for (int nt = 0; nt < kKNT; ++nt) {
        const float k0 = acc_dk[mt][nt][2 * r] * p.scale, k1 = acc_dk[mt][nt][2 * r + 1] * p.scale;
        const float v0 = acc_dv[mt][nt][2 * r], v1 = acc_dv[mt][nt][2 * r + 1];
        if (p.kv_group > 1) {
          atomicAdd(p.dk_accum + base + nt * 8, k0);
          atomicAdd(p.dk_accum + base + nt * 8 + 1, k1);
          atomicAdd(p.dv_accum + base + nt * 8, v0);
          atomicAdd(p.dv_accum + base + nt * 8 + 1, v1);
        } else {
          *reinterpret_cast<uint32_t*>(static_cast<uint16_t*>(p.dk) + base + nt * 8) = Elem<T>::pack(k0, k1);
          *reinterpret_cast<uint32_t*>(static_cast<uint16_t*>(p.dv) + base + nt * 8) = Elem<T>::pack(v0, v1);
        }
      }
    }
}

// D = rowsum(dO * O) over BM rows per block, and those rows of dQaccum zeroed. Each thread reads 8-element
// chunks; the D / 8 lanes of a row reduce with shuffles.
template <typename T, int D, int BM, int WARPS>
__device__ __forceinline__ void dot_do_o(const BwdParams& p) {
  constexpr int kChunks = D / 8, kRowsPerPass = WARPS * 32 / kChunks;
  static_assert(32 % kChunks == 0, "a row's chunks must fit in a warp");
  const int row0 = blockIdx.x * BM;
  const int64_t bh = (int64_t)blockIdx.z * p.heads + blockIdx.y;
  const uint16_t* o = static_cast<const uint16_t*>(p.o) + bh * p.seqlen_q * D;
  const uint16_t* dout = static_cast<const uint16_t*>(p.dout) + bh * p.seqlen_q * D;
  const int chunk = threadIdx.x % kChunks;
  for (int r = threadIdx.x / kChunks; r < BM; r += kRowsPerPass) {
    const int row = row0 + r;
    float sum = 0.f;
    if (row < p.seqlen_q) {
      const uint4 a = *reinterpret_cast<const uint4*>(o + (int64_t)row * D + chunk * 8);
      const uint4 b = *reinterpret_cast<const uint4*>(dout + (int64_t)row * D + chunk * 8);
      const T* x = reinterpret_cast<const T*>(&a);
      const T* y = reinterpret_cast<const T*>(&b);
#pragma unroll
      for (int e = 0; e < 8; ++e) sum += Elem<T>::to_float(x[e]) * Elem<T>::to_float(y[e]);
      float4* dq = reinterpret_cast<float4*>(p.dq_accum + (bh * p.seqlen_q + row) * D + chunk * 8);
      dq[0] = make_float4(0.f, 0.f, 0.f, 0.f);
      dq[1] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
#pragma unroll
    for (int m = kChunks / 2; m > 0; m /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, m);
    if (chunk == 0 && row < p.seqlen_q) p.dpsum[bh * p.seqlen_q + row] = sum;
  }
}

// n fp32 values * scale -> T, 8 per thread (n is a multiple of 8: whole rows of D elements).
template <typename T>
__device__ __forceinline__ void convert(const float* src, void* dst, int64_t n, float scale) {
  const int64_t i = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * 8;
  if (i >= n) return;
  const float4 a = *reinterpret_cast<const float4*>(src + i);
  const float4 b = *reinterpret_cast<const float4*>(src + i + 4);
  uint4 out;
  out.x = Elem<T>::pack(a.x * scale, a.y * scale);
  out.y = Elem<T>::pack(a.z * scale, a.w * scale);
  out.z = Elem<T>::pack(b.x * scale, b.y * scale);
  out.w = Elem<T>::pack(b.z * scale, b.w * scale);
  *reinterpret_cast<uint4*>(static_cast<uint16_t*>(dst) + i) = out;
}

__device__ __forceinline__ void zero_dkv(const BwdParams& p, int64_t n) {
  const int64_t i = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * 4;
  if (i >= n) return;
  *reinterpret_cast<float4*>(p.dk_accum + i) = make_float4(0.f, 0.f, 0.f, 0.f);
  *reinterpret_cast<float4*>(p.dv_accum + i) = make_float4(0.f, 0.f, 0.f, 0.f);
}

}  // namespace v2bwd
}  // namespace flashsim

// One instantiation: NAME_dot_do_o grid (ceil(Nq / BM), H, B); NAME_bwd grid (ceil(Nk / BN), B, H) with
// Config::kSmemBytes of dynamic shared memory; NAME_convert_dq (B H Nq D / 8 threads), NAME_zero_dkv
// (B Hkv Nk D / 4), NAME_convert_dkv (B Hkv Nk D / 8), in blocks of WARPS * 32 threads.
#define FLASHSIM_V2_BWD(NAME, DTYPE, D, BM, BN, WARPS, STAGES)                                                 \
  static_assert(STAGES == 2, "v2-bwd implements a double-buffered Q");                                       \
  extern "C" __global__ void __launch_bounds__(WARPS * 32)                                                   \
      NAME##_dot_do_o(const __grid_constant__ flashsim::BwdParams p) {                                       \
    flashsim::v2bwd::dot_do_o<FLASHSIM_T_##DTYPE, D, BM, WARPS>(p);                                          \
  }                                                                                                          \
  extern "C" __global__ void __launch_bounds__(WARPS * 32, 1)                                                \
      NAME##_bwd(const __grid_constant__ flashsim::BwdParams p) {                                            \
    flashsim::v2bwd::backward<FLASHSIM_T_##DTYPE, D, BM, BN, WARPS>(p);                                      \
  }                                                                                                          \
  extern "C" __global__ void __launch_bounds__(WARPS * 32)                                                   \
      NAME##_convert_dq(const __grid_constant__ flashsim::BwdParams p) {                                     \
    flashsim::v2bwd::convert<FLASHSIM_T_##DTYPE>(p.dq_accum, p.dq, (int64_t)p.batch * p.heads * p.seqlen_q * D, \
                                                 p.scale);                                                   \
  }                                                                                                          \
  extern "C" __global__ void __launch_bounds__(WARPS * 32)                                                   \
      NAME##_zero_dkv(const __grid_constant__ flashsim::BwdParams p) {                                       \
    flashsim::v2bwd::zero_dkv(p, (int64_t)p.batch * (p.heads / p.kv_group) * p.seqlen_k * D);                \
  }                                                                                                          \
  extern "C" __global__ void __launch_bounds__(WARPS * 32)                                                   \
      NAME##_convert_dkv(const __grid_constant__ flashsim::BwdParams p) {                                    \
    const int64_t n = (int64_t)p.batch * (p.heads / p.kv_group) * p.seqlen_k * D;                            \
    flashsim::v2bwd::convert<FLASHSIM_T_##DTYPE>(p.dk_accum, p.dk, n, 1.f);                                  \
    flashsim::v2bwd::convert<FLASHSIM_T_##DTYPE>(p.dv_accum, p.dv, n, 1.f);                                  \
  }
