// Memory-hierarchy microbenchmarks for calibration: streaming read / write / copy (HBM, or L2 when the
// buffer is small and re-read), pointer-chase latency, and cp.async (LDGSTS) issue rate and latency.
// Builds for sm_80 and sm_90a. Every kernel is extern "C" so the host loads it by name from the cubin.
#include "common.cuh"

// Four independent 16-byte loads in flight per thread per step: enough to cover HBM latency with
// 8 blocks x 512 threads per SM. Loads are .cg (L2 only): re-reads of a small buffer then measure L2,
// not the SM's own L1.
extern "C" __global__ void read_cg(const uint4* __restrict__ src, unsigned long long n16, int reps,
                                   unsigned* sink, BlockTime* times) {
  BlockTimer timer;
  timer.start();
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  const unsigned long long tid = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
  unsigned acc = 0;
  for (int r = 0; r < reps; ++r) {
    unsigned long long i = tid;
    for (; i + 3 * stride < n16; i += 4 * stride) {
      uint4 a = __ldcg(src + i), b = __ldcg(src + i + stride);
      uint4 c = __ldcg(src + i + 2 * stride), d = __ldcg(src + i + 3 * stride);
      acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
    }
    for (; i < n16; i += stride) {
      uint4 a = __ldcg(src + i);
      acc ^= a.x ^ a.y ^ a.z ^ a.w;
    }
  }
  keep(acc, 0x9e3779b9u, sink);
  timer.stop(times);
}

// Re-reading a buffer of n16 16-byte words (L2 when it fits): 8 independent streams per thread, each
// advancing by 8 x the thread count modulo n16 (the host passes that step already reduced, so one conditional
// subtraction wraps it). Every thread keeps 8 loads in flight whatever the footprint, which a plain
// grid-stride loop cannot when the buffer holds only a few words per thread.
extern "C" __global__ void read_wrap(const uint4* __restrict__ src, unsigned n16, unsigned step, int steps,
                                     unsigned* sink, BlockTime* times) {
  BlockTimer timer;
  timer.start();
  const unsigned threads = gridDim.x * blockDim.x;
  const unsigned tid = blockIdx.x * blockDim.x + threadIdx.x;
  unsigned idx[8];
#pragma unroll
  for (int k = 0; k < 8; ++k) idx[k] = (unsigned)(((unsigned long long)k * threads + tid) % n16);
  unsigned acc = 0;
  for (int s = 0; s < steps; ++s) {
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const uint4 a = __ldcg(src + idx[k]);
      acc ^= a.x ^ a.y ^ a.z ^ a.w;
      idx[k] += step;
      if (idx[k] >= n16) idx[k] -= n16;
    }
  }
  keep(acc, 0x9e3779b9u, sink);
  timer.stop(times);
}

// Streaming 16-byte stores of non-zero, position-dependent data (.cg: no L1 allocation).
extern "C" __global__ void write_cg(uint4* __restrict__ dst, unsigned long long n16, int reps, BlockTime* times) {
  BlockTimer timer;
  timer.start();
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  const unsigned long long tid = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
  for (int r = 0; r < reps; ++r) {
    for (unsigned long long i = tid; i < n16; i += stride) {
      unsigned v = (unsigned)i * 2654435761u + r;
      __stcg(dst + i, make_uint4(v, v ^ 1u, v ^ 2u, v ^ 3u));
    }
  }
  timer.stop(times);
}

// dst = src, 16 bytes per thread per step, two loads in flight.
extern "C" __global__ void copy_cg(const uint4* __restrict__ src, uint4* __restrict__ dst, unsigned long long n16,
                                   BlockTime* times) {
  BlockTimer timer;
  timer.start();
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
  for (; i + stride < n16; i += 2 * stride) {
    uint4 a = __ldcg(src + i), b = __ldcg(src + i + stride);
    __stcg(dst + i, a);
    __stcg(dst + i + stride, b);
  }
  if (i < n16) __stcg(dst + i, __ldcg(src + i));
  timer.stop(times);
}

// One thread follows next[] (a random cycle over cache lines, built by the host): each load's address
// depends on the previous load, so cycles per step is the load-to-use latency. .cg keeps L1 out of it.
extern "C" __global__ void chase(const unsigned* __restrict__ next, unsigned start, int steps, unsigned* end,
                                 long long* cycles) {
  unsigned j = start;
  const long long t0 = clock64();
  for (int s = 0; s < steps; ++s) j = __ldcg(next + j);
  const long long t1 = clock64();
  end[0] = j;
  cycles[0] = t1 - t0;
}

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void cp_async16(unsigned dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
}

// Sustained cp.async: every thread copies 8 x 16 B per step into its slots of one half of the block's
// buffer, halves alternating; waiting for all but the newest group keeps up to 16 copies per thread in
// flight. The source (n16 words, a power of two) is L2-resident when small: the rate is then the SM's
// cp.async issue rate, which is what the simulator charges per warp-wide instruction.
extern "C" __global__ void cp_async_stream(const uint4* __restrict__ src, unsigned long long n16, int iters,
                                           BlockTime* times) {
  extern __shared__ uint4 buf[];  // 2 halves x 8 slots x blockDim.x
  BlockTimer timer;
  timer.start();
  const unsigned long long mask = n16 - 1;
  const unsigned long long base = (unsigned long long)blockIdx.x * iters * 8 * blockDim.x;
  for (int it = 0; it < iters; ++it) {
    uint4* half = buf + (it & 1) * 8 * blockDim.x;
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      unsigned long long g = (base + ((unsigned long long)it * 8 + k) * blockDim.x + threadIdx.x) & mask;
      cp_async16(smem_addr(half + k * blockDim.x + threadIdx.x), src + g);
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
    asm volatile("cp.async.wait_group 1;" ::: "memory");
  }
  asm volatile("cp.async.wait_all;" ::: "memory");
  timer.stop(times);
}

// Round trip of one 16-byte cp.async by one thread: issue, commit, wait. Source lines are L2-resident
// (the host reads the buffer first); stepping by 128 B keeps each copy on a different line.
extern "C" __global__ void cp_async_latency(const uint4* __restrict__ src, unsigned long long n16, int steps,
                                            unsigned* sink, long long* cycles) {
  __shared__ uint4 slot[1];
  const long long t0 = clock64();
  for (int s = 0; s < steps; ++s) {
    cp_async16(smem_addr(slot), src + (((unsigned long long)s * 8) & (n16 - 1)));
    asm volatile("cp.async.commit_group;" ::: "memory");
    asm volatile("cp.async.wait_all;" ::: "memory");
  }
  const long long t1 = clock64();
  sink[0] = slot[0].x;
  cycles[0] = t1 - t0;
}

// fp32 reductions into global memory as FA2's backward adds its dQ: each warp instruction adds two floats per
// lane (red.global.add.v2.f32 on sm_90, two scalar reds before) over 8 rows x 32 bytes of a 64 x 128 fp32 tile
// (32 KiB), 16 instructions per thread per pass over the tile, 8 warps per block. tiles: how many distinct
// tiles the blocks add into (1: every block into the same one, as the key blocks of a head add into the same
// Q block's rows at once; gridDim.x: each its own). Values are tiny so the sums stay finite.
extern "C" __global__ void red_dq(float* __restrict__ accum, int tiles, int iters, BlockTime* times) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
  float* tile = accum + (size_t)(blockIdx.x % tiles) * 64 * 128;
  // warp (wr, wc) of a 2 x 4 grid owns rows wr*32.. and columns wc*32..: FA2's dQ layout at d128
  const int row0 = (warp % 2) * 32, col0 = (warp / 2) * 32;
  BlockTimer timer;
  timer.start();
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      float* dst = tile + (row0 + (j / 4) * 8 + g) * 128 + col0 + (j % 4) * 8 + t * 2;
#if __CUDA_ARCH__ >= 900
      atomicAdd(reinterpret_cast<float2*>(dst), make_float2(1e-30f, 1e-30f));
#else
      atomicAdd(dst, 1e-30f);
      atomicAdd(dst + 1, 1e-30f);
#endif
    }
  }
  timer.stop(times);
}

// O written from mma accumulator fragments, as our v3 epilogue (kernels/v3_epilogue.cuh) writes it: lane
// (g = lane / 4, t = lane % 4) holds two 16-bit values of rows g and g + 8 at columns 8c + 2t of each 8-column
// chunk c and stores them as one 4-byte word, so a warp instruction writes 16 bytes into each of 8 rows. Each
// warp writes `tiles` tiles of 16 rows x d columns one after another into its own stretch of dst (row r of
// tile k at row (warp * tiles + k) * 16 + r, wrapped at n_rows rows, so a small buffer stays in L2).
// coalesced = 1: the same bytes as 16-byte words, each warp instruction 512 contiguous bytes. Plain stores, as
// the kernel's.
extern "C" __global__ void store_frag(unsigned* __restrict__ dst, int d, unsigned long long n_rows, int tiles,
                                      int coalesced, BlockTime* times) {
  BlockTimer timer;
  timer.start();
  const int lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
  const unsigned long long warp = ((unsigned long long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int words = d / 2;  // 4-byte words per row
  for (int k = 0; k < tiles; ++k) {
    unsigned* tile = dst + (((warp * tiles + k) * 16) % n_rows) * words;
    const unsigned v = (unsigned)warp * 2654435761u ^ (unsigned)k;
    if (coalesced) {
      uint4* t4 = reinterpret_cast<uint4*>(tile);
      for (int i = lane; i < 4 * words; i += 32) t4[i] = make_uint4(v, v ^ 1u, v ^ 2u, v ^ (unsigned)i);
    } else {
      for (int c = 0; c < d / 8; ++c) {
#pragma unroll
        for (int i = 0; i < 2; ++i) tile[(g + 8 * i) * words + 4 * c + t] = v ^ (unsigned)(2 * c + i);
      }
    }
  }
  timer.stop(times);
}

// How long a warp is held by its own fragment stores: each warp times (clock64) a burst of `count` fragment
// stores per thread (16 bytes into each of 8 rows per instruction, as store_frag) into its own rows of dst, all
// warps of the block at once; the stores are fire-and-forget, so the time is what the warp waits for room in the
// load/store path, not for the stores to land. cycles[warp] receives it.
extern "C" __global__ void store_frag_burst(unsigned* __restrict__ dst, int count, long long* cycles) {
  const int lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
  const unsigned long long warp = ((unsigned long long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int words = 4 * count;  // one 16-byte piece per row per store: count pieces of 16 B per row
  unsigned* rows = dst + warp * 16 * words;
  __syncthreads();
  const long long t0 = clock64();
  for (int c = 0; c < count / 2; ++c) {
#pragma unroll
    for (int i = 0; i < 2; ++i) rows[(g + 8 * i) * words + 4 * c + t] = (unsigned)(warp + c + i);
  }
  const long long t1 = clock64();
  if (lane == 0) cycles[warp] = t1 - t0;
}

// cp.async copies of 64 x 96 bf16 tiles (12 16-byte chunks per row) into shared memory, as our v2 kernel copies
// K and V at d96 (kernels/include/common.cuh load_tile_async: copy idx -> row idx / 12, chunk idx % 12), with a
// row stride of `stride` bytes: 208 is the kernel's padded layout (96 columns are no whole 128-byte swizzle
// atom), 192 packs the rows. Two tiles in flight per block (wait_group 1); the source is L2-resident, so the
// rate is the SM's: how the layout's shared-memory write conflicts cost.
extern "C" __global__ void cp_async_d96(const uint4* __restrict__ src, unsigned long long n16, int stride, int iters,
                                        BlockTime* times) {
  extern __shared__ __align__(128) unsigned char tiles[];  // 2 x 64 rows x stride bytes
  BlockTimer timer;
  timer.start();
  const unsigned long long mask = n16 - 1;
  for (int it = 0; it < iters; ++it) {
    unsigned char* tile = tiles + (it & 1) * 64 * stride;
    const unsigned long long base = ((unsigned long long)blockIdx.x * iters + it) * 64 * 12;
    for (int idx = threadIdx.x; idx < 64 * 12; idx += blockDim.x) {
      const int row = idx / 12, chunk = idx % 12;
      cp_async16(smem_addr(tile + row * stride + chunk * 16), src + ((base + idx) & mask));
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
    asm volatile("cp.async.wait_group 1;" ::: "memory");
  }
  asm volatile("cp.async.wait_all;" ::: "memory");
  timer.stop(times);
}
