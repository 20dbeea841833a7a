// Instruction fetch: how long a warp takes to run straight-line code it has never run on this SM (the decode
// kernel's prologue and epilogue are ~1600 such instructions per warp, 26 KiB of SASS), and a loop whose body
// may not fit the SM's instruction caches (the decode kernel's step is ~590 instructions, 9.4 KiB).
//
// Each line_k() is eight independent FFMAs on eight accumulators: eight 16-byte instructions, one 128-byte
// line of code, that one scheduler could issue in eight cycles were the code there. straight<LINES> runs LINES
// of them once; looped<LINES> runs them `reps` times. The block records its SM cycles (BlockTime); the host
// varies LINES, the warps per block and the blocks, after an L2 flush and after a warm-up launch.
#include "common.cuh"

// Eight FFMAs, one per named accumulator: on eight different ones they are independent, on one a chain.
#define FMA8_ON(a, b, r0, r1, r2, r3, r4, r5, r6, r7) \
  r0 = fmaf(r0, a, b);                                \
  r1 = fmaf(r1, a, b);                                \
  r2 = fmaf(r2, a, b);                                \
  r3 = fmaf(r3, a, b);                                \
  r4 = fmaf(r4, a, b);                                \
  r5 = fmaf(r5, a, b);                                \
  r6 = fmaf(r6, a, b);                                \
  r7 = fmaf(r7, a, b);
#define FMA8(a, b) FMA8_ON(a, b, x0, x1, x2, x3, x4, x5, x6, x7)

// `reps` passes of UNITS unit(x0..x7) on eight accumulators, unrolled; the accumulators' sum.
template <int UNITS, typename Unit>
__device__ __forceinline__ float run_looped(int reps, Unit unit) {
  float x0 = threadIdx.x, x1 = x0 + 1.f, x2 = x0 + 2.f, x3 = x0 + 3.f;
  float x4 = x0 + 4.f, x5 = x0 + 5.f, x6 = x0 + 6.f, x7 = x0 + 7.f;
#pragma unroll 1
  for (int r = 0; r < reps; ++r) {
#pragma unroll
    for (int i = 0; i < UNITS; ++i) unit(x0, x1, x2, x3, x4, x5, x6, x7);
  }
  return x0 + x1 + x2 + x3 + x4 + x5 + x6 + x7;
}

template <int LINES>
__device__ __forceinline__ float run_lines(float a, float b, int reps) {
  return run_looped<LINES>(reps, [=](float& x0, float& x1, float& x2, float& x3, float& x4, float& x5, float& x6,
                                     float& x7) { FMA8(a, b) });
}

template <int LINES>
__device__ __forceinline__ void body(float a, float b, int reps, float* sink, BlockTime* times) {
  BlockTimer timer;
  timer.start();
  const float s = run_lines<LINES>(a, b, reps);
  timer.stop(times);
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
IFETCH(272)  // 34, 36 and 38 KiB: where between 32 and 40 KiB a loop stops being kept
IFETCH(288)
IFETCH(304)
IFETCH(320)
IFETCH(384)
IFETCH(448)
IFETCH(512)
IFETCH(1024)

// Branching code: each unit is a taken branch (on a runtime flag) over `SKIP` FFMAs to eight executed ones, so a
// warp runs nine instructions per unit and redirects its fetch once. SKIP 7 lands on the next 128-byte line
// (a unit is two lines), SKIP 23 two lines on (four). Against ifetch_l's straight lines this prices a taken
// branch in code the SM keeps (reps 16) and in code new to it (reps 1); our decode kernel's step takes ~8.
#define IF_FMA(r) "fma.rn.f32 %" #r ", %" #r ", %9, %10;\n\t"
#define IF_FMA8 IF_FMA(0) IF_FMA(1) IF_FMA(2) IF_FMA(3) IF_FMA(4) IF_FMA(5) IF_FMA(6) IF_FMA(7)
#define IF_SKIP7 IF_FMA(0) IF_FMA(1) IF_FMA(2) IF_FMA(3) IF_FMA(4) IF_FMA(5) IF_FMA(6)
#define IF_SKIP23 IF_SKIP7 IF_FMA8 IF_FMA8

#define IF_UNIT(NAME, SKIPPED)                                                                              \
  __device__ __forceinline__ void NAME(float& x0, float& x1, float& x2, float& x3, float& x4, float& x5,   \
                                       float& x6, float& x7, int taken, float a, float b) {                  \
    asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.s32 p, %8, 0;\n\t@p bra SKIP;\n\t" SKIPPED "SKIP:\n\t" IF_FMA8 \
                 "}"                                                                                       \
                 : "+f"(x0), "+f"(x1), "+f"(x2), "+f"(x3), "+f"(x4), "+f"(x5), "+f"(x6), "+f"(x7)         \
                 : "r"(taken), "f"(a), "f"(b));                                                            \
  }
IF_UNIT(unit_skip7, IF_SKIP7)
IF_UNIT(unit_skip23, IF_SKIP23)

template <int UNITS, int SKIP>
__device__ __forceinline__ float run_units(float a, float b, int reps, int taken) {
  return run_looped<UNITS>(reps, [=](float& x0, float& x1, float& x2, float& x3, float& x4, float& x5, float& x6,
                                     float& x7) {
    if (SKIP == 7) {
      unit_skip7(x0, x1, x2, x3, x4, x5, x6, x7, taken, a, b);
    } else {
      unit_skip23(x0, x1, x2, x3, x4, x5, x6, x7, taken, a, b);
    }
  });
}

#define IFETCH_BRANCH(UNITS, SKIP)                                                                          \
  extern "C" __global__ void __launch_bounds__(1024)                                                        \
      ifetch_b##SKIP##_u##UNITS(float a, float b, int reps, int taken, float* sink, BlockTime* times) {     \
    BlockTimer timer;                                                                                       \
    timer.start();                                                                                          \
    const float s = run_units<UNITS, SKIP>(a, b, reps, taken);                                              \
    timer.stop(times);                                                                                      \
    keep(s, 12345.f, sink);                                                                                 \
  }

// 2, 8, 16, 32 and 64 KiB of code each
IFETCH_BRANCH(8, 7)
IFETCH_BRANCH(32, 7)
IFETCH_BRANCH(64, 7)
IFETCH_BRANCH(128, 7)
IFETCH_BRANCH(256, 7)
IFETCH_BRANCH(4, 23)
IFETCH_BRANCH(16, 23)
IFETCH_BRANCH(32, 23)
IFETCH_BRANCH(64, 23)
IFETCH_BRANCH(128, 23)

// Code in the shape of a forward attention kernel's blocks: a prologue of P lines run once, a K/V loop body of
// L lines run `steps` times (causal: 1 to `steps`, varying from tile to tile and block to block, so the blocks an
// SM holds drift apart as causal ones do) and an epilogue of E lines, for `tiles` blocks' worth of work in a row
// (one timed block stands for the blocks an SM runs one after another). The (P, L, E) are the executed lines
// of our v2 and of SDPA's flash kernel by stretch (experiments/code_lines.py): the fetch they pay per block,
// with one or two blocks per SM, is what an instruction-cache model of those kernels must reproduce.
// Each stretch starts from the last one's result, so none of them can be hoisted out of the tile loop. KIND 0:
// each line's eight FFMAs are independent (a line issues in 8 cycles); 1: one dependent chain (about 36
// cycles, as slowly as an attention kernel's code runs per line); 2: eight lines of one, then eight of the
// other (bursts of fast code between slow stretches, as a softmax between products).
#define FMA8_CHAIN(a, b) FMA8_ON(a, b, x0, x0, x0, x0, x0, x0, x0, x0)

template <int LINES, int KIND>
__device__ __forceinline__ float run_lines_from(float seed, float a, float b, int reps) {
  float x0 = seed, x1 = seed + 1.f, x2 = seed + 2.f, x3 = seed + 3.f;
  float x4 = seed + 4.f, x5 = seed + 5.f, x6 = seed + 6.f, x7 = seed + 7.f;
#pragma unroll 1
  for (int r = 0; r < reps; ++r) {
#pragma unroll
    for (int i = 0; i < LINES; ++i) {
      if (KIND == 1 || (KIND == 2 && (i / 8) % 2)) {
        FMA8_CHAIN(a, b)
      } else {
        FMA8(a, b)
      }
    }
  }
  return (x0 + x1 + x2 + x3 + x4 + x5 + x6 + x7) * 0.125f;
}

template <int P, int L, int E, int KIND>
__device__ __forceinline__ void pattern(float a, float b, int steps, int causal, int tiles, float* sink,
                                        BlockTime* times) {
  BlockTimer timer;
  timer.start();
  float s = threadIdx.x;
#pragma unroll 1
  for (int t = 0; t < tiles; ++t) {
    const int n = causal ? 1 + (t + blockIdx.x) % steps : steps;
    s = run_lines_from<P, KIND>(s, a, b, 1);
    s = run_lines_from<L, KIND>(s, a, b, n);
    s = run_lines_from<E, KIND>(s, a, b, 1);
  }
  timer.stop(times);
  keep(s, 12345.f, sink);
}

#define IFETCH_PATTERN_KIND(NAME, P, L, E, KIND)                                                           \
  extern "C" __global__ void __launch_bounds__(1024) NAME(float a, float b, int steps, int causal, int tiles,  \
                                                          float* sink, BlockTime* times) {                  \
    pattern<P, L, E, KIND>(a, b, steps, causal, tiles, sink, times);                                       \
  }
#define IFETCH_PATTERN(P, L, E)                                          \
  IFETCH_PATTERN_KIND(ifetch_p##P##_l##L##_e##E, P, L, E, 0)             \
  IFETCH_PATTERN_KIND(ifetch_c_p##P##_l##L##_e##E, P, L, E, 1)           \
  IFETCH_PATTERN_KIND(ifetch_m_p##P##_l##L##_e##E, P, L, E, 2)

IFETCH_PATTERN(8, 32, 8)      // 6 KiB: kept
IFETCH_PATTERN(38, 155, 71)   // our v2, d64
IFETCH_PATTERN(38, 210, 71)   // our v2, d64 causal
IFETCH_PATTERN(52, 165, 122)  // our v2, d128 causal
IFETCH_PATTERN(233, 205, 57)  // SDPA flash, d64
IFETCH_PATTERN(273, 203, 58)  // SDPA flash, d64 causal
IFETCH_PATTERN(191, 150, 75)  // SDPA flash, d128
IFETCH_PATTERN(418, 149, 76)  // SDPA flash, d128 causal

// Two blocks on one SM running different code at once, as causal attention blocks at different places in their
// schedules do: each block takes a slot on its SM (an atomic per SM), slot 0 runs loop X and slot 1 loop Y for
// `reps` passes, both LINES lines of the same KIND but different instructions (X computes fma(x, a, b), Y
// fma(x, b, -a)); with `same` every block runs X. The host gives each block enough dynamic shared memory that
// an SM holds two; it zeroes `slots` (one int per SM) before each launch.
template <int LINES, int KIND, int VAR>
__device__ __forceinline__ float run_variant(float seed, float a, float b, int reps) {
  return VAR ? run_lines_from<LINES, KIND>(seed, b, -a, reps) : run_lines_from<LINES, KIND>(seed, a, b, reps);
}

template <int LINES, int KIND>
__device__ __forceinline__ void pair(float a, float b, int reps, int same, int* slots, float* sink,
                                     BlockTime* times) {
  __shared__ int slot;
  if (threadIdx.x == 0) slot = atomicAdd(slots + smid(), 1) & 1;
  BlockTimer timer;
  timer.start();
  float s = threadIdx.x;
  if (slot == 0 || same) {
    s = run_variant<LINES, KIND, 0>(s, a, b, reps);
  } else {
    s = run_variant<LINES, KIND, 1>(s, a, b, reps);
  }
  timer.stop(times);
  if (threadIdx.x == 0) times[blockIdx.x].pad = slot;  // after its record: the slot rides in the spare word
  keep(s, 12345.f, sink);
}

#define IFETCH_PAIR_KIND(NAME, LINES, KIND)                                                                  \
  extern "C" __global__ void __launch_bounds__(1024) NAME(float a, float b, int reps, int same, int* slots, \
                                                          float* sink, BlockTime* times) {                  \
    pair<LINES, KIND>(a, b, reps, same, slots, sink, times);                                                \
  }
#define IFETCH_PAIR(LINES)                               \
  IFETCH_PAIR_KIND(ifetch_pair_l##LINES, LINES, 0)       \
  IFETCH_PAIR_KIND(ifetch_pair_c_l##LINES, LINES, 1)     \
  IFETCH_PAIR_KIND(ifetch_pair_m_l##LINES, LINES, 2)

IFETCH_PAIR(64)   // 8 KiB a loop: two fit
IFETCH_PAIR(128)  // 16 KiB: two just fit
IFETCH_PAIR(144)  // 18 and 20 KiB: two loops of 36 and 40 KiB together
IFETCH_PAIR(160)
IFETCH_PAIR(192)  // 24 KiB: one fits, two do not
IFETCH_PAIR(256)  // 32 KiB: one just fits

// How far the fetch runs ahead of the warps: S lines of dependent chains (~32 cycles a line to issue, slower than
// a line comes) then F lines of independent FFMAs (8 cycles a line, faster), straight on, in code the SM does not
// keep (over 32 KiB in all, so a launch finds the previous one's first lines evicted). Were the fetch to stream
// the whole stretch in under the slow lines, the fast lines would run at their issue rate; fetching only near the
// warps, each fast line waits for its fetch. (Kernels of one kind alone were tried: the compiler moved their work
// past the stop timer. The straight sweep's ifetch_l kernels time such code.)
template <int S, int F>
__device__ __forceinline__ void ahead(float a, float b, float* sink, BlockTime* times) {
  BlockTimer timer;
  timer.start();
  float s = threadIdx.x;
  s = run_lines_from<S, 1>(s, a, b, 1);
  s = run_lines_from<F, 0>(s, a, b, 1);
  timer.stop(times);
  keep(s, 12345.f, sink);
}

#define IFETCH_AHEAD(S, F)                                                                                  \
  extern "C" __global__ void __launch_bounds__(1024) ifetch_ahead_s##S##_f##F(float a, float b, float* sink, \
                                                                               BlockTime* times) {          \
    ahead<S, F>(a, b, sink, times);                                                                         \
  }

IFETCH_AHEAD(16, 512)   // slow lead-ins of 2, 8, 32 and 64 KiB before 64 KiB of fast code
IFETCH_AHEAD(64, 512)
IFETCH_AHEAD(256, 512)
IFETCH_AHEAD(512, 512)
IFETCH_AHEAD(256, 256)  // 32 KiB of each
