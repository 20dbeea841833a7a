// v3-fp8's quantisation pre-pass (sm_90a): one launch reads 16-bit Q, K and V once and writes what
// v3_fp8.cu consumes: e4m3 Q and K (B, H, N, d), e4m3 V^T (B, Hkv, d, N_pad) with keys permuted inside
// groups of 16, and one fp32 scale per block_m x d block of Q and block_n x d block of K and V.
//
// One cluster of 8 thread blocks per (tensor, batch, head, block); clusters [0, Q) are Q's, then K's, then
// V's. Thread block r of a cluster takes the 16-row groups [r G / 8, (r + 1) G / 8) of its block (G groups),
// so a block's rows are spread over 8 small thread blocks that overlap each other's loads, arithmetic and
// stores; the block's max |x| is reduced across the cluster through distributed shared memory. A thread
// holds CPT chunks of 8 consecutive elements of one row (16-byte loads); the threads of one row sit in
// consecutive lanes of a warp (d / 8 of them), so a row's Hadamard transform runs in registers (bits 0-2 of
// the column) and warp shuffles (the higher bits). Then scale = max(amax / 448, 1e-12) and x * (1 / scale)
// rounded to e4m3 with saturation. Q and K rows are stored as 8 bytes per thread (a warp writes 256
// contiguous bytes); V rows go through shared memory and leave as rows of V^T, 16-byte stores of one
// 16-key group each.
//
// Arithmetic, in this order and in fp32, so the result equals kernels/hopper_fp8.py's torch reference bit
// for bit: x * (+-1), butterflies (a + b, a - b) over column bits 0, 1, ..., log2(n) - 1, times
// fp32(1 / sqrt(n)), n the largest power of two dividing d (a block-diagonal Hadamard at d 96 and 192);
// amax / 448 (a division) and its IEEE reciprocal; x times that. Every step is one correctly rounded operation (a butterfly's FMA multiplies by +-1, exactly).
#pragma once
#include <cstdint>

namespace fp8_prepass {

constexpr int THREADS = 256;
constexpr int MAX_GROUPS = 16;   // 16-row groups of one block (blocks <= 256 rows)
constexpr int MAX_D = 256;
constexpr float E4M3_MAX = 448.f;

struct Params {
  const void* x[3];              // Q, K, V (B, H or Hkv, N, d), 16-bit, last dimension contiguous
  void* xq[2];                   // e4m3 Q, K (B, H or Hkv, N, d), contiguous
  void* vt;                      // e4m3 V^T (B, Hkv, d, npad), contiguous
  float* scale[3];               // (B, H, ceil(Nq / block_m)), (B, Hkv, ceil(Nk / block_n)) x 2
  long long stride[3][3];        // batch, head, row strides of Q, K, V in elements
  unsigned long long signs[4];   // bit c set: column c of the Hadamard's diagonal is -1
  int batch, heads, kv_heads, nq, nk, d;
  int block_m, block_n;
  int hadamard;                  // 1: Q and K times diag(+-1) H / sqrt(n), H block-diagonal of order n
  float hadamard_scale;          // fp32(1 / sqrt(n))
  int npad;                      // V^T's row length: ceil(Nk / block_n) * block_n
  int hadamard_order;            // n: the largest power of two dividing d (d itself when d is one)
};
// The host mirrors this layout (kernels/fp8_prepass.py, _Params); a test compares the offsets.
static_assert(sizeof(Params) == 224 && __builtin_offsetof(Params, signs) == 144 &&
                  __builtin_offsetof(Params, hadamard_scale) == 212 &&
                  __builtin_offsetof(Params, hadamard_order) == 220,
              "fp8_prepass::Params layout changed: update kernels/fp8_prepass.py");

template <class T>
__device__ __forceinline__ void unpack8(const uint4& raw, float (&x)[8]);

struct Bf16;
struct Fp16;

template <>
__device__ __forceinline__ void unpack8<Bf16>(const uint4& raw, float (&x)[8]) {
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    x[2 * i] = __uint_as_float(w[i] << 16);
    x[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

template <>
__device__ __forceinline__ void unpack8<Fp16>(const uint4& raw, float (&x)[8]) {
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const unsigned short lo = w[i] & 0xffff, hi = w[i] >> 16;
    asm("cvt.f32.f16 %0, %1;" : "=f"(x[2 * i]) : "h"(lo));
    asm("cvt.f32.f16 %0, %1;" : "=f"(x[2 * i + 1]) : "h"(hi));
  }
}

// Two floats to two e4m3 bytes (round to nearest even, saturating), a in the low byte.
__device__ __forceinline__ uint32_t to_e4m3x2(float a, float b) {
  unsigned short out;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(out) : "f"(b), "f"(a));
  return out;
}

// Cluster barrier, relaxed: a thread that publishes data fences first (fence_cluster); wait acquires.
__device__ __forceinline__ void cluster_arrive() {
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
}
__device__ __forceinline__ void fence_cluster() { asm volatile("fence.acq_rel.cluster;" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory"); }

// A float in the shared memory of thread block `rank` of this cluster, at the address of `local`.
__device__ __forceinline__ float load_peer(const float* local, int rank) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(local));
  uint32_t remote;
  float value;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(addr), "r"(rank));
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(value) : "r"(remote) : "memory");
  return value;
}

// Position p of a 16-key group of V^T holds key 2 (p / 4) + (p & 1) + 8 ((p / 2) & 1) (v3_fp8.cu's order).
__device__ __forceinline__ constexpr int key_at(int p) { return 2 * (p / 4) + (p & 1) + 8 * ((p >> 1) & 1); }

// CLUSTER thread blocks per quantisation block, CPT chunks of 8 elements per thread.
template <class T, int CLUSTER, int CPT>
__device__ __forceinline__ void prepass(const Params& p) {
  constexpr int MAX_ROWS = 16 * ((MAX_GROUPS + CLUSTER - 1) / CLUSTER);  // rows of one thread block
  __shared__ __align__(16) uint8_t v_rows[MAX_ROWS * MAX_D];             // V only: its rows in e4m3
  __shared__ float warp_max[THREADS / 32];
  __shared__ float local_max, block_max;

  // Which tensor and block this cluster quantises, and which 16-row groups of it this thread block takes.
  const int q_blocks = (p.nq + p.block_m - 1) / p.block_m, kv_blocks = (p.nk + p.block_n - 1) / p.block_n;
  const int q_ctas = p.batch * p.heads * q_blocks, kv_ctas = p.batch * p.kv_heads * kv_blocks;
  const int rank = blockIdx.x % CLUSTER;
  int id = blockIdx.x / CLUSTER, which = 0;
  if (id >= q_ctas) {
    id -= q_ctas;
    which = 1 + (id >= kv_ctas);
    if (which == 2) id -= kv_ctas;
  }
  const int nblocks = which ? kv_blocks : q_blocks, block_rows = which ? p.block_n : p.block_m;
  const int heads = which ? p.kv_heads : p.heads, n = which ? p.nk : p.nq;
  const int blk = id % nblocks, bh = id / nblocks, h = bh % heads, b = bh / heads;
  const int groups = block_rows / 16, g0 = rank * groups / CLUSTER, g1 = (rank + 1) * groups / CLUSTER;
  const int row0 = blk * block_rows + g0 * 16;  // this thread block's first row
  const int my_rows = (g1 - g0) * 16, rows = max(0, min(my_rows, n - row0));  // all, and those < N
  const int cpr = p.d / 8;  // chunks per row
  const long long* st = p.stride[which];
  const uint16_t* src = static_cast<const uint16_t*>(p.x[which]) + b * st[0] + h * st[1] + row0 * st[2];

  float x[CPT][8];
#pragma unroll
  for (int c = 0; c < CPT; ++c) {  // every load first: CPT 16-byte loads in flight per thread
    const int idx = c * THREADS + threadIdx.x, r = idx / cpr, col = idx % cpr * 8;
    uint4 raw = make_uint4(0, 0, 0, 0);
    if (r < rows) raw = __ldg(reinterpret_cast<const uint4*>(src + r * st[2] + col));
    unpack8<T>(raw, x[c]);
  }

  if (p.hadamard && which < 2) {
#pragma unroll
    for (int c = 0; c < CPT; ++c) {
      // A chunk's column: THREADS need not be a multiple of cpr (d 96, 192), so it can differ per chunk.
      const int col = (c * THREADS + threadIdx.x) % cpr * 8;
      const uint32_t negate = (p.signs[col >> 6] >> (col & 63)) & 0xff;
#pragma unroll
      for (int e = 0; e < 8; ++e) x[c][e] = __fmul_rn(x[c][e], (negate >> e) & 1 ? -1.f : 1.f);
#pragma unroll
      for (int bit = 1; bit < 8; bit *= 2) {
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          if (e & bit) continue;
          const float lo = x[c][e], hi = x[c][e + bit];
          x[c][e] = __fadd_rn(lo, hi);
          x[c][e + bit] = __fsub_rn(lo, hi);
        }
      }
    }
    // Column bit 3 + log2(lanes), partner lane ^ lanes: the lower lane keeps x + other, the upper one
    // other - x, both as one FMA with x times +-1 (exact, so the FMA rounds once, as the add would). The
    // transform is block-diagonal with blocks of p.hadamard_order columns (the largest power of two dividing
    // d), so butterflies stop at that order; a block's lanes are aligned groups, whatever the chunk.
    for (int lanes = 1; lanes < p.hadamard_order / 8; lanes *= 2) {
      const float self = threadIdx.x & lanes ? -1.f : 1.f;
#pragma unroll
      for (int c = 0; c < CPT; ++c) {
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          const float other = __shfl_xor_sync(0xffffffffu, x[c][e], lanes);
          x[c][e] = __fmaf_rn(x[c][e], self, other);
        }
      }
    }
#pragma unroll
    for (int c = 0; c < CPT; ++c) {
#pragma unroll
      for (int e = 0; e < 8; ++e) x[c][e] = __fmul_rn(x[c][e], p.hadamard_scale);
    }
  }

  // max |x| of this thread block (rows past N hold zeros), then of the cluster: every thread block reads
  // the 8 partial maxima from the others' shared memory.
  float amax = 0.f;
#pragma unroll
  for (int c = 0; c < CPT; ++c) {
#pragma unroll
    for (int e = 0; e < 8; ++e) amax = fmaxf(amax, fabsf(x[c][e]));
  }
#pragma unroll
  for (int lanes = 16; lanes; lanes /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, lanes));
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = amax;
  __syncthreads();
  if (threadIdx.x < 32) {
    amax = threadIdx.x < THREADS / 32 ? warp_max[threadIdx.x] : 0.f;
#pragma unroll
    for (int lanes = 16; lanes; lanes /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, lanes));
    if (threadIdx.x == 0) {
      local_max = amax;
      fence_cluster();  // release: peers read local_max after the barrier
    }
  }
  cluster_arrive();
  cluster_wait();  // every thread block's local_max is written
  if (threadIdx.x < 32) {
    amax = threadIdx.x < CLUSTER ? load_peer(&local_max, threadIdx.x) : 0.f;  // rank of this cluster
#pragma unroll
    for (int lanes = 16; lanes; lanes /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, lanes));
    if (threadIdx.x == 0) block_max = amax;
  }
  cluster_arrive();  // this thread block has read its peers; they may exit once all have (cluster_wait below)
  __syncthreads();
  const float scale = fmaxf(__fdiv_rn(block_max, E4M3_MAX), 1e-12f), inv = __frcp_rn(scale);
  if (threadIdx.x == 0 && rank == 0) p.scale[which][bh * nblocks + blk] = scale;

  const size_t out_row0 = static_cast<size_t>(bh) * n + row0;
#pragma unroll
  for (int c = 0; c < CPT; ++c) {
    const int idx = c * THREADS + threadIdx.x, r = idx / cpr, col = idx % cpr * 8;
    float y[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) y[e] = __fmul_rn(x[c][e], inv);  // |y| > 448 saturates in the conversion
    const uint2 packed = make_uint2(to_e4m3x2(y[0], y[1]) | to_e4m3x2(y[2], y[3]) << 16,
                                    to_e4m3x2(y[4], y[5]) | to_e4m3x2(y[6], y[7]) << 16);
    if (which < 2) {
      if (r < rows) {
        uint8_t* dst = static_cast<uint8_t*>(p.xq[which]) + (out_row0 + r) * p.d + col;
        *reinterpret_cast<uint2*>(dst) = packed;
      }
    } else if (r < my_rows) {  // rows past N are zero keys of V^T's padding
      *reinterpret_cast<uint2*>(v_rows + r * p.d + col) = packed;
    }
  }

  if (which == 2) {
    // V^T: item (column c, 16-key group g) is 16 bytes of row c; consecutive threads take consecutive c,
    // so a warp's shared-memory reads hit one 32-byte span of a V row.
    __syncthreads();
    uint8_t* vt = static_cast<uint8_t*>(p.vt) + static_cast<size_t>(bh) * p.d * p.npad + row0;
    const int items = p.d * (g1 - g0);
    for (int it = threadIdx.x; it < items; it += THREADS) {
      const int c = it % p.d, g = it / p.d;
      const uint8_t* keys = v_rows + g * 16 * p.d + c;
      uint32_t w[4];
#pragma unroll
      for (int q4 = 0; q4 < 4; ++q4) {
        w[q4] = 0;
#pragma unroll
        for (int e = 0; e < 4; ++e) w[q4] |= uint32_t(keys[key_at(4 * q4 + e) * p.d]) << (8 * e);
      }
      *reinterpret_cast<uint4*>(vt + static_cast<size_t>(c) * p.npad + g * 16) = make_uint4(w[0], w[1], w[2], w[3]);
    }
  }
  cluster_wait();  // keep local_max alive until every thread block of the cluster has read it
}

}  // namespace fp8_prepass

// Entry points: input type x thread blocks per cluster x chunks per thread (the host picks the least CPT
// with CPT * THREADS * 8 >= rows of one thread block * d).
#define FP8_PREPASS_ENTRY(T, K, CPT)                                                                  \
  extern "C" __global__ void __cluster_dims__(K, 1, 1) __launch_bounds__(fp8_prepass::THREADS)        \
      fp8_prepass_##T##_k##K##_c##CPT(const __grid_constant__ fp8_prepass::Params p) {                \
    fp8_prepass::prepass<fp8_prepass::T, K, CPT>(p);                                                  \
  }
#define FP8_PREPASS_CHUNKS(T, K) \
  FP8_PREPASS_ENTRY(T, K, 1) FP8_PREPASS_ENTRY(T, K, 2) FP8_PREPASS_ENTRY(T, K, 4) FP8_PREPASS_ENTRY(T, K, 8)
FP8_PREPASS_CHUNKS(Bf16, 2)
FP8_PREPASS_CHUNKS(Bf16, 4)
FP8_PREPASS_CHUNKS(Bf16, 8)
FP8_PREPASS_CHUNKS(Fp16, 2)
FP8_PREPASS_CHUNKS(Fp16, 4)
FP8_PREPASS_CHUNKS(Fp16, 8)
