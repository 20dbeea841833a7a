// A thread block's first tensor-map copies: what the copy engine (TMA) takes for a tile when the tensor map
// (the 128-byte descriptor a kernel gets as a __grid_constant__ parameter) is new to it, and when the data is
// cold after validate's write flush. Thread 0 of each block issues five copies of one 64 x 64 bf16 box (8 KiB,
// 128-byte swizzled) one after another, each waited for before the next, and times each from its issue to its
// barrier's completion, in SM cycles:
//   0. map A, the block's rows: the map's first use and cold data (our v3's first copy of Q);
//   1. map A, the next 64 rows: the map used before, data as cold;
//   2. map B over another tensor, the block's rows: a second map's first use, cold data (K's first copy);
//   3. map A, copy 0's rows again: the map and the data used before (an L2 hit);
//   4. map C, held in global memory instead of the parameters, its first use and cold data.
// sm_90a only.
#include <cuda.h>

#include "bulk_copy.cuh"
#include "common.cuh"

#define BOX_ROWS 64
#define BOX_BYTES (BOX_ROWS * 128)
#define ROWS_PER_BLOCK 256
#define COPIES 5

__device__ __forceinline__ void tma_2d(unsigned dst, const CUtensorMap* map, unsigned bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(
          dst),
      "l"(reinterpret_cast<unsigned long long>(map)), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}

// out[block * 8 + k]: cycles of copy k (k < COPIES), then the SM
extern "C" __global__ void __launch_bounds__(32) tma_first(const __grid_constant__ CUtensorMap tm_a,
                                                           const __grid_constant__ CUtensorMap tm_b,
                                                           const CUtensorMap* tm_c, long long* out) {
  __shared__ alignas(1024) char buf[BOX_BYTES];
  __shared__ alignas(8) unsigned long long bar_storage;
  if (threadIdx.x != 0) return;
  const unsigned bar = smem_addr(&bar_storage), dst = smem_addr(buf);
  mbar_init(bar, 1);
  mbar_init_fence();
  const int row = blockIdx.x * ROWS_PER_BLOCK;
  const CUtensorMap* maps[COPIES] = {&tm_a, &tm_a, &tm_b, &tm_a, tm_c};
  const int rows[COPIES] = {row, row + BOX_ROWS, row, row, row + 2 * BOX_ROWS};
  long long* o = out + blockIdx.x * 8;
  unsigned parity = 0;
#pragma unroll
  for (int k = 0; k < COPIES; ++k) {
    const long long t0 = clock64();
    mbar_expect_tx(bar, BOX_BYTES);
    tma_2d(dst, maps[k], bar, 0, rows[k]);
    mbar_wait(bar, parity);
    parity ^= 1;
    o[k] = clock64() - t0;
  }
  o[7] = smid();
}
