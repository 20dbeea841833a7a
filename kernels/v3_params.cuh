// The launch parameters of the Hopper kernels (v3.cu, v3_fp8.cu); the tensor maps are passed beside them.
#pragma once

struct V3Params {
  void* o;                       // (B, H, Nq, d) by the strides below, bf16 or fp16
  const float* q_scale;          // fp8 only: (B, H, ceil(Nq / block_m)) dequantisation scales
  const float* k_scale;          // fp8 only: (B, Hkv, ceil(Nk / block_n))
  const float* v_scale;          // fp8 only: (B, Hkv, ceil(Nk / block_n))
  long long o_stride_b, o_stride_h, o_stride_n;  // elements
  int nq, nk, heads, group;      // group = H / Hkv
  float scale_log2;              // softmax scale * log2(e)
  int batch;
  int section;                   // tile order: 0 head by head; S > 0 sections of S (batch, head) pairs,
                                 // each taken query block by query block, heaviest first (tile_at)
  int* tile_counter;             // null: block b takes tiles b, b + grid, ... (nth_tile); else (two Q buffers
                                 // only) two zeroed ints: the next tile to hand out after the first grid-many,
                                 // and the blocks done; the last block done zeroes both for the next launch
};
// The host mirrors this layout (kernels/hopper.py, _Params); tests compare the offsets.
static_assert(sizeof(V3Params) == 96 && __builtin_offsetof(V3Params, scale_log2) == 72 &&
                  __builtin_offsetof(V3Params, batch) == 76 && __builtin_offsetof(V3Params, section) == 80 &&
                  __builtin_offsetof(V3Params, tile_counter) == 88,
              "V3Params layout changed: update kernels/hopper.py");
