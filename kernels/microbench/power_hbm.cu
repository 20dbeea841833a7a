// The SM clock under sustained tensor-core work and HBM reads together (power management counts the memory
// system's power too). One block per SM: warpgroup 0 keeps the tensor cores busy for a set share of each
// period as power_mix.cu does (wgmma m64n256k16 chained from shared memory, or mma.sync m16n8k16 from
// registers); warpgroups 1..R stream `loads` 16-byte ld.global.cg per thread per period from a buffer far
// larger than the L2, 16 in flight per thread; all then wait out the period on clock64. The host picks the
// shares, runs each mix for ~0.2 s, and reads the clock from clock64 over the global timer and the HBM rate
// from the bytes read over the time. sm_90a only (wgmma).
#include "common.cuh"
#include "v3_primitives.cuh"

using v3::Bf16;
using v3::smem_desc;
using v3::Wgmma;

constexpr int CHAINS = 8;
constexpr int IN_FLIGHT = 16;  // loads per thread issued before the first is consumed
constexpr int A_BYTES = 64 * 128, B_BYTES = 256 * 128;

// The rest of the period: spinning on clock64 (sleep 0) keeps the warp issuing, as no kernel's waiting warps
// do; sleep 1 naps in 128 ns steps, as a warp parked on a barrier issues nothing.
__device__ __forceinline__ void wait_until(long long start, int period, int sleep) {
  while (clock64() - start < period) {
    if (sleep) __nanosleep(128);
  }
}

__device__ __forceinline__ void mma_bf16(float (&c)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

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
        if (k > 0) {
          v3::wg_fence();
          for (int i = 0; i < k; ++i) Wgmma<Bf16, 256>::ss(d, a, b, 1);
          v3::wg_commit();
          v3::wg_wait<0>();
        }
        wait_until(t, period, sleep);
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
        wait_until(t, period, sleep);
      }
#pragma unroll
      for (int j = 0; j < CHAINS; ++j) s += c[j][0] + c[j][1] + c[j][2] + c[j][3];
    }
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
      wait_until(t, period, sleep);
    }
    s = (float)(acc.x ^ acc.y ^ acc.z);
  }
  keep(s, -1.2345f, sink);
  timer.stop(times);
}
