// Decode attention: Nq = 1..16 new queries per sequence against a K/V cache, dense or paged, with the
// schedule algorithms/schedules/decode.py models (FA2's split-KV kernel with the query heads of a K/V head
// packed into one tile).
//
// Grid (splits, row blocks, batch x kv_heads), WARPS * 32 threads. A tile's BM rows are the packed query rows
// of one K/V head, head-major: tile row r of row block i is packed row pr = i * BM + r, query head
// hk * group + pr / Nq, query pr % Nq. Warp w owns tile rows [16 w, 16 w + 16), and a warp whose rows are all
// padding skips the math but still copies and synchronises; a tile of at most 16 rows (one query, GQA group
// <= 16) instead gives every warp those rows and a quarter of each block's keys, and merges the warps at the end.
//
// The K/V blocks of a sequence (BN keys each) are cut into `splits` ranges exactly as algorithms/splitkv.py's
// split_range: ceil(blocks / splits) per split, a causal tile stopping at its last visible block. Each split
// keeps a ring of STAGES (K, V) buffer pairs filled by cp.async, STAGES - 1 blocks ahead of the math, so two
// blocks per thread block are in flight while one is multiplied. With one split O and the logsumexp are
// written directly; with several, each split writes its normalised O_s and LSE_s in fp32 to the workspace
// (row s * Nq + q of each (batch, head)) and the combine kernel merges them.
//
// Paged caches (vLLM layout: pages (num_pages, page_size, Hkv, D), int32 block_table (B, max_pages)): a key row
// n of sequence b lives in page block_table[b][n >> page_shift] at row n & page_mask. Each thread copies the
// same rows of every block, so it reads the page numbers of the block after next into registers while the
// current block is multiplied; the copy that needs them never waits on the table. A dense cache is the same
// code with "page" = batch index and a page size of 2^31.
#include "include/common.cuh"

namespace flashsim {
namespace decode {

struct DecodeParams {
  const void* q;           // (B, H, Nq, D)
  const void* k;           // dense (B, Hkv, Nk, D) or paged (num_pages, page_size, Hkv, D)
  const void* v;           // as k
  void* o;                 // (B, H, Nq, D), input dtype
  float* lse;              // (B, H, Nq) natural-log logsumexp
  float* ws_o;             // splits > 1: (B, H, splits * Nq, D) fp32
  float* ws_lse;           // splits > 1: (B, H, splits * Nq) fp32
  const int* block_table;  // paged: (B, table_stride) int32 page numbers; null: dense
  const int* seqlens;      // (B,) int32 keys per sequence, or null: every sequence has seqlen_k
  // Strides in elements. k/v "page" stride: the batch stride when dense, the page stride when paged.
  int64_t q_batch_stride, q_head_stride, q_row_stride;
  int64_t k_page_stride, k_head_stride, k_row_stride;
  int64_t v_page_stride, v_head_stride, v_row_stride;
  int64_t o_batch_stride, o_head_stride, o_row_stride;
  int64_t table_stride;
  int32_t batch, heads, kv_heads, group, seqlen_q, seqlen_k;
  int32_t page_shift;  // log2(page size); 31 when dense
  int32_t causal;      // bottom-right: query i sees keys j <= i + Nk - Nq
  int32_t num_splits, row_blocks;  // row_blocks: the grid's y (recorded for debugging; the kernel reads blockIdx)
  float scale_log2;  // softmax scale * log2(e)
  int32_t pad_;
};
static_assert(sizeof(DecodeParams) == 224, "DecodeParams layout changed: update kernels/decode.py");

template <int D, int BN, int THREADS>
struct KVCopy {  // how THREADS threads split one BN x D tile into 16-byte copies
  static constexpr int kChunks = D / 8;
  static constexpr int kRowStep = THREADS / kChunks;
  static constexpr int kPasses = BN / kRowStep;
  static_assert(THREADS % kChunks == 0 && BN % kRowStep == 0, "copies must divide evenly");
};

template <typename T, int D, int BM, int BN, int WARPS, int STAGES>
struct Config {
  static constexpr int kThreads = WARPS * 32;
  static constexpr int kNT = BN / 8;  // n8 tiles of S per warp
  static constexpr int kDT = D / 8;   // n8 tiles of O per warp
  using QTile = SmemTile<BM, D>;
  using KVTile = SmemTile<BN, D>;
  using Copy = KVCopy<D, BN, kThreads>;
  static constexpr int kStageBytes = 2 * KVTile::kBytes;
  static constexpr int kSmemBytes = QTile::kBytes + STAGES * kStageBytes;
  static_assert(BM == 16 * WARPS, "each warp owns one m16 tile of rows");
  static_assert(BN % 16 == 0 && D % 16 == 0 && STAGES >= 2, "whole k16 steps and at least two stages");
};

// Which split-KV blocks tile (b, row block) visits, as algorithms/splitkv.py's split_range.
constexpr int MAX_SPLITS = 128;  // algorithms/splitkv.py, MAX_SPLITS (the combine's shared memory holds as many)

struct BlockRange {
  int first, count;
};

__device__ __forceinline__ int cdiv_i(int a, int b) { return (a + b - 1) / b; }

// Last query index among packed rows [row0, row0 + rows) (algorithms/schedules/decode.py, query_range).
__device__ __forceinline__ int last_query(int nq, int row0, int rows) {
  if (rows >= nq) return nq - 1;
  int last = 0;
  for (int r = 0; r < rows; ++r) last = max(last, (row0 + r) % nq);
  return last;
}

template <int BN>
__device__ __forceinline__ BlockRange split_blocks(const DecodeParams& p, int nk, int q_last, int split) {
  const int blocks = cdiv_i(nk, BN);
  const int visible = p.causal ? cdiv_i(min(nk, max(0, q_last + nk - p.seqlen_q + 1)), BN) : blocks;
  const int per = cdiv_i(blocks, p.num_splits);
  const int first = split * per;
  return {first, max(0, min(visible, first + per) - first)};
}

// kColSplit: the tile has at most 16 rows (one query, GQA group <= 16, or few queries). Then every warp takes
// the same 16 rows and its own BN / WARPS keys of each block, with its own running max, sum and O, and the
// warps merge at the end, so the math of a block is spread over four warps instead of resting on one.
template <typename T, int D, int BM, int BN, int WARPS, int STAGES, bool kColSplit>
__device__ __forceinline__ void split_kv(const DecodeParams& p) {
  using Cfg = Config<T, D, BM, BN, WARPS, STAGES>;
  using QTile = typename Cfg::QTile;
  using KVTile = typename Cfg::KVTile;
  using Copy = typename Cfg::Copy;
  constexpr int kWarpCols = kColSplit ? BN / WARPS : BN;  // keys of a block each warp multiplies
  constexpr int kNT = kWarpCols / 8, kDT = Cfg::kDT, kPasses = Copy::kPasses;
  static_assert(kWarpCols % 16 == 0, "each warp needs whole k16 steps of keys");

  extern __shared__ __align__(128) unsigned char smem[];
  require_dynamic_smem(Cfg::kSmemBytes);
  const uint32_t sQ = smem_u32(smem);
  const uint32_t sKV = sQ + QTile::kBytes;  // stage st: K at sKV + st * kStageBytes, V one tile after

  const int split = blockIdx.x, row_block = blockIdx.y;
  const int batch = blockIdx.z / p.kv_heads, kv_head = blockIdx.z % p.kv_heads;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane >> 2, t = lane & 3;
  const int nq = p.seqlen_q, group = p.group;
  const int nk = p.seqlens != nullptr ? p.seqlens[batch] : p.seqlen_k;
  const int row0 = row_block * BM;
  const int rows = min(BM, nq * group - row0);
  const BlockRange range = split_blocks<BN>(p, nk, last_query(nq, row0, rows), split);
  const int n_blocks = range.count;

  // Each thread copies chunk `chunk` of rows copy_row + i * kRowStep of every K/V block.
  const int copy_row = tid / Copy::kChunks, chunk = tid % Copy::kChunks;
  const bool paged = p.block_table != nullptr;
  const int page_mask = paged ? (1 << p.page_shift) - 1 : 0x7fffffff;
  const int* table = paged ? p.block_table + batch * p.table_stride : nullptr;
  const uint16_t* k_head = static_cast<const uint16_t*>(p.k) + kv_head * p.k_head_stride + chunk * 8;
  const uint16_t* v_head = static_cast<const uint16_t*>(p.v) + kv_head * p.v_head_stride + chunk * 8;

  auto fetch_pages = [&](int block, int (&pages)[kPasses]) {
#pragma unroll
    for (int i = 0; i < kPasses; ++i) {
      const int n = block * BN + copy_row + i * Copy::kRowStep;
      pages[i] = !paged ? batch : n < nk ? __ldg(table + (n >> p.page_shift)) : 0;
    }
  };
  auto copy_block = [&](int block, int stage, const int (&pages)[kPasses]) {
    const uint32_t sK = sKV + stage * Cfg::kStageBytes, sV = sK + KVTile::kBytes;
#pragma unroll
    for (int i = 0; i < kPasses; ++i) {
      const int row = copy_row + i * Copy::kRowStep;
      const int n = block * BN + row;
      const bool ok = n < nk;
      const int64_t page = ok ? pages[i] : 0;
      const int in_page = ok ? n & page_mask : 0;
      cp_async16(KVTile::addr(sK, row, chunk), k_head + page * p.k_page_stride + in_page * p.k_row_stride, ok);
      cp_async16(KVTile::addr(sV, row, chunk), v_head + page * p.v_page_stride + in_page * p.v_row_stride, ok);
    }
  };

  // Per-thread facts of its two rows g and g + 8 of the warp's m16 tile: last visible key, output address.
  const int warp_row0 = kColSplit ? 0 : warp * 16;
  const int warp_col0 = kColSplit ? warp * kWarpCols : 0;
  const bool warp_active = warp_row0 < rows;
  int last_key[2], head_of[2], query_of[2];
  bool row_ok[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int pr = row0 + warp_row0 + g + 8 * r;
    row_ok[r] = warp_row0 + g + 8 * r < rows;
    head_of[r] = kv_head * group + pr / nq;
    query_of[r] = pr % nq;
    last_key[r] = p.causal ? min(nk - 1, query_of[r] + nk - nq) : nk - 1;
  }

  float acc_o[kDT][4];
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};
#pragma unroll
  for (int dt = 0; dt < kDT; ++dt)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc_o[dt][e] = 0.f;

  if (n_blocks > 0) {
    // Q: one row copy per packed row (its own head and query); rows past the packed rows are zeros.
    {
      constexpr int kQChunks = D / 8;
      for (int idx = tid; idx < BM * kQChunks; idx += Cfg::kThreads) {
        const int r = idx / kQChunks, c = idx % kQChunks;
        const bool ok = r < rows;
        const int pr = row0 + r;
        const uint16_t* src = static_cast<const uint16_t*>(p.q);
        if (ok)
          src += batch * p.q_batch_stride + (kv_head * group + pr / nq) * p.q_head_stride + (pr % nq) * p.q_row_stride +
                 c * 8;
        cp_async16(QTile::addr(sQ, r, c), src, ok);
      }
      cp_async_commit();
    }
    int pages[kPasses];
#pragma unroll
    for (int st = 0; st < STAGES - 1; ++st) {
      if (st < n_blocks) {
        fetch_pages(range.first + st, pages);
        copy_block(range.first + st, st, pages);
      }
      cp_async_commit();
    }
    if (STAGES - 1 < n_blocks) fetch_pages(range.first + STAGES - 1, pages);

    cp_async_wait<STAGES - 1>();  // the Q group
    __syncthreads();
    uint32_t qf[D / 16][4];
    const uint32_t q_anchor = QTile::addr(sQ, warp_row0 + (lane & 15), lane >> 4);
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) ldmatrix_x4(qf[kk], QTile::at(q_anchor, 0, kk * 2));
    const uint32_t k_anchor0 = KVTile::addr(sKV, warp_col0 + (lane & 7) + ((lane >> 4) << 3), (lane >> 3) & 1);
    const uint32_t v_anchor0 =
        KVTile::addr(sKV + KVTile::kBytes, warp_col0 + (lane & 7) + (((lane >> 3) & 1) << 3), lane >> 4);

    for (int j = 0; j < n_blocks; ++j) {
      cp_async_wait<STAGES - 2>();
      __syncthreads();  // block j landed for every thread; every warp is done with block j - 1's buffers
      const int ahead = j + STAGES - 1;
      if (ahead < n_blocks) {
        copy_block(range.first + ahead, ahead % STAGES, pages);
        if (ahead + 1 < n_blocks) fetch_pages(range.first + ahead + 1, pages);
      }
      cp_async_commit();
      if (!warp_active) continue;

      const uint32_t stage_off = (j % STAGES) * Cfg::kStageBytes;
      const uint32_t k_anchor = k_anchor0 + stage_off, v_anchor = v_anchor0 + stage_off;
      float s[kNT][4];
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[nt][e] = 0.f;
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk)
#pragma unroll
        for (int nt2 = 0; nt2 < kNT / 2; ++nt2) {
          uint32_t b[4];
          ldmatrix_x4(b, KVTile::at(k_anchor, nt2 * 16, kk * 2));
          mma16816<T>(s[2 * nt2], qf[kk], b[0], b[1]);
          mma16816<T>(s[2 * nt2 + 1], qf[kk], b[2], b[3]);
        }

      const int n0 = (range.first + j) * BN + warp_col0;
      if (n0 + kWarpCols - 1 > min(last_key[0], last_key[1])) {  // the end of the sequence or a causal edge
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            if (n0 + nt * 8 + t * 2 + (e & 1) > last_key[e >> 1]) s[nt][e] = -INFINITY;
      }

#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float mx = row_max[r];
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) mx = fmaxf(mx, fmaxf(s[nt][2 * r], s[nt][2 * r + 1]));
        mx = quad_max(mx);
        const float m_scaled = mx == -INFINITY ? 0.f : mx * p.scale_log2;  // no key yet: keep exp2 at 0
        const float corr = fast_exp2(row_max[r] * p.scale_log2 - m_scaled);
        row_max[r] = mx;
        float sum = 0.f;
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
          s[nt][2 * r] = fast_exp2(s[nt][2 * r] * p.scale_log2 - m_scaled);
          s[nt][2 * r + 1] = fast_exp2(s[nt][2 * r + 1] * p.scale_log2 - m_scaled);
          sum += s[nt][2 * r] + s[nt][2 * r + 1];
        }
        row_sum[r] = row_sum[r] * corr + sum;
#pragma unroll
        for (int dt = 0; dt < kDT; ++dt) {
          acc_o[dt][2 * r] *= corr;
          acc_o[dt][2 * r + 1] *= corr;
        }
      }

#pragma unroll
      for (int kk = 0; kk < kWarpCols / 16; ++kk) {
        uint32_t a[4];
        a[0] = Elem<T>::pack(s[2 * kk][0], s[2 * kk][1]);
        a[1] = Elem<T>::pack(s[2 * kk][2], s[2 * kk][3]);
        a[2] = Elem<T>::pack(s[2 * kk + 1][0], s[2 * kk + 1][1]);
        a[3] = Elem<T>::pack(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
        for (int dt2 = 0; dt2 < kDT / 2; ++dt2) {
          uint32_t b[4];
          ldmatrix_x4_trans(b, KVTile::at(v_anchor, kk * 16, dt2 * 2));
          mma16816<T>(acc_o[2 * dt2], a, b[0], b[1]);
          mma16816<T>(acc_o[2 * dt2 + 1], a, b[2], b[3]);
        }
      }
    }
    cp_async_wait<0>();  // no copy outlives the block (the trailing groups are empty)
  }

  float row_l[2];  // the row's full sum (the per-thread partials quad-reduced)
#pragma unroll
  for (int r = 0; r < 2; ++r) row_l[r] = quad_sum(row_sum[r]);
  if constexpr (kColSplit) {
    // Merge the warps' (max, sum, O) of the same rows through the K/V ring's shared memory (free now):
    // M = max_w m_w, L = sum_w l_w e^(m_w - M), O = sum_w O_w e^(m_w - M); warp 0 writes the result.
    float* red_o = reinterpret_cast<float*>(smem + QTile::kBytes);  // [WARPS][16][D]
    float* red_m = red_o + WARPS * 16 * D;                          // [WARPS][16]
    float* red_l = red_m + WARPS * 16;                              // [WARPS][16]
    static_assert(WARPS * 16 * (D + 2) * 4 <= STAGES * Cfg::kStageBytes, "the merge fits in the K/V ring");
    __syncthreads();  // every warp is done with the ring
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = warp * 16 + g + 8 * r;
      if (t == 0) {
        red_m[row] = row_max[r];
        red_l[row] = row_l[r];
      }
#pragma unroll
      for (int dt = 0; dt < kDT; ++dt)
        *reinterpret_cast<float2*>(red_o + row * D + dt * 8 + t * 2) = make_float2(acc_o[dt][2 * r], acc_o[dt][2 * r + 1]);
    }
    __syncthreads();
    if (warp != 0) return;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = g + 8 * r;
      float m = -INFINITY;
#pragma unroll
      for (int w = 0; w < WARPS; ++w) m = fmaxf(m, red_m[w * 16 + row]);
      float weight[WARPS], l = 0.f;
#pragma unroll
      for (int w = 0; w < WARPS; ++w) {
        weight[w] = m == -INFINITY ? 0.f : fast_exp2((red_m[w * 16 + row] - m) * p.scale_log2);
        l += weight[w] * red_l[w * 16 + row];
      }
      row_max[r] = m;
      row_l[r] = l;
#pragma unroll
      for (int dt = 0; dt < kDT; ++dt) {
        float2 o = make_float2(0.f, 0.f);
#pragma unroll
        for (int w = 0; w < WARPS; ++w) {
          const float2 x = *reinterpret_cast<const float2*>(red_o + (w * 16 + row) * D + dt * 8 + t * 2);
          o.x += weight[w] * x.x;
          o.y += weight[w] * x.y;
        }
        acc_o[dt][2 * r] = o.x;
        acc_o[dt][2 * r + 1] = o.y;
      }
    }
  }

  if (!warp_active) return;
  // Epilogue: each quad holds one row; lane t writes columns 8 dt + 2t, 8 dt + 2t + 1.
  const bool direct = p.num_splits == 1;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float l = row_l[r];
    if (!row_ok[r]) continue;
    const float inv = l > 0.f ? __fdividef(1.f, l) : 0.f;
    const float lse = l > 0.f ? (row_max[r] * p.scale_log2 + __log2f(l)) * 0.69314718056f : -INFINITY;
    const int64_t bh = static_cast<int64_t>(batch) * p.heads + head_of[r];
    if (direct) {
      if (t == 0) p.lse[bh * nq + query_of[r]] = lse;
      uint16_t* o = static_cast<uint16_t*>(p.o) + batch * p.o_batch_stride + head_of[r] * p.o_head_stride +
                    query_of[r] * p.o_row_stride + t * 2;
#pragma unroll
      for (int dt = 0; dt < kDT; ++dt)
        *reinterpret_cast<uint32_t*>(o + dt * 8) = Elem<T>::pack(acc_o[dt][2 * r] * inv, acc_o[dt][2 * r + 1] * inv);
    } else {
      const int64_t ws_row = bh * p.num_splits * nq + split * nq + query_of[r];
      if (t == 0) p.ws_lse[ws_row] = lse;
      float* o = p.ws_o + ws_row * D + t * 2;
#pragma unroll
      for (int dt = 0; dt < kDT; ++dt)
        *reinterpret_cast<float2*>(o + dt * 8) = make_float2(acc_o[dt][2 * r] * inv, acc_o[dt][2 * r + 1] * inv);
    }
  }
}

// One thread block's tile: the column-split variant when the tile's packed rows fit one m16 tile.
template <typename T, int D, int BM, int BN, int WARPS, int STAGES>
__device__ __forceinline__ void tile(const DecodeParams& p) {
  if (p.seqlen_q * p.group - static_cast<int>(blockIdx.y) * BM <= 16)
    split_kv<T, D, BM, BN, WARPS, STAGES, true>(p);
  else
    split_kv<T, D, BM, BN, WARPS, STAGES, false>(p);
}

// The combine (algorithms/splitkv.py, combine_kernel): 128 threads per (batch, head, 512 / D query rows).
// The D / 4 threads of a row (one warp at d128, half of one at d64) share its splits: each takes every
// (D / 4)-th split's LSE_s, and shuffles give the row's max and LSE = log sum_s e^LSE_s; the weights
// e^(LSE_s - LSE) go to shared memory (a split that saw no key has LSE_s = -inf and weighs 0). Then each
// thread merges four columns, O = sum_s w_s O_s, with several splits' loads in flight.
template <typename T, int D>
__device__ __forceinline__ void combine(const DecodeParams& p) {
  constexpr int kThreadsPerRow = D / 4;
  constexpr int kRows = 128 / kThreadsPerRow;
  __shared__ float weights[kRows][MAX_SPLITS];
  const int head = blockIdx.y, batch = blockIdx.z;
  const int row = static_cast<int>(threadIdx.x) / kThreadsPerRow;
  const int lane = static_cast<int>(threadIdx.x) % kThreadsPerRow;
  const int q = blockIdx.x * kRows + row;
  const int col = lane * 4;
  const int nq = p.seqlen_q, splits = p.num_splits;
  const bool ok = q < nq;
  const int64_t bh = static_cast<int64_t>(batch) * p.heads + head;
  const float* lse_s = p.ws_lse + bh * splits * nq + (ok ? q : 0);
  float mx = -INFINITY;
  for (int s = lane; s < splits; s += kThreadsPerRow) mx = fmaxf(mx, ok ? lse_s[s * nq] : -INFINITY);
#pragma unroll
  for (int m = kThreadsPerRow / 2; m > 0; m >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, m));
  const float base = mx == -INFINITY ? 0.f : mx;  // every split empty: weights 0, LSE -inf
  float total = 0.f;
  for (int s = lane; s < splits; s += kThreadsPerRow) total += ok ? __expf(lse_s[s * nq] - base) : 0.f;
#pragma unroll
  for (int m = kThreadsPerRow / 2; m > 0; m >>= 1) total += __shfl_xor_sync(0xffffffffu, total, m);
  const float lse = total > 0.f ? base + __logf(total) : -INFINITY;
  for (int s = lane; s < splits; s += kThreadsPerRow)
    weights[row][s] = ok && total > 0.f ? __expf(lse_s[s * nq] - lse) : 0.f;
  __syncthreads();
  if (!ok) return;
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  const float* o_s = p.ws_o + (bh * splits * nq + q) * D + col;
#pragma unroll 8
  for (int s = 0; s < splits; ++s) {
    const float w = weights[row][s];
    const float4 x = *reinterpret_cast<const float4*>(o_s + static_cast<int64_t>(s) * nq * D);
    acc.x += w * x.x;
    acc.y += w * x.y;
    acc.z += w * x.z;
    acc.w += w * x.w;
  }
  if (col == 0) p.lse[bh * nq + q] = lse;
  uint16_t* o = static_cast<uint16_t*>(p.o) + batch * p.o_batch_stride + head * p.o_head_stride + q * p.o_row_stride + col;
  *reinterpret_cast<uint2*>(o) = make_uint2(Elem<T>::pack(acc.x, acc.y), Elem<T>::pack(acc.z, acc.w));
}

}  // namespace decode
}  // namespace flashsim

// One instantiation: NAME_fwd, grid (splits, row blocks, B * Hkv), WARPS * 32 threads,
// Config::kSmemBytes of dynamic shared memory; NAME_combine, grid (ceil(Nq / (512 / D)), H, B), 128 threads.
#define FLASHSIM_DECODE(NAME, DTYPE, D, BM, BN, WARPS, STAGES)                                                    \
  extern "C" __global__ void __launch_bounds__(WARPS * 32)                                                       \
      NAME##_fwd(const __grid_constant__ flashsim::decode::DecodeParams p) {                                    \
    flashsim::decode::tile<FLASHSIM_T_##DTYPE, D, BM, BN, WARPS, STAGES>(p);                                    \
  }                                                                                                              \
  extern "C" __global__ void __launch_bounds__(128)                                                              \
      NAME##_combine(const __grid_constant__ flashsim::decode::DecodeParams p) {                                \
    flashsim::decode::combine<FLASHSIM_T_##DTYPE, D>(p);                                                         \
  }
