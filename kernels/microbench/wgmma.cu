// wgmma (Hopper warpgroup MMA) throughput and latency for calibration: m64n256 with both operands in
// shared memory, f32 accumulators, for bf16 and fp16 (k16), fp8 e4m3 (k32) and tf32 (k8). Every shape
// reads 32 bytes of K per row, so one shared-memory layout (no swizzle, 8-row x 16-byte core matrices)
// serves all four. Operands are random data copied in by the host. sm_90a only.
#include "common.cuh"

// The 128 accumulator registers of one m64n256 instruction, as PTX operands %0..%127 and C++ operands.
#define WG_D \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15," \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31," \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47," \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63," \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79," \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95," \
  "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111," \
  "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127" \

#define WG_D_OUTPUTS \
  "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]), "=f"(d[7]), \
  "=f"(d[8]), "=f"(d[9]), "=f"(d[10]), "=f"(d[11]), "=f"(d[12]), "=f"(d[13]), "=f"(d[14]), "=f"(d[15]), \
  "=f"(d[16]), "=f"(d[17]), "=f"(d[18]), "=f"(d[19]), "=f"(d[20]), "=f"(d[21]), "=f"(d[22]), "=f"(d[23]), \
  "=f"(d[24]), "=f"(d[25]), "=f"(d[26]), "=f"(d[27]), "=f"(d[28]), "=f"(d[29]), "=f"(d[30]), "=f"(d[31]), \
  "=f"(d[32]), "=f"(d[33]), "=f"(d[34]), "=f"(d[35]), "=f"(d[36]), "=f"(d[37]), "=f"(d[38]), "=f"(d[39]), \
  "=f"(d[40]), "=f"(d[41]), "=f"(d[42]), "=f"(d[43]), "=f"(d[44]), "=f"(d[45]), "=f"(d[46]), "=f"(d[47]), \
  "=f"(d[48]), "=f"(d[49]), "=f"(d[50]), "=f"(d[51]), "=f"(d[52]), "=f"(d[53]), "=f"(d[54]), "=f"(d[55]), \
  "=f"(d[56]), "=f"(d[57]), "=f"(d[58]), "=f"(d[59]), "=f"(d[60]), "=f"(d[61]), "=f"(d[62]), "=f"(d[63]), \
  "=f"(d[64]), "=f"(d[65]), "=f"(d[66]), "=f"(d[67]), "=f"(d[68]), "=f"(d[69]), "=f"(d[70]), "=f"(d[71]), \
  "=f"(d[72]), "=f"(d[73]), "=f"(d[74]), "=f"(d[75]), "=f"(d[76]), "=f"(d[77]), "=f"(d[78]), "=f"(d[79]), \
  "=f"(d[80]), "=f"(d[81]), "=f"(d[82]), "=f"(d[83]), "=f"(d[84]), "=f"(d[85]), "=f"(d[86]), "=f"(d[87]), \
  "=f"(d[88]), "=f"(d[89]), "=f"(d[90]), "=f"(d[91]), "=f"(d[92]), "=f"(d[93]), "=f"(d[94]), "=f"(d[95]), \
  "=f"(d[96]), "=f"(d[97]), "=f"(d[98]), "=f"(d[99]), "=f"(d[100]), "=f"(d[101]), "=f"(d[102]), "=f"(d[103]), \
  "=f"(d[104]), "=f"(d[105]), "=f"(d[106]), "=f"(d[107]), "=f"(d[108]), "=f"(d[109]), "=f"(d[110]), "=f"(d[111]), \
  "=f"(d[112]), "=f"(d[113]), "=f"(d[114]), "=f"(d[115]), "=f"(d[116]), "=f"(d[117]), "=f"(d[118]), "=f"(d[119]), \
  "=f"(d[120]), "=f"(d[121]), "=f"(d[122]), "=f"(d[123]), "=f"(d[124]), "=f"(d[125]), "=f"(d[126]), "=f"(d[127])

#define WG_D_OPERANDS \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
  "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
  "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
  "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
  "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), \
  "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
  "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
  "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
  "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), \
  "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), \
  "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), \
  "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
  "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])

// Each opcode takes the scale-d predicate as %130: 0 on the first instruction (D = A*B, so no other
// instruction has to define the accumulators, which would make ptxas serialise), 1 after (D += A*B).
#define WG_PRED(INSTR) "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n" INSTR "\n}\n"
#define WG_BF16 WG_PRED("wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {" WG_D "}, %128, %129, p, 1, 1, 0, 0;")
#define WG_FP16 WG_PRED("wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 {" WG_D "}, %128, %129, p, 1, 1, 0, 0;")
#define WG_FP8 WG_PRED("wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3 {" WG_D "}, %128, %129, p, 1, 1;")
#define WG_TF32 WG_PRED("wgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32 {" WG_D "}, %128, %129, p, 1, 1;")

constexpr int A_BYTES = 64 * 32;   // 64 rows x 32 bytes of K
constexpr int B_BYTES = 256 * 32;  // 256 rows x 32 bytes of K

// Shared-memory matrix descriptor, no swizzle: start address, then the byte distance between the two core
// matrices along K (leading) and between consecutive 8-row groups (stride), each in 16-byte units.
__device__ __forceinline__ unsigned long long smem_desc(unsigned addr, unsigned lead, unsigned stride) {
  return (unsigned long long)((addr & 0x3FFFF) >> 4) | ((unsigned long long)((lead & 0x3FFFF) >> 4) << 16) |
         ((unsigned long long)((stride & 0x3FFFF) >> 4) << 32);
}

__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wg_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

// One warpgroup per block. Throughput (latency == 0): `iters` instructions on the same accumulators, which
// the tensor cores chain without a round trip, committed in groups of 4 with one group left in flight.
// Latency (latency != 0): each instruction is committed and waited for before the next.
#define DEFINE_WGMMA_KERNEL(NAME, OPCODE)                                                                  \
  extern "C" __global__ void __launch_bounds__(128) NAME(const uint4* __restrict__ init, int iters,          \
                                                         int latency, float* sink, BlockTime* times) {      \
    __shared__ alignas(128) uint4 tiles[(A_BYTES + B_BYTES) / 16];                                        \
    for (int i = threadIdx.x; i < (A_BYTES + B_BYTES) / 16; i += blockDim.x) tiles[i] = init[i];          \
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");                                          \
    const unsigned base = static_cast<unsigned>(__cvta_generic_to_shared(tiles));                        \
    const unsigned long long da = smem_desc(base, 128, 256), db = smem_desc(base + A_BYTES, 128, 256);    \
    float d[128];                                                                                         \
    BlockTimer timer;                                                                                     \
    timer.start();                                                                                        \
    wg_fence();                                                                                           \
    asm volatile(OPCODE : WG_D_OUTPUTS : "l"(da), "l"(db), "r"(0));                                       \
    if (latency) {                                                                                        \
      for (int i = 0; i < iters; ++i) {                                                                   \
        asm volatile(OPCODE : WG_D_OPERANDS : "l"(da), "l"(db), "r"(1));                                          \
        wg_commit();                                                                                      \
        wg_wait<0>();                                                                                     \
      }                                                                                                   \
    } else {                                                                                              \
      for (int i = 0; i < iters; i += 4) {                                                                \
        _Pragma("unroll") for (int k = 0; k < 4; ++k) asm volatile(OPCODE : WG_D_OPERANDS : "l"(da), "l"(db), "r"(1)); \
        wg_commit();                                                                                      \
        wg_wait<1>();                                                                                     \
      }                                                                                                   \
    }                                                                                                     \
    wg_wait<0>();                                                                                         \
    float s = 0.f;                                                                                        \
    _Pragma("unroll") for (int i = 0; i < 128; ++i) s += d[i];                                            \
    keep(s, -1.2345f, sink);                                                                              \
    timer.stop(times);                                                                                    \
  }

DEFINE_WGMMA_KERNEL(wgmma_bf16, WG_BF16)
DEFINE_WGMMA_KERNEL(wgmma_fp16, WG_FP16)
DEFINE_WGMMA_KERNEL(wgmma_fp8, WG_FP8)
DEFINE_WGMMA_KERNEL(wgmma_tf32, WG_TF32)
