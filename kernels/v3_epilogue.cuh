// The epilogue (FA3's epilogue_fwd): normalise O by the row sums and store it to global memory.
#pragma once

#include "v3_mainloop.cuh"
#include "v3_tile_scheduler.cuh"

namespace v3 {

template <class T> struct OutElem;
template <> struct OutElem<Bf16> { using Pack = Elem<Bf16>; };
template <> struct OutElem<Fp16> { using Pack = Elem<Fp16>; };
template <> struct OutElem<E4m3> { using Pack = Elem<Bf16>; };  // fp8 inputs write bf16

// The epilogue: O / l (times the fp8 V scale dv), stored from registers; rows >= nq are skipped. A row that
// saw no key (l = 0) stores 0.
template <class C>
__device__ __forceinline__ void store_o(const Consumer<C>& cs, float dv, const Tile& x, int row0, int col0,
                                        const V3Params& prm) {
  using Pack = typename OutElem<typename C::T>::Pack;
  float inv[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    float sum = cs.l[i];
    sum += __shfl_xor_sync(0xffffffff, sum, 1);
    sum += __shfl_xor_sync(0xffffffff, sum, 2);
    inv[i] = (sum > 0.f ? 1.f / sum : 0.f) * dv;
  }
  uint16_t* out = static_cast<uint16_t*>(prm.o) + x.batch * prm.o_stride_b + x.head * prm.o_stride_h;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int row = row0 + 8 * i;
    if (row < prm.nq) {
      uint16_t* orow = out + row * prm.o_stride_n + col0;
#pragma unroll
      for (int cc = 0; cc < C::D / 8; ++cc) {
        const uint32_t v = Pack::pack2(cs.o[4 * cc + 2 * i] * inv[i], cs.o[4 * cc + 2 * i + 1] * inv[i]);
        *reinterpret_cast<uint32_t*>(orow + 8 * cc) = v;
      }
    }
  }
}

}  // namespace v3
