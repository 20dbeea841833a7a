// HBM read bandwidth of tensor-map copies laid out as attention's inputs are: a (rows, heads, 128) bf16 tensor
// whose row of one head is 256 contiguous bytes, the next row of that head heads x 256 bytes further on. Each
// block (one per SM) streams `rows_per_block` rows of one head, two 64-column boxes (128-byte swizzled, as our
// v3 loads d128) of `box_rows` rows per step, through a ring of `stages` steps; block b reads head b % heads.
// heads = 1 is contiguous memory; more heads cut each box into box_rows runs of 128 bytes, 256 bytes apart per
// pair of boxes, heads x 256 bytes apart from row to row. Every block writes a BlockTime (cycles and ns).
// sm_90a only.
#include <cuda.h>

#include "bulk_copy.cuh"
#include "common.cuh"

__device__ __forceinline__ void tma_3d(unsigned dst, const CUtensorMap* map, unsigned bar, int c0, int c1, int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
      "[%5];" ::"r"(dst),
      "l"(reinterpret_cast<unsigned long long>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
      : "memory");
}

// dynamic shared memory: 1 KiB for alignment, stages x 2 boxes of box_rows x 128 bytes, then a barrier a stage
extern "C" __global__ void tma_heads(const __grid_constant__ CUtensorMap tm, int heads, int rows_per_block,
                                     int box_rows, int stages, BlockTime* times) {
  extern __shared__ char raw[];
  const unsigned base = (smem_addr(raw) + 1023) & ~1023u;
  const unsigned box_bytes = box_rows * 128;
  const unsigned bars = base + 2 * stages * box_bytes;
  BlockTimer timer;
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) mbar_init(bars + 8 * s, 1);
    mbar_init_fence();
  }
  timer.start();
  if (threadIdx.x == 0) {
    const int head = blockIdx.x % heads, row0 = (blockIdx.x / heads) * rows_per_block;
    const int steps = rows_per_block / box_rows;
    auto issue = [&](int i) {
      const int s = i % stages;
      const unsigned bar = bars + 8 * s, dst = base + 2 * s * box_bytes;
      mbar_expect_tx(bar, 2 * box_bytes);
      tma_3d(dst, &tm, bar, 0, head, row0 + i * box_rows);
      tma_3d(dst + box_bytes, &tm, bar, 64, head, row0 + i * box_rows);
    };
    for (int i = 0; i < stages && i < steps; ++i) issue(i);
    for (int i = 0; i < steps; ++i) {
      mbar_wait(bars + 8 * (i % stages), (i / stages) & 1);
      if (i + stages < steps) issue(i + stages);
    }
  }
  timer.stop(times);
}
