// Instruction fetch: how long a warp takes to run straight-line code it has never run on this SM (the decode
// kernel's prologue and epilogue are ~1600 such instructions per warp, 26 KiB of SASS), and a loop whose body
// may not fit the SM's instruction caches (the decode kernel's step is ~590 instructions, 9.4 KiB).
//
// Each line_k() is eight independent FFMAs on eight accumulators: eight 16-byte instructions, one 128-byte
// line of code, that one scheduler could issue in eight cycles were the code there. straight<LINES> runs LINES
// of them once; looped<LINES> runs them `reps` times. The block records its SM cycles (BlockTime); the host
// varies LINES, the warps per block and the blocks, after an L2 flush and after a warm-up launch.
#include "common.cuh"

#define FMA8(a, b)            \
  x0 = fmaf(x0, a, b);        \
  x1 = fmaf(x1, a, b);        \
  x2 = fmaf(x2, a, b);        \
  x3 = fmaf(x3, a, b);        \
  x4 = fmaf(x4, a, b);        \
  x5 = fmaf(x5, a, b);        \
  x6 = fmaf(x6, a, b);        \
  x7 = fmaf(x7, a, b);

template <int LINES>
__device__ __forceinline__ float run_lines(float a, float b, int reps) {
  float x0 = threadIdx.x, x1 = x0 + 1.f, x2 = x0 + 2.f, x3 = x0 + 3.f;
  float x4 = x0 + 4.f, x5 = x0 + 5.f, x6 = x0 + 6.f, x7 = x0 + 7.f;
#pragma unroll 1
  for (int r = 0; r < reps; ++r) {
#pragma unroll
    for (int i = 0; i < LINES; ++i) {
      FMA8(a, b)
    }
  }
  return x0 + x1 + x2 + x3 + x4 + x5 + x6 + x7;
}

template <int LINES>
__device__ __forceinline__ void body(float a, float b, int reps, float* sink, BlockTime* times) {
  BlockTimer timer;
  timer.start();
  const float s = run_lines<LINES>(a, b, reps);
  timer.stop(times + blockIdx.x);
  keep(s, 12345.f, sink);
}

#define IFETCH(LINES)                                                                                      \
  extern "C" __global__ void __launch_bounds__(1024) ifetch_l##LINES(float a, float b, int reps, float* sink, \
                                                                     BlockTime* times) {                     \
    body<LINES>(a, b, reps, sink, times);                                                                  \
  }

IFETCH(16)
IFETCH(32)
IFETCH(64)
IFETCH(128)
IFETCH(256)
IFETCH(512)
IFETCH(1024)
