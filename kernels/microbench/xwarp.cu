// Row statistics combined across a block's warps through shared memory, as our V1 kernel's softmax does
// (kernels/v1.cu): each of W warps holds a 16 x 32 slice of S (16 values a thread, kernels/v1.cu's kMT = 1,
// kNT = 4), and per iteration
//   1. its row max (FMNMX over the thread's values, quad_max), one value per row into shared memory;
//   2. __syncthreads, the max over the W warps (W shared loads), the exponentials (FFMA + MUFU.EX2) and the
//      row sum (quad_sum) into shared memory; P packed to bf16;
//   3. __syncthreads, then one thread per row folds the W maxima and sums into the row's running (m, l) and
//      two coefficients (two MUFU.EX2, an MUFU.RCP) into shared memory;
//   4. __syncthreads, every thread reads its rows' coefficients and scales its values by them (the next
//      iteration's S depends on them, as V1's O update does on the same coefficients).
// xwarp_local_w<W> does the same arithmetic with every exchange through shared memory and every barrier left
// out (each warp's own row statistics stand in for the block's), so the difference is what the exchanges
// cost. xwarp_bar_w<W>: the three barriers alone, around a dependent FFMA each.
#include <cuda_bf16.h>

#include "common.cuh"
#include "include/common.cuh"  // the kernels' quad reductions, as kernels/v1.cu uses them

namespace {

constexpr int kRows = 16;  // V1's Q rows per block (BR)
constexpr int kVals = 16;  // S values per thread: 1 m16 tile x 4 n8 tiles x 4

__device__ __forceinline__ float ex2(float x) {
  float y;
  asm volatile("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

template <int W, bool EXCHANGE>
__device__ __forceinline__ void softmax_loop(int iters, float scale, float* sink, BlockTime* times) {
  __shared__ float warp_max[W * kRows], warp_sum[W * kRows];
  __shared__ float2 coef[kRows];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  float s[kVals];
#pragma unroll
  for (int i = 0; i < kVals; ++i) s[i] = 1e-2f * ((tid * 7 + i * 13) & 31);
  float m_run = -INFINITY, l_run = 0.f;  // thread tid < kRows: row tid's running statistics
  uint32_t packed = 0;
  BlockTimer timer;
  timer.start();
  for (int it = 0; it < iters; ++it) {
    float mx[2], sum[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {  // rows g and g + 8 of the m16 tile: values 2r, 2r + 1 of each n8 tile
      float m = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) m = fmaxf(m, fmaxf(s[nt * 4 + 2 * r], s[nt * 4 + 2 * r + 1]));
      mx[r] = flashsim::quad_max(m);
      if (EXCHANGE && t == 0) warp_max[warp * kRows + g + 8 * r] = mx[r];
    }
    if (EXCHANGE) __syncthreads();
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float m = mx[r];
      if (EXCHANGE) {
        m = -INFINITY;
#pragma unroll
        for (int w = 0; w < W; ++w) m = fmaxf(m, warp_max[w * kRows + g + 8 * r]);
      }
      const float ms = m * scale;
      float acc = 0.f;
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        s[nt * 4 + 2 * r] = ex2(s[nt * 4 + 2 * r] * scale - ms);
        s[nt * 4 + 2 * r + 1] = ex2(s[nt * 4 + 2 * r + 1] * scale - ms);
        acc += s[nt * 4 + 2 * r] + s[nt * 4 + 2 * r + 1];
      }
      sum[r] = flashsim::quad_sum(acc);
      mx[r] = m;
      if (EXCHANGE && t == 0) warp_sum[warp * kRows + g + 8 * r] = sum[r];
    }
#pragma unroll
    for (int i = 0; i < kVals; i += 2) {  // P packed to bf16 for P V, as V1 does
      __nv_bfloat162 p2 = __floats2bfloat162_rn(s[i], s[i + 1]);
      packed ^= *reinterpret_cast<uint32_t*>(&p2);
    }
    float2 c;
    if (EXCHANGE) {
      __syncthreads();
      if (tid < kRows) {  // one thread per row folds the warps' statistics
        float mt = -INFINITY, lt = 0.f;
#pragma unroll
        for (int w = 0; w < W; ++w) {
          mt = fmaxf(mt, warp_max[w * kRows + tid]);
          lt += warp_sum[w * kRows + tid];
        }
        const float m_new = fmaxf(m_run, mt);
        const float e_old = ex2((m_run - m_new) * scale), e_blk = ex2((mt - m_new) * scale);
        l_run = e_old * l_run + e_blk * lt;
        m_run = m_new;
        const float inv_l = __fdividef(1.f, l_run);
        coef[tid] = make_float2(e_old * inv_l, e_blk * inv_l);
      }
      __syncthreads();
      c = coef[g];
    } else {  // the same fold on this thread's own row statistics
      const float m_new = fmaxf(m_run, mx[0]);
      const float e_old = ex2((m_run - m_new) * scale), e_blk = ex2((mx[0] - m_new) * scale);
      l_run = e_old * l_run + e_blk * sum[0];
      m_run = m_new;
      const float inv_l = __fdividef(1.f, l_run);
      c = make_float2(e_old * inv_l, e_blk * inv_l);
    }
#pragma unroll
    for (int i = 0; i < kVals; ++i) s[i] = fmaf(s[i], c.y, c.x);  // the next S hangs on the coefficients
  }
  float acc = __uint_as_float(packed & 0x3f803f80u) + m_run + l_run;
#pragma unroll
  for (int i = 0; i < kVals; ++i) acc += s[i];
  keep(acc, -1.2345f, sink);
  timer.stop(times);
}

// The three barriers of an iteration alone, a dependent FFMA between each.
__device__ __forceinline__ void bar_loop(int iters, float* sink, BlockTime* times) {
  float x = 1e-3f * threadIdx.x;
  BlockTimer timer;
  timer.start();
  for (int it = 0; it < iters; ++it) {
    x = fmaf(x, 0.999f, 1e-4f);
    __syncthreads();
    x = fmaf(x, 0.999f, 1e-4f);
    __syncthreads();
    x = fmaf(x, 0.999f, 1e-4f);
    __syncthreads();
  }
  keep(x, -1.2345f, sink);
  timer.stop(times);
}

}  // namespace

#define XWARP(W)                                                                                          \
  extern "C" __global__ void xwarp_v1_w##W(int iters, float scale, float* sink, BlockTime* times) {       \
    softmax_loop<W, true>(iters, scale, sink, times);                                                     \
  }                                                                                                       \
  extern "C" __global__ void xwarp_local_w##W(int iters, float scale, float* sink, BlockTime* times) {    \
    softmax_loop<W, false>(iters, scale, sink, times);                                                    \
  }                                                                                                       \
  extern "C" __global__ void xwarp_bar_w##W(int iters, float scale, float* sink, BlockTime* times) {      \
    bar_loop(iters, sink, times);                                                                         \
  }
XWARP(4)
XWARP(8)
