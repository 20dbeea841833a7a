// wgmma bf16 throughput by instruction shape and shared-memory layout, as our v3 kernel issues it: the
// QK^T form (A and B in shared memory, K-major, in panels of W-byte swizzled rows) for every block_n the
// kernel builds, and the PV form (A from registers, B read N-major from W-byte panels) for every head dim.
// Each warpgroup chains `iters` instructions on one accumulator set, committed in groups of 4 with one group
// left in flight (as a GEMM's k-steps are); one block is one warpgroup, 1-3 blocks per SM. The operands are
// whatever the host copied in: only the time is read. sm_90a only.
#include "common.cuh"
#include "v3_primitives.cuh"

using v3::Bf16;
using v3::smem_desc;
using v3::Wgmma;

constexpr int K_BYTES = 128;     // K extent of the chained instructions: 64 bf16, four k16 steps
constexpr int SS_A_BYTES = 64 * K_BYTES;
constexpr int MAX_N = 256;
constexpr int TILE_BYTES = SS_A_BYTES + MAX_N * K_BYTES;  // 40 KB: fits the largest form of either kind

// QK^T form: k-step kk reads 32 bytes of K from panel kk * 32 / W at column kk * 32 % W (W-byte rows).
template <int N, int W>
__device__ __forceinline__ void ss_chain(float (&d)[N / 2], uint32_t base, int iters) {
  for (int i = 0; i < iters; i += 4) {
    v3::wg_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      const int panel = kk * 32 / W;
      const uint32_t col = kk * 32 % W;
      const uint64_t a = smem_desc<W>(base + panel * 64 * W + col, 16, 8 * W);
      const uint64_t b = smem_desc<W>(base + SS_A_BYTES + panel * N * W + col, 16, 8 * W);
      Wgmma<Bf16, N>::ss(d, a, b, 1);
    }
    v3::wg_commit();
    v3::wg_wait<1>();
  }
}

// PV form: 64 keys (four k16 steps) by N head-dim columns, N-major in panels of W bytes of columns.
template <int N, int W>
__device__ __forceinline__ void rs_chain(float (&d)[N / 2], uint32_t base, int iters, uint32_t seed) {
  const uint32_t a[4] = {seed, seed ^ 0x3c003c00u, seed + 0x00010001u, seed ^ 0x40004000u};
  for (int i = 0; i < iters; i += 4) {
    v3::wg_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) Wgmma<Bf16, N>::rs(d, a, smem_desc<W>(base + kk * 16 * W, 64 * W, 8 * W));
    v3::wg_commit();
    v3::wg_wait<1>();
  }
}

template <int N, int W, bool RS>
__device__ __forceinline__ void run(const uint4* __restrict__ init, int iters, float* sink, BlockTime* times) {
  __shared__ alignas(1024) uint4 tiles[TILE_BYTES / 16];
  for (int i = threadIdx.x; i < TILE_BYTES / 16; i += blockDim.x) tiles[i] = init[i];
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  const uint32_t base = v3::smem_u32(tiles);
  float d[N / 2];
#pragma unroll
  for (int i = 0; i < N / 2; ++i) d[i] = 0.f;
  BlockTimer timer;
  timer.start();
  if constexpr (RS) {
    rs_chain<N, W>(d, base, iters, init[threadIdx.x].x);
  } else {
    ss_chain<N, W>(d, base, iters);
  }
  v3::wg_wait<0>();
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < N / 2; ++i) s += d[i];
  keep(s, -1.2345f, sink);
  timer.stop(times);
}

#define WG_SHAPE(KIND, N, W, RS)                                                                          \
  extern "C" __global__ void __launch_bounds__(128) wg_##KIND##_n##N##_w##W(                                \
      const uint4* __restrict__ init, int iters, float* sink, BlockTime* times) {                         \
    run<N, W, RS>(init, iters, sink, times);                                                              \
  }

// QK^T: block_n of every v3 tiling, at the panel widths of d64/d128 (128), d96 (64) and 32.
#define SS_ALL_W(N) WG_SHAPE(ss, N, 128, false) WG_SHAPE(ss, N, 64, false) WG_SHAPE(ss, N, 32, false)
SS_ALL_W(64)
SS_ALL_W(80)
SS_ALL_W(96)
SS_ALL_W(112)
SS_ALL_W(128)
SS_ALL_W(144)
SS_ALL_W(160)
SS_ALL_W(176)
SS_ALL_W(192)
SS_ALL_W(224)
SS_ALL_W(256)

// PV: the head dims, at every panel width that divides the row of N bf16 columns.
WG_SHAPE(rs, 64, 128, true)
WG_SHAPE(rs, 64, 64, true)
WG_SHAPE(rs, 96, 64, true)
WG_SHAPE(rs, 96, 32, true)
WG_SHAPE(rs, 128, 128, true)
WG_SHAPE(rs, 128, 64, true)
WG_SHAPE(rs, 192, 128, true)
WG_SHAPE(rs, 192, 64, true)
WG_SHAPE(rs, 256, 128, true)
WG_SHAPE(rs, 256, 64, true)
