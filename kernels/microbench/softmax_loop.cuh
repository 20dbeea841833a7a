// The elementwise work of our v3 consumer per K/V block, on its own: `iters` times the kernel's own
// Consumer::softmax, rescale_o and convert_p (v3_mainloop.cuh) on a warpgroup's register tiles (64 x BN S,
// 64 x D O). Between iterations S, O and P are pinned (an empty asm that claims to rewrite them, as the wgmma
// that writes S and reads P does in the kernel), so every iteration issues the loop body's instructions, and
// every register of O and P stays live to the end, so no iteration's rescale or conversion is dead code. The
// values stay finite: S becomes P in (0, 1], the running max settles, l grows by at most BN. Returns a value
// to keep.
#pragma once
#include "v3_mainloop.cuh"

template <int D, int BN>
__device__ __forceinline__ float softmax_loop(int iters, float sl2) {
  using C = v3::Cfg<v3::Bf16, D, 128, BN, 2, false, true, true>;
  using Cs = v3::Consumer<C>;
  Cs cs;
#pragma unroll
  for (int i = 0; i < Cs::NS; ++i) cs.s[i] = 1e-3f * ((threadIdx.x + 7 * i) & 63);
#pragma unroll
  for (int i = 0; i < Cs::NO; ++i) cs.o[i] = 1.f;
  cs.m[0] = cs.m[1] = -INFINITY;
  cs.l[0] = cs.l[1] = 0.f;
  for (int it = 0; it < iters; ++it) {
    v3::pin(cs.s);
    float alpha[2];
    cs.softmax(sl2, alpha);
    v3::pin(cs.o);
    cs.rescale_o(alpha, 1.f);
    cs.convert_p();
    v3::pin(cs.p);
  }
  float acc = cs.l[0] + cs.l[1];
#pragma unroll
  for (int i = 0; i < Cs::NO; ++i) acc += cs.o[i];
  uint32_t bits = 0;
#pragma unroll
  for (int i = 0; i < Cs::NP; ++i) bits ^= cs.p[i];
  return acc + __uint_as_float(bits & 0x3f803f80u);
}
