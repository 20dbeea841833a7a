// A block's output tile stored the way our v2's epilogue stores O: every warp writes its rows with coalesced
// 16-byte stores (each warp-wide store 512 contiguous bytes), unrolled, nothing else in between. Lane 0 of
// each warp notes the cycles until its stores are issued, until they are visible (__threadfence) and until
// the whole block is past a barrier after them, and its SM.
#include "common.cuh"

extern "C" __global__ void store_rows(uint4* __restrict__ dst, int words_per_warp, long long* __restrict__ stamps) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  uint4* out = dst + ((unsigned long long)blockIdx.x * warps + warp) * words_per_warp;
  __syncthreads();
  const long long t0 = clock64();
#pragma unroll 16
  for (int i = lane; i < words_per_warp; i += 32) out[i] = make_uint4(i, warp, blockIdx.x, 1u);
  const long long t1 = clock64();
  __threadfence();
  const long long t2 = clock64();
  __syncthreads();
  const long long t3 = clock64();
  if (lane == 0) {
    long long* s = stamps + ((unsigned long long)blockIdx.x * warps + warp) * 4;
    s[0] = t1 - t0;
    s[1] = t2 - t0;
    s[2] = t3 - t0;
    s[3] = smid();
  }
}
