// Standard (unfused) attention forward, the schedule algorithms/ calls "standard": three kernels that
// meet in global memory, as Theorem 2 of the V1 paper (arXiv 2205.14135) counts them.
//
//   NAME_scores   S = scale * Q K^T, written to global memory in the input dtype      (B, H, Nq, ldS)
//   NAME_softmax  P = softmax(S) row by row in fp32, written over S in the input dtype (same buffer),
//                 and the logsumexp of each row
//   NAME_pv       O = P V                                                            (B, H, Nq, D)
//
// The two products share one tensor-core GEMM: block tile BM x BN (the Tiling's block_m x block_n),
// 4 warps in a 2 x 2 grid (BN = 32: 4 x 1), a ring of STAGES shared-memory buffers holding k-slices of 32
// (algorithms.tiling.smem_bytes('standard') = stages * (BM + BN) * 32 * 2 bytes), cp.async loads and
// mma.sync m16n8k16 with ldmatrix. P V uses a BM x min(BN, D) tile so one block covers a row's head dim.
// ldS (AttnParams.s_row_stride) is Nk rounded up to 32: whole k-slices for P V, whose padding columns the
// softmax writes as zeros. Causal (top-left, as torch SDPA) is applied by the softmax only: the GEMMs do
// the full N^2 work, as an unfused implementation does.
#include "include/common.cuh"

namespace flashsim {
namespace standard {

constexpr int kSlice = 32;  // k elements per pipeline stage

template <bool C, typename A, typename B>
struct Select {
  using type = A;
};
template <typename A, typename B>
struct Select<false, A, B> {
  using type = B;
};

// C = alpha * A B^T (B_NK: B stored [N][K], K contiguous) or alpha * A B (B stored [K][N]), for one
// BM x BN output tile at (m0, n0) of matrices addressed by 32-bit offsets from per-head base pointers.
// Rows of A past M and rows of B past b_rows are read as zeros.
template <typename T, int BM, int BN, int WARPS, int STAGES, bool B_NK>
__device__ __forceinline__ void gemm_tile(const uint16_t* A, int lda, const uint16_t* B, int ldb, int b_rows,
                                          uint16_t* C, int ldc, int M, int N, int K, float alpha, int m0, int n0) {
  static_assert(WARPS == 4, "the GEMM tiles are laid out for 4 warps");
  constexpr int kThreads = WARPS * 32;
  constexpr int kWarpsN = BN >= 64 ? 2 : 1;
  constexpr int kWarpsM = WARPS / kWarpsN;
  constexpr int kWM = BM / kWarpsM, kWN = BN / kWarpsN;
  constexpr int kMT = kWM / 16, kNT = kWN / 8;
  static_assert(kWM % 16 == 0 && kWN % 16 == 0, "warp tile must be whole m16 x n16 steps");
  using ATile = SmemTile<BM, kSlice>;
  using BTile = typename Select<B_NK, SmemTile<BN, kSlice>, SmemTile<kSlice, BN>>::type;

  extern __shared__ __align__(128) unsigned char smem[];
  require_dynamic_smem(STAGES * (ATile::kBytes + BTile::kBytes));
  const uint32_t sA = smem_u32(smem);
  const uint32_t sB = sA + STAGES * ATile::kBytes;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = warp / kWarpsN, wn = warp % kWarpsN;
  const int g = lane >> 2, t = lane & 3;
  const int k_tiles = K / kSlice;  // K is a multiple of 32 (head dim, or ldS)

  auto load_stage = [&](int kt, int buf) {
    const int k0 = kt * kSlice;
    load_tile_async<kThreads, ATile, BM>(sA + buf * ATile::kBytes, A + k0, m0, lda, M);
    if constexpr (B_NK)
      load_tile_async<kThreads, BTile, BN>(sB + buf * BTile::kBytes, B + k0, n0, ldb, b_rows);
    else
      load_tile_async<kThreads, BTile, kSlice>(sB + buf * BTile::kBytes, B + n0, k0, ldb, b_rows);
  };

  float acc[kMT][kNT][4];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.f;

#pragma unroll
  for (int st = 0; st < STAGES - 1; ++st) {
    if (st < k_tiles) load_stage(st, st);
    cp_async_commit();
  }
  for (int kt = 0; kt < k_tiles; ++kt) {
    cp_async_wait<STAGES - 2>();
    __syncthreads();  // slice kt landed; every warp is done with the buffer refilled next
    if (kt + STAGES - 1 < k_tiles) load_stage(kt + STAGES - 1, (kt + STAGES - 1) % STAGES);
    cp_async_commit();
    const int buf = kt % STAGES;
    const uint32_t a_base = sA + buf * ATile::kBytes, b_base = sB + buf * BTile::kBytes;
#pragma unroll
    for (int ks = 0; ks < kSlice / 16; ++ks) {
      uint32_t a[kMT][4];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
        ldmatrix_x4(a[mt], ATile::addr(a_base, wm * kWM + mt * 16 + (lane & 15), ks * 2 + (lane >> 4)));
#pragma unroll
      for (int nt2 = 0; nt2 < kNT / 2; ++nt2) {
        uint32_t b[4];
        if constexpr (B_NK)
          ldmatrix_x4(b, BTile::addr(b_base, wn * kWN + nt2 * 16 + (lane & 7) + ((lane >> 4) << 3),
                                     ks * 2 + ((lane >> 3) & 1)));
        else
          ldmatrix_x4_trans(b, BTile::addr(b_base, ks * 16 + (lane & 7) + (((lane >> 3) & 1) << 3),
                                           (wn * kWN) / 8 + nt2 * 2 + (lane >> 4)));
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          mma16816<T>(acc[mt][2 * nt2], a[mt], b[0], b[1]);
          mma16816<T>(acc[mt][2 * nt2 + 1], a[mt], b[2], b[3]);
        }
      }
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // every warp is done with the stage buffers: the output tile is staged there

  // Epilogue through shared memory, so global stores are whole 128-byte rows: stored straight from the mma
  // fragments, each store instruction would write 16 bytes into each of 8 rows, half of a 32-byte sector
  // each, and the L2 would take every half-sector as a request of its own.
  constexpr int kCStride = BN + 8;  // elements; rows shift by 16 bytes, so fragment writes miss no bank
  static_assert(BM * kCStride * 2 <= STAGES * (ATile::kBytes + BTile::kBytes), "the C tile must fit the stages");
  uint16_t* sC = reinterpret_cast<uint16_t*>(smem);
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int r = 0; r < 2; ++r)
        *reinterpret_cast<uint32_t*>(sC + (wm * kWM + mt * 16 + g + 8 * r) * kCStride + wn * kWN + nt * 8 + t * 2) =
            Elem<T>::pack(alpha * acc[mt][nt][2 * r], alpha * acc[mt][nt][2 * r + 1]);
  __syncthreads();
  // 16 bytes per thread; a chunk that crosses N is written by pairs of columns. For S, N is seqlen_k, which
  // may be odd: the pair that holds column N - 1 also writes column N, inside the row's padding (ldS is Nk
  // rounded up to 32), which the softmax overwrites. Rows are 16-byte aligned (the launcher checks it).
  constexpr int kChunks = BN / 8;
  for (int idx = threadIdx.x; idx < BM * kChunks; idx += kThreads) {
    const int row_local = idx / kChunks, col_local = (idx % kChunks) * 8;
    const int row = m0 + row_local, col = n0 + col_local;
    if (row >= M || col >= N) continue;
    const uint16_t* src = sC + row_local * kCStride + col_local;
    if (col + 8 <= N) {
      *reinterpret_cast<uint4*>(C + row * ldc + col) = *reinterpret_cast<const uint4*>(src);
    } else {
      for (int e = 0; e < 8 && col + e < N; e += 2)
        *reinterpret_cast<uint32_t*>(C + row * ldc + col + e) = *reinterpret_cast<const uint32_t*>(src + e);
    }
  }
}

template <typename T, int D, int BM, int BN, int WARPS, int STAGES>
__device__ __forceinline__ void scores(const AttnParams& p) {
  const int bh = blockIdx.z, batch = bh / p.heads, head = bh % p.heads;
  const uint16_t* q = static_cast<const uint16_t*>(p.q) + batch * p.q_batch_stride + head * p.q_head_stride;
  const uint16_t* k =
      static_cast<const uint16_t*>(p.k) + batch * p.k_batch_stride + (head / p.kv_group) * p.k_head_stride;
  uint16_t* s = static_cast<uint16_t*>(p.s) + static_cast<int64_t>(bh) * p.seqlen_q * p.s_row_stride;
  gemm_tile<T, BM, BN, WARPS, STAGES, true>(q, static_cast<int>(p.q_row_stride), k, static_cast<int>(p.k_row_stride),
                                            p.seqlen_k, s, static_cast<int>(p.s_row_stride), p.seqlen_q, p.seqlen_k, D, p.scale,
                                            blockIdx.y * BM, blockIdx.x * BN);
}

template <typename T, int D, int BM, int BN, int WARPS, int STAGES>
__device__ __forceinline__ void pv(const AttnParams& p) {
  const int bh = blockIdx.z, batch = bh / p.heads, head = bh % p.heads;
  const uint16_t* s = static_cast<const uint16_t*>(p.s) + static_cast<int64_t>(bh) * p.seqlen_q * p.s_row_stride;
  const uint16_t* v =
      static_cast<const uint16_t*>(p.v) + batch * p.v_batch_stride + (head / p.kv_group) * p.v_head_stride;
  uint16_t* o = static_cast<uint16_t*>(p.o) + batch * p.o_batch_stride + head * p.o_head_stride;
  // K = ldS: V rows at or past Nk are zero-filled and the matching P columns are zero.
  gemm_tile<T, BM, BN, WARPS, STAGES, false>(s, static_cast<int>(p.s_row_stride), v, static_cast<int>(p.v_row_stride),
                                             p.seqlen_k, o, static_cast<int>(p.o_row_stride), p.seqlen_q, D,
                                             static_cast<int>(p.s_row_stride), 1.f, blockIdx.y * BM, blockIdx.x * BN);
}

// One warp per row of S (4 rows per 128-thread block), 16-byte accesses. Pass 1 keeps a running
// (max, sum) per lane over chunks of 8, merged across the warp; pass 2 rereads S and writes P over it.
// Columns past the row's last visible key (visible_keys: Nk, fewer when causal) become 0, up to ldS; a
// row that sees no key is all 0 with a logsumexp of -inf.
template <typename T>
__device__ __forceinline__ void softmax(const AttnParams& p) {
  constexpr float kLog2e = 1.4426950408889634f;
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * 4 + threadIdx.x / 32;
  if (row >= static_cast<int64_t>(p.batch) * p.heads * p.seqlen_q) return;
  const int i = static_cast<int>(row % p.seqlen_q);
  const int limit = visible_keys(p, i + 1);
  const int lds = static_cast<int>(p.s_row_stride);
  T* srow = static_cast<T*>(p.s) + row * lds;

  float m = -INFINITY, l = 0.f;
  for (int c = lane * 8; c < limit; c += 256) {
    const uint4 raw = *reinterpret_cast<const uint4*>(srow + c);
    const T* x = reinterpret_cast<const T*>(&raw);
    float v[8], cm = -INFINITY;
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      v[e] = c + e < limit ? Elem<T>::to_float(x[e]) : -INFINITY;
      cm = fmaxf(cm, v[e]);
    }
    const float mn = fmaxf(m, cm);  // finite: column c < limit
    float add = 0.f;
#pragma unroll
    for (int e = 0; e < 8; ++e) add += fast_exp2((v[e] - mn) * kLog2e);
    l = l * fast_exp2((m - mn) * kLog2e) + add;
    m = mn;
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const float mo = __shfl_xor_sync(0xffffffffu, m, off), lo = __shfl_xor_sync(0xffffffffu, l, off);
    const float mn = fmaxf(m, mo);
    if (mn != -INFINITY) l = l * fast_exp2((m - mn) * kLog2e) + lo * fast_exp2((mo - mn) * kLog2e);
    m = mn;
  }
  const float inv_l = l > 0.f ? __fdividef(1.f, l) : 0.f;  // l >= 1 unless the row sees no key
  if (lane == 0 && p.lse != nullptr) p.lse[row] = l > 0.f ? m + __logf(l) : -INFINITY;  // S is already scaled

  for (int c = lane * 8; c < lds; c += 256) {
    const uint4 raw = c < limit ? *reinterpret_cast<const uint4*>(srow + c) : make_uint4(0, 0, 0, 0);
    const T* x = reinterpret_cast<const T*>(&raw);
    uint4 out;
    uint32_t* o = reinterpret_cast<uint32_t*>(&out);
#pragma unroll
    for (int e = 0; e < 8; e += 2) {
      const float p0 = c + e < limit ? fast_exp2((Elem<T>::to_float(x[e]) - m) * kLog2e) * inv_l : 0.f;
      const float p1 = c + e + 1 < limit ? fast_exp2((Elem<T>::to_float(x[e + 1]) - m) * kLog2e) * inv_l : 0.f;
      o[e / 2] = Elem<T>::pack(p0, p1);
    }
    *reinterpret_cast<uint4*>(srow + c) = out;
  }
}

}  // namespace standard
}  // namespace flashsim

// One instantiation: NAME_scores grid (ceil(Nk / BN), ceil(Nq / BM), B * H); NAME_softmax grid
// (ceil(B * H * Nq / 4)), 128 threads, no shared memory; NAME_pv grid (ceil(D / min(BN, D)), ceil(Nq / BM),
// B * H). The GEMMs run WARPS * 32 threads with STAGES * (BM + BN) * 32 * 2 bytes of dynamic shared
// memory (P V: BN replaced by min(BN, D)).
#define FLASHSIM_STANDARD(NAME, DTYPE, D, BM, BN, WARPS, STAGES)                                              \
  extern "C" __global__ void __launch_bounds__(WARPS * 32)                                                   \
      NAME##_scores(const __grid_constant__ flashsim::AttnParams p) {                                        \
    flashsim::standard::scores<FLASHSIM_T_##DTYPE, D, BM, BN, WARPS, STAGES>(p);                             \
  }                                                                                                          \
  extern "C" __global__ void __launch_bounds__(128) NAME##_softmax(const __grid_constant__ flashsim::AttnParams p) { \
    flashsim::standard::softmax<FLASHSIM_T_##DTYPE>(p);                                                      \
  }                                                                                                          \
  extern "C" __global__ void __launch_bounds__(WARPS * 32) NAME##_pv(const __grid_constant__ flashsim::AttnParams p) { \
    flashsim::standard::pv<FLASHSIM_T_##DTYPE, D, BM, ((BN) < (D) ? (BN) : (D)), WARPS, STAGES>(p);          \
  }
