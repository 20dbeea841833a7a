// Shared pieces of the flashsim reference kernels: the launch parameters, the tensor-core and copy
// instructions (mma.sync m16n8k16, ldmatrix, cp.async) and the shared-memory tile layout.
//
// Every kernel takes one AttnParams by value; kernels/launch.py mirrors it field by field as a
// ctypes.Structure, so the two must change together (the static_assert below and a Python test pin the
// size). Fields are ordered pointers, then 64-bit strides, then 32-bit values, so neither side pads.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

namespace flashsim {

struct AttnParams {
  const void* q;  // (B, H, Nq, D)
  const void* k;  // (B, Hkv, Nk, D)
  const void* v;  // (B, Hkv, Nk, D)
  void* o;        // (B, H, Nq, D), input dtype
  float* lse;     // (B, H, Nq) natural-log logsumexp, or null
  void* s;        // standard: scores then probabilities, (B, H, Nq, s_row_stride)
  float* ws_o;    // v1: running output, (B, H, Nq, D) fp32
  float* ws_ml;   // v1: running max and sum, (B, H, Nq, 2) fp32
  // Strides in elements; the last dimension is contiguous.
  int64_t q_batch_stride, q_head_stride, q_row_stride;
  int64_t k_batch_stride, k_head_stride, k_row_stride;
  int64_t v_batch_stride, v_head_stride, v_row_stride;
  int64_t o_batch_stride, o_head_stride, o_row_stride;
  int64_t s_row_stride;  // standard: columns of one S row (Nk rounded up to 8)
  int32_t batch, heads, kv_group, seqlen_q, seqlen_k;
  int32_t causal;      // bottom-right aligned: query i sees keys j <= i + seqlen_k - seqlen_q (causal_offset)
  int32_t num_splits;  // v1: thread blocks per (batch, head)
  float scale;         // softmax scale
  float scale_log2;    // scale * log2(e): exp(x * scale) == exp2(x * scale_log2)
  // Experiments only (experiments/h200_stagger.sh; 0 in every other launch): v2's second block to start on each
  // SM waits this many SM cycles before its first load, so the two blocks of an SM run a set phase apart; `s`
  // then points at one zeroed int per SM, which counts the blocks as they start.
  int32_t start_stagger_cycles;
};
static_assert(sizeof(AttnParams) == 208, "AttnParams layout changed: update kernels/launch.py");

// Causal masks are aligned bottom-right (FlashAttention >= 2.1, and the simulator): the last query row
// sees every key, so query i sees keys j <= i + causal_offset. With seqlen_q > seqlen_k the first
// seqlen_q - seqlen_k rows see no key; they output 0 and a logsumexp of -inf.
// start_stagger_cycles (above): every odd block to start on its SM spins that long. `scratch` is 4 bytes of the
// block's shared memory, used before anything is loaded into it.
__device__ __noinline__ void stagger_start(const AttnParams& p, int* scratch) {
  if (threadIdx.x == 0) {
    unsigned sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    *scratch = atomicAdd(static_cast<int*>(p.s) + sm, 1);
  }
  __syncthreads();
  if (*scratch & 1) {
    const long long t0 = clock64();
    while (clock64() - t0 < p.start_stagger_cycles) {
    }
  }
  __syncthreads();
}

__device__ __forceinline__ int causal_offset(const AttnParams& p) { return p.causal ? p.seqlen_k - p.seqlen_q : 0; }

// x, computed where it is written: the compiler may neither hoist it out of a loop (where it would hold a
// register across the whole loop) nor fold it into the expressions around it.
__device__ __forceinline__ int opaque(int x) {
  int y;
  asm volatile("mov.b32 %0, %1;" : "=r"(y) : "r"(x));
  return y;
}

// Keys [0, result) are visible to query rows [0, row_end): seqlen_k, or fewer when causal (0: none).
__device__ __forceinline__ int visible_keys(const AttnParams& p, int row_end) {
  return p.causal ? min(p.seqlen_k, max(0, row_end + p.seqlen_k - p.seqlen_q)) : p.seqlen_k;
}

// ---------------------------------------------------------------------------------------------
// Element types: the same kernel body serves fp16 and bf16; only the mma opcode and packing differ.
template <typename T>
struct Elem;
template <>
struct Elem<half> {
  __device__ static __forceinline__ uint32_t pack(float lo, float hi) {
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
  }
  __device__ static __forceinline__ float to_float(half x) { return __half2float(x); }
  __device__ static __forceinline__ half from_float(float x) { return __float2half_rn(x); }
};
template <>
struct Elem<__nv_bfloat16> {
  __device__ static __forceinline__ uint32_t pack(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
  }
  __device__ static __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
  __device__ static __forceinline__ __nv_bfloat16 from_float(float x) { return __float2bfloat16_rn(x); }
};

// D += A * B for one 16x8x16 tile, fp32 accumulate. Fragment layouts (PTX ISA, mma.m16n8k16), with
// g = lane / 4 and t = lane % 4: A a0:(g, 2t..2t+1) a1:(g+8, 2t..) a2:(g, 2t+8..) a3:(g+8, 2t+8..);
// B b0:(k 2t..2t+1, n g) b1:(k 2t+8.., n g); C c0,c1:(g, 2t..2t+1) c2,c3:(g+8, 2t..2t+1).
template <typename T>
__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
template <>
__device__ __forceinline__ void mma16816<half>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma16816<__nv_bfloat16>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                                        uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Four 8x8 b16 matrices from shared memory; lanes 8i..8i+7 give the row addresses of matrix i, and
// register i of lane l receives matrix i's (row l/4, columns 2(l%4)..+1): exactly an mma fragment.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
// Transposed: register i of lane l receives matrix i's (rows 2(l%4)..+1, column l/4), the B fragment
// of a matrix stored k-major (V in P V).
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// 16-byte global -> shared copy that bypasses L1; with pred false it writes zeros and reads nothing,
// which pads ragged tiles (zero K rows give finite scores that the mask removes, zero V rows add 0).
__device__ __forceinline__ void cp_async16(uint32_t smem_addr, const void* gmem, bool pred) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr), "l"(gmem),
               "r"(pred ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// exp2 on the SFU (MUFU.EX2); the scale is folded into one FFMA before it.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// ---------------------------------------------------------------------------------------------
// A ROWS x COLS tile of 16-bit elements in shared memory, addressed in 16-byte chunks (8 elements).
// ldmatrix reads 8 rows of one chunk column at a time; those 8 chunks must fall in 8 different
// 16-byte bank groups. Rows whose width is a multiple of 64 elements are XOR-swizzled (chunk c of row r
// lives at c ^ (r % 8) inside its group of 8); other widths get one chunk of padding per row, which
// shifts consecutive rows by an odd number of chunks.
template <int ROWS, int COLS>
struct SmemTile {
  static_assert(COLS % 8 == 0, "tile width must be whole 16-byte chunks");
  static constexpr bool kSwizzle = COLS % 64 == 0;
  static constexpr int kStride = kSwizzle ? COLS : COLS + 8;  // elements per row
  static constexpr int kChunks = COLS / 8;
  static constexpr int kBytes = ROWS * kStride * 2;

  __device__ static __forceinline__ int offset(int row, int chunk) {  // in elements
    return row * kStride + (kSwizzle ? (chunk ^ (row & 7)) : chunk) * 8;
  }
  __device__ static __forceinline__ uint32_t addr(uint32_t base, int row, int chunk) {
    return base + 2u * static_cast<uint32_t>(offset(row, chunk));
  }
  // Address drow rows and dchunk chunks away from anchor = addr(base, row, c0), for compile-time drow
  // (a multiple of 8) and dchunk whose low 3 bits miss c0's. In a 128-byte aligned swizzled tile the
  // anchor's bits 4-6 hold c0 ^ (row % 8), so the step is one XOR plus an immediate: one register per
  // operand instead of one per distinct chunk.
  __device__ static __forceinline__ uint32_t at(uint32_t anchor, int drow, int dchunk) {
    if constexpr (kSwizzle)
      return (anchor ^ static_cast<uint32_t>((dchunk & 7) << 4)) + (dchunk >> 3) * 128 + drow * kStride * 2;
    return anchor + drow * kStride * 2 + dchunk * 16;
  }
};

// Copies rows [row0, row0 + ROWS) of a global matrix (32-bit row stride in elements) into a SmemTile
// with cp.async; rows >= row_end are zero-filled and read nothing (their source is the base pointer).
// Offsets are 32-bit, one wide add per copy: the launcher refuses heads whose rows span 2^31 elements.
// Each thread keeps one chunk column and steps down the rows, so its addresses advance by compile-time
// constants. Where a row's chunks do not divide the threads (d96: 12 of 128), the threads of whole rows take
// part (120) and the last step is guarded: computing every copy's row and chunk instead (a division, the
// padded row's offset and a bounds check per copy) made the d96 K/V step's copies dependent integer chains
// that Nsight Compute put at twice d128's cycles. Tiles of fewer rows than one step still compute each
// copy's row and chunk. All THREADS threads call it.
template <int THREADS, typename Tile, int ROWS>
__device__ __forceinline__ void load_tile_async(uint32_t smem_base, const uint16_t* gmem, int row0, int row_stride,
                                                int row_end) {
  if constexpr (THREADS % Tile::kChunks == 0 && ROWS % (THREADS / Tile::kChunks) == 0) {
    constexpr int kRowStep = THREADS / Tile::kChunks;
    const int r = static_cast<int>(threadIdx.x) / Tile::kChunks;
    const int chunk = static_cast<int>(threadIdx.x) % Tile::kChunks;
#pragma unroll
    for (int it = 0; it < ROWS / kRowStep; ++it) {
      const int row = r + it * kRowStep;
      const bool ok = row0 + row < row_end;
      cp_async16(Tile::addr(smem_base, row, chunk), gmem + (ok ? (row0 + row) * row_stride + chunk * 8 : 0), ok);
    }
  } else if constexpr (THREADS >= Tile::kChunks && ROWS >= THREADS / Tile::kChunks) {
    constexpr int kRowStep = THREADS / Tile::kChunks;
    constexpr int kSteps = (ROWS + kRowStep - 1) / kRowStep;
    const int t = static_cast<int>(threadIdx.x);
    const int r = t / Tile::kChunks;
    const int chunk = t % Tile::kChunks;
    if (t < kRowStep * Tile::kChunks) {
#pragma unroll
      for (int it = 0; it < kSteps; ++it) {
        const int row = r + it * kRowStep;
        if (ROWS % kRowStep == 0 || it + 1 < kSteps || row < ROWS) {
          const bool ok = row0 + row < row_end;
          cp_async16(Tile::addr(smem_base, row, chunk), gmem + (ok ? (row0 + row) * row_stride + chunk * 8 : 0), ok);
        }
      }
    }
  } else {
    constexpr int kTotal = ROWS * Tile::kChunks;
#pragma unroll
    for (int it = 0; it < (kTotal + THREADS - 1) / THREADS; ++it) {
      const int idx = it * THREADS + static_cast<int>(threadIdx.x);
      const int row = idx / Tile::kChunks;
      const int chunk = idx % Tile::kChunks;
      const bool ok = row0 + row < row_end;
      if (idx < kTotal)
        cp_async16(Tile::addr(smem_base, row, chunk), gmem + (ok ? (row0 + row) * row_stride + chunk * 8 : 0), ok);
    }
  }
}

// Traps when a launch gives less dynamic shared memory than the kernel lays out, i.e. when a launch
// description's formula and the kernel's Config disagree: a loud failure instead of corrupted tiles.
__device__ __forceinline__ void require_dynamic_smem(uint32_t bytes) {
  uint32_t have;
  asm("mov.u32 %0, %%dynamic_smem_size;\n" : "=r"(have));
  if (have < bytes) __trap();
}

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

}  // namespace flashsim

// Maps the dtype names of the launch descriptions to element types.
#define FLASHSIM_T_fp16 half
#define FLASHSIM_T_bf16 __nv_bfloat16
