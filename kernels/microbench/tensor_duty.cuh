// The tensor warpgroup of the power microbenchmarks (power_mix.cu, power_hbm.cu): keep the SM's tensor cores
// busy for a set share of each period, wgmma m64n256k16 chained from shared memory or mma.sync m16n8k16 from
// registers, then wait out the period on clock64. Only warpgroup 0 (threads 0-127) may call tensor_duty.
#pragma once
#include "common.cuh"
#include "v3_primitives.cuh"

namespace duty {

constexpr int CHAINS = 8;
constexpr int A_BYTES = 64 * 128, B_BYTES = 256 * 128;  // one k16 step of m64n256 in 128-byte swizzled rows

// The rest of the period: spinning on clock64, or (Sleep) napping in 128 ns steps between looks, as a warp
// parked on a barrier issues nothing.
template <bool Sleep>
__device__ __forceinline__ void wait_until(long long start, int period) {
  while (clock64() - start < period) {
    if (Sleep) __nanosleep(128);
  }
}

__device__ __forceinline__ void mma_bf16(float (&c)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// tensor: 0 wgmma (k per warpgroup per period, operands at `base` in shared memory), 1 mma.sync (k per warp
// per period, in CHAINS independent chains; operands from `init`). Returns the accumulators' sum (kept alive).
template <bool Sleep>
__device__ __forceinline__ float tensor_duty(int tensor, int k, int period, int periods, uint32_t base,
                                             const uint4* __restrict__ init) {
  float s = 0.f;
  if (tensor == 0) {
    float d[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) d[i] = 0.f;
    const uint64_t a = v3::smem_desc<128>(base, 16, 1024), b = v3::smem_desc<128>(base + A_BYTES, 16, 1024);
    for (int p = 0; p < periods; ++p) {
      const long long t = clock64();
      v3::wg_fence();
      for (int i = 0; i < k; ++i) v3::Wgmma<v3::Bf16, 256>::ss(d, a, b, 1);
      v3::wg_commit();
      v3::wg_wait<0>();
      wait_until<Sleep>(t, period);
    }
#pragma unroll
    for (int i = 0; i < 128; ++i) s += d[i];
  } else {
    float c[CHAINS][4] = {};
    const unsigned a[4] = {init[threadIdx.x].x, init[threadIdx.x].y, init[threadIdx.x].z, init[threadIdx.x].w};
    const unsigned b[2] = {init[threadIdx.x + 128].x, init[threadIdx.x + 128].y};
    for (int p = 0; p < periods; ++p) {
      const long long t = clock64();
      for (int i = 0; i < k; i += CHAINS) {
#pragma unroll
        for (int j = 0; j < CHAINS; ++j) mma_bf16(c[j], a, b);
      }
      wait_until<Sleep>(t, period);
    }
#pragma unroll
    for (int j = 0; j < CHAINS; ++j) s += c[j][0] + c[j][1] + c[j][2] + c[j][3];
  }
  return s;
}

}  // namespace duty
