// The elementwise work of our v3 consumer per K/V block, alone (softmax_loop.cuh), with no tensor work: one
// block per SM of W warpgroups (W warps per sub-partition); clock64 cycles per iteration of a warp.
#include "common.cuh"
#include "softmax_loop.cuh"

template <int D, int BN>
__device__ __forceinline__ void run(int iters, float sl2, float* sink, BlockTime* times) {
  BlockTimer timer;
  timer.start();
  const float v = softmax_loop<D, BN>(iters, sl2);
  keep(v, -1.2345f, sink);
  timer.stop(times);
}

#define SOFTMAX_MIX(D, BN, W)                                                                           \
  extern "C" __global__ void __launch_bounds__(128 * W, 1) softmax_d##D##_n##BN##_w##W(                 \
      int iters, float sl2, float* sink, BlockTime* times) {                                            \
    run<D, BN>(iters, sl2, sink, times);                                                                \
  }

// The v3 tiles' (head dim, block_n): three consumer warpgroups at d64 and d96, two at d128.
SOFTMAX_MIX(64, 128, 1)
SOFTMAX_MIX(64, 128, 2)
SOFTMAX_MIX(64, 128, 3)
SOFTMAX_MIX(96, 112, 1)
SOFTMAX_MIX(96, 112, 2)
SOFTMAX_MIX(96, 112, 3)
SOFTMAX_MIX(128, 176, 1)
SOFTMAX_MIX(128, 176, 2)
SOFTMAX_MIX(128, 128, 1)
SOFTMAX_MIX(128, 128, 2)
SOFTMAX_MIX(128, 128, 3)
