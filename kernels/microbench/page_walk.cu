// What the first touch of a page costs after the L2 flush: address translation against data misses.
//
// page_chase: one thread follows next[] (built by the host) through lines of its choosing, each load's
// address depending on the one before, so cycles per step is the load-to-use latency of that kind of step: a
// line in a page touched before (the translation cached) or the first line of a page not touched since the
// flush (the translation walked again, if the flush evicted it). Same loop as membw's chase, with 64-bit
// indices so one cycle may span several GiB.
//
// touch_stride: thread i of the grid reads one 16-byte word at src + offset + i x stride (count threads):
// as a primer it touches one line of every page of a region (its translation cached, its other lines still
// cold); as a probe it is a launch whose every thread misses once, in `count` distinct pages or few.
#include "common.cuh"

extern "C" __global__ void page_chase(const unsigned long long* __restrict__ next, unsigned long long start,
                                      int steps, unsigned long long* end, long long* cycles) {
  unsigned long long j = start;
  const long long t0 = clock64();
  for (int s = 0; s < steps; ++s) j = __ldcg(next + j);
  const long long t1 = clock64();
  end[0] = j;
  cycles[0] = t1 - t0;
}

extern "C" __global__ void touch_stride(const uint4* __restrict__ src, unsigned long long stride16,
                                        unsigned long long count, unsigned* sink) {
  const unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= count) return;
  const uint4 a = __ldcg(src + i * stride16);
  keep(a.x ^ a.y ^ a.z ^ a.w, 0x9e3779b9u, sink);
}
