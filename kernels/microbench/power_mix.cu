// The SM clock under a mixed, sustained load (power management): one block per SM, two warpgroups. The
// first keeps the tensor cores busy for a set share of each period (wgmma m64n256k16 chained from shared
// memory, or mma.sync m16n8k16 from registers), the second issues a set number of MUFU.EX2 and FFMA per
// thread in the same period; both then wait out the period on clock64. The host picks the shares, runs each
// mix for ~0.15 s, and reads the clock from clock64 over the global timer. sm_90a only (wgmma).
#include "tensor_duty.cuh"

using duty::CHAINS;

// tensor: 0 wgmma, 1 mma.sync; k: tensor instructions per period (per warpgroup for wgmma, per warp for
// mma.sync); mufu, ffma: per thread per period, in CHAINS independent chains (multiples of CHAINS).
extern "C" __global__ void __launch_bounds__(256) power_mix(const uint4* __restrict__ init, int tensor, int k,
                                                            int mufu, int ffma, int period, int periods,
                                                            float* sink, BlockTime* times) {
  __shared__ alignas(1024) uint4 tiles[(duty::A_BYTES + duty::B_BYTES) / 16];
  for (int i = threadIdx.x; i < (duty::A_BYTES + duty::B_BYTES) / 16; i += blockDim.x) tiles[i] = init[i];
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  const uint32_t base = v3::smem_u32(tiles);
  float s = 0.f;
  BlockTimer timer;
  timer.start();
  if (threadIdx.x < 128) {
    s = duty::tensor_duty<false>(tensor, k, period, periods, base, init);
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
      duty::wait_until<false>(t, period);
    }
#pragma unroll
    for (int j = 0; j < CHAINS; ++j) s += x[j] + y[j];
  }
  keep(s, -1.2345f, sink);
  timer.stop(times);
}
