// The SM clock under a mixed, sustained load (power management): one block per SM, two warpgroups. The
// first keeps the tensor cores busy for a set share of each period (wgmma m64n256k16 chained from shared
// memory, or mma.sync m16n8k16 from registers), the second issues a set number of MUFU.EX2 and FFMA per
// thread in the same period; both then wait out the period on clock64. The host picks the shares, runs each
// mix for ~0.15 s, and reads the clock from clock64 over the global timer. sm_90a only (wgmma).
#include "common.cuh"
#include "v3_primitives.cuh"

using v3::Bf16;
using v3::smem_desc;
using v3::Wgmma;

constexpr int CHAINS = 8;
constexpr int A_BYTES = 64 * 128, B_BYTES = 256 * 128;  // one k16 step of m64n256 in 128-byte swizzled rows

__device__ __forceinline__ void spin_until(long long start, int period) {
  while (clock64() - start < period) {
  }
}

__device__ __forceinline__ void mma_bf16(float (&c)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// tensor: 0 wgmma, 1 mma.sync; k: tensor instructions per period (per warpgroup for wgmma, per warp for
// mma.sync); mufu, ffma: per thread per period, in CHAINS independent chains (multiples of CHAINS).
extern "C" __global__ void __launch_bounds__(256) power_mix(const uint4* __restrict__ init, int tensor, int k,
                                                            int mufu, int ffma, int period, int periods,
                                                            float* sink, BlockTime* times) {
  __shared__ alignas(1024) uint4 tiles[(A_BYTES + B_BYTES) / 16];
  for (int i = threadIdx.x; i < (A_BYTES + B_BYTES) / 16; i += blockDim.x) tiles[i] = init[i];
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  const uint32_t base = v3::smem_u32(tiles);
  float s = 0.f;
  BlockTimer timer;
  timer.start();
  if (threadIdx.x < 128) {
    if (tensor == 0) {
      float d[128];
#pragma unroll
      for (int i = 0; i < 128; ++i) d[i] = 0.f;
      const uint64_t a = smem_desc<128>(base, 16, 1024), b = smem_desc<128>(base + A_BYTES, 16, 1024);
      for (int p = 0; p < periods; ++p) {
        const long long t = clock64();
        v3::wg_fence();
        for (int i = 0; i < k; ++i) Wgmma<Bf16, 256>::ss(d, a, b, 1);
        v3::wg_commit();
        v3::wg_wait<0>();
        spin_until(t, period);
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
        spin_until(t, period);
      }
#pragma unroll
      for (int j = 0; j < CHAINS; ++j) s += c[j][0] + c[j][1] + c[j][2] + c[j][3];
    }
  } else {
    float x[CHAINS], y[CHAINS];
#pragma unroll
    for (int j = 0; j < CHAINS; ++j) x[j] = y[j] = 0.5f + threadIdx.x * 1e-5f + j * 1e-3f;
    for (int p = 0; p < periods; ++p) {
      const long long t = clock64();
      for (int i = 0; i < mufu; i += CHAINS) {
#pragma unroll
        for (int j = 0; j < CHAINS; ++j) asm volatile("ex2.approx.ftz.f32 %0, %1;" : "=f"(x[j]) : "f"(-x[j]));
      }
      for (int i = 0; i < ffma; i += CHAINS) {
#pragma unroll
        for (int j = 0; j < CHAINS; ++j) y[j] = fmaf(y[j], 0.999f, 1e-4f);
      }
      spin_until(t, period);
    }
#pragma unroll
    for (int j = 0; j < CHAINS; ++j) s += x[j] + y[j];
  }
  keep(s, -1.2345f, sink);
  timer.stop(times);
}
