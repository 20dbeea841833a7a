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

// TMA fills beside wgmma (wgfill_ss_n<N>): does the copy engine's write into shared memory take the read
// path wgmma's operands come through? One consumer warpgroup chains the QK^T form (128-byte panels, as d64 and
// d128 tiles) while lane 0 of a fifth warp keeps FILL_SLOTS bulk copies of FILL_SLOT_BYTES of an L2-resident
// array in flight into a ring of its own. mode 0: the chain alone (the copier idles); 1: the chain with the
// copier copying until the chain is done (copied[block] counts its bytes, chain_end[block] is the chain's last
// cycle, before the copies in flight drain); 2: the copier alone, 4 x iters copies. 1-3 blocks per SM.
#include "bulk_copy.cuh"

constexpr int FILL_SLOT_BYTES = 4096;
constexpr int FILL_SLOTS = 4;
constexpr unsigned long long FILL_SRC_BYTES = 1ull << 22;  // 4 MiB, read over and over: L2-resident
__device__ uint4 g_wgfill_src[FILL_SRC_BYTES / 16];

template <int N>
__device__ __forceinline__ void wgfill(const uint4* __restrict__ init, int iters, int mode, float* sink,
                                       BlockTime* times, unsigned long long* copied, long long* chain_end) {
  constexpr int TILE = SS_A_BYTES + N * K_BYTES;
  __shared__ alignas(1024) uint4 tiles[TILE / 16];
  __shared__ alignas(128) uint4 ring[FILL_SLOTS * FILL_SLOT_BYTES / 16];
  __shared__ alignas(8) unsigned long long bars[FILL_SLOTS];
  __shared__ volatile int chain_done;
  for (int i = threadIdx.x; i < TILE / 16; i += blockDim.x) tiles[i] = init[i];
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  const bool copier = threadIdx.x == 128;
  const unsigned bar0 = smem_addr(bars), dst0 = smem_addr(ring);
  if (threadIdx.x == 0) chain_done = 0;
  if (copier) {
    for (int s = 0; s < FILL_SLOTS; ++s) mbar_init(bar0 + 8 * s, 1);
    mbar_init_fence();
  }
  BlockTimer timer;
  timer.start();  // the tiles, the flag and the barriers are ready
  if (threadIdx.x < 128) {
    if (mode != 2) {
      float d[N / 2];
#pragma unroll
      for (int i = 0; i < N / 2; ++i) d[i] = 0.f;
      ss_chain<N, 128>(d, v3::smem_u32(tiles), iters);
      v3::wg_wait<0>();
      float s = 0.f;
#pragma unroll
      for (int i = 0; i < N / 2; ++i) s += d[i];
      keep(s, -1.2345f, sink);
    }
    asm volatile("bar.sync 1, 128;" ::: "memory");  // the warpgroup's chain is done
    if (threadIdx.x == 0) {
      chain_end[blockIdx.x] = clock64();  // before the copies still in flight drain
      chain_done = 1;
    }
  } else if (copier) {
    if (mode == 0) {
      copied[blockIdx.x] = 0;
    } else {
      const char* src = reinterpret_cast<const char*>(g_wgfill_src);
      const unsigned long long start = static_cast<unsigned long long>(blockIdx.x) * 64 * FILL_SLOT_BYTES;
      long long n = 0;
      for (;; ++n) {
        if (mode == 2 ? n >= 4ll * iters : chain_done != 0) break;
        const int slot = n % FILL_SLOTS;
        const unsigned bar = bar0 + 8 * slot;
        if (n >= FILL_SLOTS) mbar_wait(bar, ((n / FILL_SLOTS) - 1) & 1);
        mbar_expect_tx(bar, FILL_SLOT_BYTES);
        bulk_copy(dst0 + slot * FILL_SLOT_BYTES, src + ((start + n * FILL_SLOT_BYTES) & (FILL_SRC_BYTES - 1)),
                  FILL_SLOT_BYTES, bar);
      }
      for (long long k = n < FILL_SLOTS ? 0 : n - FILL_SLOTS; k < n; ++k)
        mbar_wait(bar0 + 8 * (k % FILL_SLOTS), (k / FILL_SLOTS) & 1);
      copied[blockIdx.x] = static_cast<unsigned long long>(n) * FILL_SLOT_BYTES;
    }
  }
  __syncwarp();  // the copier's warp reconverges before the block's closing barrier
  timer.stop(times);
}

#define WG_FILL(N)                                                                                         \
  extern "C" __global__ void __launch_bounds__(160) wgfill_ss_n##N(                                        \
      const uint4* __restrict__ init, int iters, int mode, float* sink, BlockTime* times,                  \
      unsigned long long* copied, long long* chain_end) {                                                  \
    wgfill<N>(init, iters, mode, sink, times, copied, chain_end);                                          \
  }
WG_FILL(64)
WG_FILL(128)
