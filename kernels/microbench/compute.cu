// SM-side microbenchmarks for calibration: FP32 FMA and MUFU ex2 throughput, mma.sync throughput and
// latency (bf16, fp16, tf32), shared-memory bandwidth and latency, and the launch path (back-to-back kernel
// gap, thread-block dispatch gap), and ldmatrix-fed mma.sync (ldsm_mma). Builds for sm_80 and sm_90a.
#include "common.cuh"

constexpr int CHAINS = 8;  // independent dependency chains per thread: covers the FMA/MUFU/MMA pipelines

// FP32 FMA (named fp32_fma: ffma clashes with a CUDA math builtin): 8 chains of x = x * a + b per thread; a just under 1 keeps x bounded and non-zero.
extern "C" __global__ void fp32_fma(float a, float b, int iters, float* sink, BlockTime* times) {
  float x[CHAINS];
#pragma unroll
  for (int k = 0; k < CHAINS; ++k) x[k] = threadIdx.x * 1e-3f + k;
  BlockTimer timer;
  timer.start();
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int k = 0; k < CHAINS; ++k) x[k] = fmaf(x[k], a, b);
  }
  float s = 0.f;
#pragma unroll
  for (int k = 0; k < CHAINS; ++k) s += x[k];
  keep(s, -1.2345f, sink);
  timer.stop(times);
}

// One dependent FFMA chain per thread: with one warp per sub-partition, the cycles per instruction are the
// FP32 pipeline's dependent-issue latency (what a warp's serial softmax arithmetic waits between steps).
extern "C" __global__ void fp32_dep(float a, float b, int iters, float* sink, BlockTime* times) {
  float x = threadIdx.x * 1e-3f;
  BlockTimer timer;
  timer.start();
#pragma unroll 16
  for (int i = 0; i < iters; ++i) x = fmaf(x, a, b);
  keep(x, -1.2345f, sink);
  timer.stop(times);
}

// One dependent MUFU.EX2 chain per thread (y = 2^-y): with one warp per sub-partition, the cycles per
// instruction are the special-function unit's dependent latency, what a row's exponent waits on the chain
// of an online softmax.
extern "C" __global__ void mufu_dep(int iters, float* sink, BlockTime* times) {
  float y = 0.5f + threadIdx.x * 1e-5f;
  BlockTimer timer;
  timer.start();
#pragma unroll 16
  for (int i = 0; i < iters; ++i) asm volatile("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(-y));
  keep(y, -1.2345f, sink);
  timer.stop(times);
}

// One dependent butterfly-shuffle chain per thread (x = max(x, shfl_xor(x, 1)) would add an FMNMX; the bare
// shuffle feeds its own source): cycles per SHFL.BFLY, the latency each quad step of a row reduction pays.
extern "C" __global__ void shfl_dep(int iters, float* sink, BlockTime* times) {
  float x = threadIdx.x * 1e-3f;
  BlockTimer timer;
  timer.start();
#pragma unroll 16
  for (int i = 0; i < iters; ++i) x = __shfl_xor_sync(0xffffffffu, x, 1 + (i & 1));
  keep(x, -1.2345f, sink);
  timer.stop(times);
}

// MUFU ex2 (what softmax's exp compiles to): 8 chains of y = 2^-y per thread. The negation folds into the
// MUFU operand, and y stays in (0.5, 1), so every operation is one MUFU.EX2 on ordinary data.
extern "C" __global__ void mufu_ex2(int iters, float* sink, BlockTime* times) {
  float y[CHAINS];
#pragma unroll
  for (int k = 0; k < CHAINS; ++k) y[k] = 0.5f + (threadIdx.x * CHAINS + k) * 1e-5f;
  BlockTimer timer;
  timer.start();
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int k = 0; k < CHAINS; ++k) asm volatile("ex2.approx.ftz.f32 %0, %1;" : "=f"(y[k]) : "f"(-y[k]));
  }
  float s = 0.f;
#pragma unroll
  for (int k = 0; k < CHAINS; ++k) s += y[k];
  keep(s, -1.2345f, sink);
  timer.stop(times);
}

// mma.sync: each warp runs `chains` independent accumulators (4 fp32 each) on fragments loaded once from
// random data (zeros run faster on the tensor cores). m16n8k16 for bf16/fp16 (4096 FLOP per warp
// instruction), m16n8k8 for tf32 (2048). chains == 1 gives the dependent-issue latency.
#define MMA_BF16 "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
#define MMA_FP16 "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
#define MMA_TF32 "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"
#define MMA_ARGS " {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"

#define DEFINE_MMA_KERNEL(NAME, OPCODE)                                                                      \
  extern "C" __global__ void NAME(const unsigned* __restrict__ init, int iters, int chains, float* sink,     \
                                  BlockTime* times) {                                                       \
    const unsigned* f = init + (threadIdx.x & 31) * 6;                                                      \
    const unsigned a0 = f[0], a1 = f[1], a2 = f[2], a3 = f[3], b0 = f[4], b1 = f[5];                        \
    float c[CHAINS][4];                                                                                     \
    _Pragma("unroll") for (int k = 0; k < CHAINS; ++k) c[k][0] = c[k][1] = c[k][2] = c[k][3] = 0.f;         \
    BlockTimer timer;                                                                                       \
    timer.start();                                                                                          \
    if (chains == 1) {                                                                                      \
      for (int i = 0; i < iters; ++i)                                                                       \
        asm volatile(OPCODE MMA_ARGS                                                                        \
                     : "+f"(c[0][0]), "+f"(c[0][1]), "+f"(c[0][2]), "+f"(c[0][3])                           \
                     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));                               \
    } else {                                                                                                \
      for (int i = 0; i < iters; ++i) {                                                                     \
        _Pragma("unroll") for (int k = 0; k < CHAINS; ++k) asm volatile(                                    \
            OPCODE MMA_ARGS                                                                                 \
            : "+f"(c[k][0]), "+f"(c[k][1]), "+f"(c[k][2]), "+f"(c[k][3])                                    \
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));                                        \
      }                                                                                                     \
    }                                                                                                       \
    float s = 0.f;                                                                                          \
    _Pragma("unroll") for (int k = 0; k < CHAINS; ++k) s += c[k][0] + c[k][1] + c[k][2] + c[k][3];          \
    keep(s, -1.2345f, sink);                                                                                \
    timer.stop(times);                                                                                      \
  }

DEFINE_MMA_KERNEL(mma_bf16, MMA_BF16)
DEFINE_MMA_KERNEL(mma_fp16, MMA_FP16)
DEFINE_MMA_KERNEL(mma_tf32, MMA_TF32)

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// Shared-memory read bandwidth: every thread reads 16 B per load (a warp's 512 B are conflict-free, four
// 128-byte wavefronts), 8 loads per step over a 32 KiB buffer. Each step shifts the addresses by one warp's
// width, so no load repeats the previous step's address and ptxas cannot hoist any out of the loop.
extern "C" __global__ void smem_read(int iters, float* sink, BlockTime* times) {
  __shared__ float4 buf[2048];
  for (int i = threadIdx.x; i < 2048; i += blockDim.x) buf[i] = make_float4(i, i + 1, i + 2, i + 3);
  const unsigned base = smem_addr(buf);
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  BlockTimer timer;
  timer.start();
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const unsigned addr = base + ((threadIdx.x + k * 256 + i * 32) & 2047) * 16;
      float4 v;
      asm volatile("ld.shared.v4.f32 {%0,%1,%2,%3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(addr));
      acc.x += v.x;
      acc.y += v.y;
      acc.z += v.z;
      acc.w += v.w;
    }
  }
  keep(acc.x + acc.y + acc.z + acc.w, -1.2345f, sink);
  timer.stop(times);
}

// A warp-tiled GEMM's inner loop as FA2-class kernels run it: per 16-wide k step, each warp loads its A (two
// m16 fragments) and B (two n16 fragments) with ldmatrix.x4 from shared memory and issues 8 mma.sync
// m16n8k16 (bf16) into a 32 x 32 fp32 accumulator: 2 KiB of shared memory per 32 KiFLOP, more than the SM's
// shared memory can feed the tensor cores (~16 FLOP per byte against ~22). mode 0: loads and products, as
// the kernels do (ldsm_mma); 1: products only, the fragments loaded once (ldsm_mma_mma_only); 2: loads only,
// the fragments folded into a register so that they stay live (ldsm_mma_loads_only); 0 with ldmatrix.trans
// (ldsm_mma_trans). Conflict-free: a warp's
// 32 row addresses are 512 contiguous bytes.
template <int mode, bool trans = false>
__device__ __forceinline__ void ldsm_mma_loop(int iters, float* sink, BlockTime* times) {
  __shared__ __align__(128) uint16_t buf[16384];  // 32 KiB
  for (int i = threadIdx.x; i < 16384; i += blockDim.x) buf[i] = (uint16_t)(0x3c00 + (i * 7 & 255));
  const unsigned base = smem_addr(buf);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float c[2][4][4];
#pragma unroll
  for (int m = 0; m < 2; ++m)
#pragma unroll
    for (int n = 0; n < 4; ++n) c[m][n][0] = c[m][n][1] = c[m][n][2] = c[m][n][3] = 0.f;
  unsigned a[2][4], b[2][4], fold = 0;
#pragma unroll
  for (int f = 0; f < 2; ++f)
#pragma unroll
    for (int r = 0; r < 4; ++r) a[f][r] = b[f][r] = 0x3c003c00u + lane;
  BlockTimer timer;
  timer.start();
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int kk = 0; kk < 8; ++kk) {
      if constexpr (mode != 1) {
#pragma unroll
        for (int f = 0; f < 4; ++f) {
          const unsigned addr = base + ((((warp * 8 + kk) * 4 + f + i * 3) * 512 + lane * 16) & 32767);
          unsigned* dst = f < 2 ? a[f] : b[f - 2];
          if constexpr (trans)
            asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                         : "=r"(dst[0]), "=r"(dst[1]), "=r"(dst[2]), "=r"(dst[3]) : "r"(addr));
          else
            asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                         : "=r"(dst[0]), "=r"(dst[1]), "=r"(dst[2]), "=r"(dst[3]) : "r"(addr));
        }
      }
      if constexpr (mode == 2) {
#pragma unroll
        for (int f = 0; f < 2; ++f) fold ^= a[f][0] ^ a[f][1] ^ a[f][2] ^ a[f][3] ^ b[f][0] ^ b[f][1] ^ b[f][2] ^ b[f][3];
      } else {
#pragma unroll
        for (int m = 0; m < 2; ++m)
#pragma unroll
          for (int n = 0; n < 4; ++n)
            asm volatile(MMA_BF16 MMA_ARGS
                         : "+f"(c[m][n][0]), "+f"(c[m][n][1]), "+f"(c[m][n][2]), "+f"(c[m][n][3])
                         : "r"(a[m][0]), "r"(a[m][1]), "r"(a[m][2]), "r"(a[m][3]), "r"(b[n / 2][2 * (n % 2)]),
                           "r"(b[n / 2][2 * (n % 2) + 1]));
      }
    }
  }
  float s = __uint_as_float(fold);  // any bit pattern: the compiler cannot rule out keep()'s store
#pragma unroll
  for (int m = 0; m < 2; ++m)
#pragma unroll
    for (int n = 0; n < 4; ++n) s += c[m][n][0] + c[m][n][1] + c[m][n][2] + c[m][n][3];
  keep(s, -1.2345f, sink);
  timer.stop(times);
}
extern "C" __global__ void ldsm_mma(int iters, float* sink, BlockTime* times) { ldsm_mma_loop<0>(iters, sink, times); }
extern "C" __global__ void ldsm_mma_mma_only(int iters, float* sink, BlockTime* times) {
  ldsm_mma_loop<1>(iters, sink, times);
}
extern "C" __global__ void ldsm_mma_loads_only(int iters, float* sink, BlockTime* times) {
  ldsm_mma_loop<2>(iters, sink, times);
}
// The same with ldmatrix.trans (the backward's P^T, dS^T and K operands).
extern "C" __global__ void ldsm_mma_trans(int iters, float* sink, BlockTime* times) {
  ldsm_mma_loop<0, true>(iters, sink, times);
}

// Shared-memory load-to-use latency: one thread follows a cycle of indices stored in shared memory.
extern "C" __global__ void smem_chase(int steps, unsigned* sink, long long* cycles) {
  __shared__ unsigned next[1024];
  for (int i = threadIdx.x; i < 1024; i += blockDim.x) next[i] = (i * 97 + 13) & 1023;  // odd stride: one cycle
  __syncthreads();
  if (threadIdx.x != 0) return;
  unsigned j = 0;
  const unsigned base = smem_addr(next);
  const long long t0 = clock64();
  for (int s = 0; s < steps; ++s) asm volatile("ld.shared.u32 %0, [%1];" : "=r"(j) : "r"(base + j * 4));
  const long long t1 = clock64();
  sink[0] = j;
  cycles[0] = t1 - t0;
}

// Holds the stream for `ns` nanoseconds so that the host can queue kernels behind it.
extern "C" __global__ void spin(unsigned long long ns) {
  const unsigned long long t0 = globaltimer_ns();
  while (globaltimer_ns() - t0 < ns) {
  }
}

// An empty kernel that stamps its start and end: start-to-start of back-to-back launches queued behind
// `spin` is the device-side cost of a kernel launch.
extern "C" __global__ void stamp(BlockTime* times) {
  BlockTimer timer;
  timer.start();
  timer.stop(times);
}

// Thread-block dispatch: blocks sized to one per SM (by their dynamic shared memory) stamp start and end
// in SM cycles; on each SM, next start minus previous end is the cost of retiring and launching a block.
extern "C" __global__ void cta_stamp(BlockTime* times) {
  extern __shared__ float pad[];
  if (threadIdx.x == 1u << 20) pad[0] = 0.f;  // references the allocation; never taken
  BlockTimer timer;
  timer.start();
  timer.stop(times);
}

// Separates the kernels of one measured call from the next in an Nsight Compute log (validate's byte counts).
extern "C" __global__ void ncu_marker(int index) {
  if (index < 0) asm volatile("trap;");
}
