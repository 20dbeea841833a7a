// Shared helpers of the calibration microbenchmarks: clocks, SM id and the per-block timing record.
//
// Every throughput kernel writes one BlockTime per block. The SM clock counter (clock64) gives the cycles a
// block ran, so per-clock rates need no assumed frequency; the global timer (nanoseconds, shared by all SMs)
// over the same span gives the clock frequency the SM actually ran at under that load.
#pragma once
#include <stdint.h>

struct BlockTime {
  long long clk0, clk1;  // SM cycles at the block's start and end (thread 0, after barriers)
  unsigned long long ns0, ns1;  // global timer at the same points
  unsigned smid, pad;
};
static_assert(sizeof(BlockTime) == 40, "BlockTime layout: experiments/calibrate_bench.py mirrors it");

__device__ __forceinline__ unsigned long long globaltimer_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ unsigned smid() {
  unsigned id;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
  return id;
}

// Start and end stamps; call from every thread (they include a barrier), thread 0 records.
struct BlockTimer {
  long long clk0;
  unsigned long long ns0;
  __device__ __forceinline__ void start() {
    __syncthreads();
    clk0 = clock64();
    ns0 = globaltimer_ns();
  }
  __device__ __forceinline__ void stop(BlockTime* out) {
    __syncthreads();
    if (threadIdx.x == 0) {
      long long clk1 = clock64();
      unsigned long long ns1 = globaltimer_ns();
      BlockTime t;
      t.clk0 = clk0;
      t.clk1 = clk1;
      t.ns0 = ns0;
      t.ns1 = ns1;
      t.smid = smid();
      t.pad = 0;
      out[blockIdx.x] = t;
    }
  }
};

// Keeps a value alive without storing it: the compiler cannot prove the branch is never taken.
template <typename T>
__device__ __forceinline__ void keep(T value, T never, T* sink) {
  if (value == never) *sink = value;
}
