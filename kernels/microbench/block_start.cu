// What a thread block spends before its first copy: the costs our v3's producer pays from entry to issuing Q's
// TMA copy (1.5-1.9 k cycles, phase stamps of session 32), and our v2's prologue before its first cp.async, taken
// apart. Thread 0 of each block times, in SM cycles:
// - param_chain: a chain of constant-bank reads (LDC with a register offset, as the kernels' reads of their
//   parameters), each index the value the read before returned, every read on a 64-byte line of its own. The
//   first pass follows the chain cold, as a kernel's first reads of its parameters do (the harness writes the
//   bank before each launch, as a launch writes its parameters); the second pass follows it again, warm.
// - barrier_setup: initialising `nbar` mbarriers in shared memory, the fence that publishes them, and the block's
//   barrier after it (our v3: 2 Q buffers x 2 + 4 per K/V stage).
// - regs_realloc: setmaxnreg, a producer warpgroup lowering its registers and the consumers raising theirs.
// - index_chain: the tile scheduler's index arithmetic, divisions and remainders by runtime values, each step
//   on the last one's result.
#include "common.cuh"

#define CHAIN_WORDS 512  // 2 KiB of parameters: 32 lines of 64 bytes

__constant__ int chain_next[CHAIN_WORDS];  // chain_next[i]: the index read after i (a line of 16 words each step)

// The SM clock once `v` has arrived: a branch on `v` (to a trap never taken) stands before the clock read, so
// the warp reads the clock only once `v` is there.
__device__ __forceinline__ long long clock_after(int v) {
  if (v == -12345) asm volatile("trap;");
  long long t;
  asm volatile("mov.u64 %0, %%clock64;" : "=l"(t)::"memory");
  return t;
}

__device__ __forceinline__ long long clock_now() {
  long long t;
  asm volatile("mov.u64 %0, %%clock64;" : "=l"(t)::"memory");
  return t;
}

// out[block * 4 + k]: cycles to the kernel's first parameter (steps) read from entry, of the cold pass, of the
// warm pass, the SM
extern "C" __global__ void param_chain(int steps, long long* out, int* sink) {
  const long long entry = clock_now();
  if (threadIdx.x != 0) return;
  const long long t0 = clock_after(steps);
  int i = 0;
#pragma unroll 1
  for (int s = 0; s < steps; ++s) i = chain_next[i] + (threadIdx.x >> 10);  // 0, but not uniform: LDC
  const long long t1 = clock_after(i);
  int j = 0;
#pragma unroll 1
  for (int s = 0; s < steps; ++s) j = chain_next[j] + (threadIdx.x >> 10);
  const long long t2 = clock_after(j);
  long long* o = out + blockIdx.x * 4;
  o[0] = t0 - entry;
  o[1] = t1 - t0;
  o[2] = t2 - t1;
  o[3] = smid();
  if (i + j == -1) *sink = i;  // keeps the chains
}

__device__ __forceinline__ void mbar_init(uint32_t addr, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(addr), "r"(count) : "memory");
}

// out[block * 4 + k]: cycles to the barriers' initialisation issued, to the fence past, to the block's barrier
// past, the SM
extern "C" __global__ void barrier_setup(int nbar, long long* out) {
  __shared__ __align__(8) unsigned long long bars[32];
  const long long t0 = clock_now();
  long long t1 = t0, t2 = t0;
  if (threadIdx.x == 0) {
    for (int b = 0; b < nbar && b < 32; ++b)
      mbar_init(static_cast<uint32_t>(__cvta_generic_to_shared(&bars[b])), b & 1 ? 256 : 1);
    t1 = clock_now();
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    t2 = clock_now();
  }
  __syncthreads();
  const long long t3 = clock_now();
  if (threadIdx.x == 0) {
    long long* o = out + blockIdx.x * 4;
    o[0] = t1 - t0;
    o[1] = t2 - t0;
    o[2] = t3 - t0;
    o[3] = smid();
  }
}

// 384 threads: warpgroup 0 lowers its registers to 40, warpgroups 1 and 2 raise theirs to 232 (our v3 at d128).
// out[block * 4 + k]: the producer's cycles to lowered, a consumer's to raised, the block's to past a barrier, SM
extern "C" __global__ void __launch_bounds__(384, 1) regs_realloc(long long* out) {
  const int wg = threadIdx.x / 128;
  __syncthreads();
  const long long t0 = clock_now();
  if (wg == 0)
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;" ::: "memory");
  else
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;" ::: "memory");
  const long long t1 = clock_now();
  __shared__ long long took[3];
  if (threadIdx.x % 128 == 0) took[wg] = t1 - t0;
  __syncthreads();
  const long long t2 = clock_now();
  if (threadIdx.x == 0) {
    long long* o = out + blockIdx.x * 4;
    o[0] = took[0];
    o[1] = took[1];
    o[2] = t2 - t0;
    o[3] = smid();
  }
}

// The scheduler's arithmetic for `steps` tiles in a row, each on the last one's result: tile t of n_mblocks
// query blocks over heads x batch, as v3_tile_scheduler.cuh's tile_at.
// out[block * 4 + k]: cycles, steps, a checksum, the SM
extern "C" __global__ void index_chain(int n_mblocks, int heads, int group, int steps, long long* out) {
  if (threadIdx.x != 0) return;
  int t = blockIdx.x;
  // the parameters in registers first: only the arithmetic is timed
  const long long t0 = clock_after(n_mblocks ^ heads ^ group ^ steps);
#pragma unroll 1
  for (int s = 0; s < steps; ++s) {
    const int m_block = n_mblocks - 1 - t % n_mblocks;
    const int pair = t / n_mblocks;
    const int head = pair % heads, batch = pair / heads, kv_head = head / group;
    t = (m_block + head + batch + kv_head) & 0xffff;
  }
  const long long t1 = clock_after(t);
  long long* o = out + blockIdx.x * 4;
  o[0] = t1 - t0;
  o[1] = steps;
  o[2] = t;
  o[3] = smid();
}
