// The SM clock under sustained tensor-core work and HBM reads together (power management counts the memory
// system's power too). One block per SM: warpgroup 0 keeps the tensor cores busy for a set share of each
// period as power_mix.cu does (wgmma m64n256k16 chained from shared memory, or mma.sync m16n8k16 from
// registers); warpgroups 1..R stream `loads` 16-byte ld.global.cg per thread per period from a buffer far
// larger than the L2, 16 in flight per thread; all then wait out the period on clock64. The host picks the
// shares, runs each mix for ~0.2 s, and reads the clock from clock64 over the global timer and the HBM rate
// from the bytes read over the time. sm_90a only (wgmma).
#include "tensor_duty.cuh"

constexpr int IN_FLIGHT = 16;  // loads per thread issued before the first is consumed

__device__ __forceinline__ uint4 load_cg(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.cg.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

// tensor: 0 wgmma, 1 mma.sync; k: tensor instructions per period (per warpgroup for wgmma, per warp for
// mma.sync); loads: 16-byte loads per streaming thread per period (a multiple of IN_FLIGHT); buffer: `words`
// uint4 (a power of two), read in one sweep that wraps.
extern "C" __global__ void __launch_bounds__(384) power_hbm(const uint4* __restrict__ init,
                                                            const uint4* __restrict__ buffer,
                                                            unsigned long long words, int tensor, int k,
                                                            int loads, int period, int periods, int sleep,
                                                            float* sink, BlockTime* times) {
  __shared__ alignas(1024) uint4 tiles[(duty::A_BYTES + duty::B_BYTES) / 16];
  for (int i = threadIdx.x; i < (duty::A_BYTES + duty::B_BYTES) / 16; i += blockDim.x) tiles[i] = init[i];
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  const uint32_t base = v3::smem_u32(tiles);
  float s = 0.f;
  BlockTimer timer;
  timer.start();
  if (threadIdx.x < 128) {
    s = sleep ? duty::tensor_duty<true>(tensor, k, period, periods, base, init)
              : duty::tensor_duty<false>(tensor, k, period, periods, base, init);
  } else {
    // consecutive threads of the chip read consecutive 16-byte words; each round of IN_FLIGHT loads moves on
    // by the whole grid's span, so no word is read twice before the sweep wraps (the buffer dwarfs the L2)
    const unsigned long long streamers = (unsigned long long)gridDim.x * (blockDim.x - 128);
    unsigned long long at = (unsigned long long)blockIdx.x * (blockDim.x - 128) + (threadIdx.x - 128);
    const unsigned long long mask = words - 1;
    uint4 acc = make_uint4(0, 0, 0, 0);
    for (int p = 0; p < periods; ++p) {
      const long long t = clock64();
      for (int i = 0; i < loads; i += IN_FLIGHT) {
        uint4 v[IN_FLIGHT];
#pragma unroll
        for (int j = 0; j < IN_FLIGHT; ++j) v[j] = load_cg(buffer + ((at + j * streamers) & mask));
#pragma unroll
        for (int j = 0; j < IN_FLIGHT; ++j) acc.x ^= v[j].x + v[j].w, acc.y ^= v[j].y, acc.z += v[j].z;
        at += IN_FLIGHT * streamers;
      }
      sleep ? duty::wait_until<true>(t, period) : duty::wait_until<false>(t, period);
    }
    s = (float)(acc.x ^ acc.y ^ acc.z);
  }
  keep(s, -1.2345f, sink);
  timer.stop(times);
}
