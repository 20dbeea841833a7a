// HBM streaming reads through a cp.async ring shaped like the decode kernel's K/V copies, with the host
// choosing how many blocks read on each SM: the bandwidth of 1..all SMs, of 1..4 blocks per SM, of an uneven
// mix (some SMs with two blocks, some with one, as FA2's split heuristic leaves them), and of each block's
// bytes in flight (stages x tile bytes).
//
// The grid is sm_count x k_max blocks whose shared memory lets exactly k_max of them share an SM, so every SM
// holds k_max at once. Thread 0 of each block takes the next arrival slot of its SM; blocks with a slot at or
// past want[smid] exit at once, the others take the next work index and read their own region of the buffer.
// SM ids need not be contiguous, so want[] and the counters are indexed by %smid (MAX_SMID entries): arrivals[0]
// is the work index, arrivals[1 + smid] the SM's arrivals (the host zeroes them before each launch).
#include "common.cuh"

constexpr unsigned MAX_SMID = 256;  // experiments/hbm_probe.py, MAX_SMID

__device__ __forceinline__ unsigned smem_u32(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void cp16(unsigned dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
}

template <int N>
__device__ __forceinline__ void wait_groups() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// A working block reads block_words 16-byte words: a "K" half and a "V" half, tile_words of each per stage,
// STAGES - 1 stages in flight while the oldest is consumed (the decode kernel's ring, without its math).
template <int STAGES>
__device__ __forceinline__ void ring_read(const uint4* __restrict__ src, const int* __restrict__ want,
                                          unsigned* arrivals, unsigned long long block_words, unsigned tile_words,
                                          unsigned* sink, BlockTime* times) {
  extern __shared__ __align__(128) uint4 ring[];  // STAGES x (K tile, V tile)
  __shared__ unsigned s_work;
  const unsigned sm = min(smid(), MAX_SMID - 1);
  if (threadIdx.x == 0) {
    const unsigned slot = atomicAdd(arrivals + 1 + sm, 1u);
    s_work = (int)slot < want[sm] ? atomicAdd(arrivals, 1u) : 0xffffffffu;
  }
  __syncthreads();
  const unsigned work = s_work;
  if (work == 0xffffffffu) return;
  BlockTimer timer;
  timer.start();
  const uint4* k = src + work * block_words;
  const uint4* v = k + block_words / 2;
  const unsigned long long tiles = block_words / 2 / tile_words;
  auto issue = [&](unsigned long long t, int stage) {
    const unsigned sk = smem_u32(ring + (2 * stage) * tile_words), sv = sk + tile_words * 16;
    for (unsigned i = threadIdx.x; i < tile_words; i += blockDim.x) {
      cp16(sk + i * 16, k + t * tile_words + i);
      cp16(sv + i * 16, v + t * tile_words + i);
    }
  };
#pragma unroll
  for (int st = 0; st < STAGES - 1; ++st) {
    if (st < tiles) issue(st, st);
    asm volatile("cp.async.commit_group;" ::: "memory");
  }
  unsigned acc = 0;
  for (unsigned long long t = 0; t < tiles; ++t) {
    wait_groups<STAGES - 2>();
    __syncthreads();  // tile t landed for every thread; stage (t - 1) % STAGES is free to refill
    const unsigned long long ahead = t + STAGES - 1;
    if (ahead < tiles) issue(ahead, ahead % STAGES);
    asm volatile("cp.async.commit_group;" ::: "memory");
    const uint4* stage = ring + 2 * (t % STAGES) * tile_words;
    if (threadIdx.x < tile_words) acc ^= stage[threadIdx.x].x ^ stage[tile_words + threadIdx.x].y;
  }
  wait_groups<0>();
  keep(acc, 0x9e3779b9u, sink);
  __syncthreads();
  if (threadIdx.x == 0) times[work] = BlockTime{timer.clk0, clock64(), timer.ns0, globaltimer_ns(), sm, 0u};  // by work
}

#define HBM_PROBE_RING(STAGES)                                                                                  \
  extern "C" __global__ void ring_read_s##STAGES(const uint4* __restrict__ src, const int* __restrict__ want,   \
                                                 unsigned* arrivals, unsigned long long block_words,             \
                                                 unsigned tile_words, unsigned* sink, BlockTime* times) {        \
    ring_read<STAGES>(src, want, arrivals, block_words, tile_words, sink, times);                               \
  }
HBM_PROBE_RING(2)
HBM_PROBE_RING(3)
HBM_PROBE_RING(4)
HBM_PROBE_RING(6)
