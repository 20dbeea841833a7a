// How ldmatrix-fed mma.sync GEMMs share a warp's k-step between shared-memory loads and tensor-core products,
// swept so that the form of the interference can be fitted (experiments/calibrate_bench.py ldsm_form).
// One block per SM; the launch's block size sets the warps per SM.
//
// form_l<L>x<X>[t]_m<M>: per 16-wide k step, each warp issues L ldmatrix.x<X> (t: .trans) and M mma.sync
// m16n8k16 bf16 into 8 independent fp32 accumulators, the products reading the fragments this k step loaded
// (an A fragment of 4 registers and a B pair per product, dealt round-robin from the loaded ones). M = 0:
// loads only, the fragments folded into one register so they stay live; L = 0: products only, on fragments
// that never change. x2 and x1 loads fill a 4-register fragment in 2 or 4 instructions.
// tile_<name>: one warp's k step of a GEMM of our FA2-class kernels, as kernels/v2*.cu's loops issue it: MT
// m16 A fragments (ldmatrix.x4, .trans when stored k-major, or held in registers as P of P V) and NT2 n16 B
// fragments (ldmatrix.x4 or .trans), MT x 2 NT2 products into an MT x 2 NT2 accumulator tile.
//
// Addresses: each ldmatrix reads 128 contiguous bytes per 8x8 matrix (lane l's row at l * 16 bytes), so a
// warp's request is conflict-free. The start is computed once per iteration and every load adds a constant
// (an immediate offset), so loads cost no address arithmetic beyond what the kernels' swizzled anchors cost.
#include "common.cuh"

namespace {

#define FORM_MMA "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"

__device__ __forceinline__ unsigned smem_u32(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// X: 8x8 matrices per ldmatrix (1, 2, 4); 0: a plain 16-byte ld.shared.v4 per lane instead (the same 512 bytes
// and 4 registers as an x4, without ldmatrix's shuffle), to tell ldmatrix's cost from any shared load's.
template <int X>
constexpr int kRegsPerLoad = X > 0 ? X : 4;

template <int X, bool T>
__device__ __forceinline__ void ldsm(unsigned* r, unsigned addr) {
  if constexpr (X == 0)
    asm volatile("ld.shared.v4.b32 {%0,%1,%2,%3}, [%4];" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
  else if constexpr (X == 4 && !T)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
  else if constexpr (X == 4)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
  else if constexpr (X == 2 && !T)
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
  else if constexpr (X == 2)
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
  else if constexpr (!T)
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];" : "=r"(r[0]) : "r"(addr));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];" : "=r"(r[0]) : "r"(addr));
}

__device__ __forceinline__ void mma(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm volatile(FORM_MMA : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

constexpr int kBufHalfs = 24576;  // 48 KiB, the most a block can declare statically
constexpr int kKsteps = 8;        // k steps unrolled per iteration

// The buffer filled with small bf16 values (finite products), and where an iteration's loads start. Every load
// of an iteration reads its own bytes (ptxas would merge two loads of one address) and the start moves each
// iteration (else it would hoist the loads out of the loop).
__device__ __forceinline__ unsigned fill(uint16_t* buf) {
  for (int i = threadIdx.x; i < kBufHalfs; i += blockDim.x) buf[i] = (uint16_t)(0x3c00 + (i * 7 & 255));
  return smem_u32(buf);
}
__device__ __forceinline__ unsigned window(unsigned base, int i, int lane) {
  return base + ((i * 5 + threadIdx.x / 32) & 7) * 512 + lane * 16;
}

// DEP false: the products run on held fragments and the loads are folded, so nothing waits on a load.
template <int L, int X, bool T, int M, bool DEP = true>
__device__ __forceinline__ void form_loop(uint16_t* buf, int iters, float* sink, BlockTime* times) {
  constexpr int kRegs = kRegsPerLoad<X>;
  static_assert(kKsteps * L * kRegs * 128 <= 40960 && (L > 0 || M > 0), "an iteration's loads fit the buffer");
  static_assert(L == 0 || L * kRegs % 4 == 0, "the loads fill whole 4-register fragments");
  const unsigned base = fill(buf);
  const int lane = threadIdx.x % 32;
  float c[8][4];
#pragma unroll
  for (int j = 0; j < 8; ++j) c[j][0] = c[j][1] = c[j][2] = c[j][3] = 0.f;
  // The loaded registers as 4-register fragments (x2 and x1 loads fill one in 2 or 4 instructions, so that
  // no product needs a register copied into place); products without loads use 2 held ones.
  constexpr bool kHeld = L == 0 || !DEP;
  constexpr int kFrags = L > 0 ? L * kRegs / 4 : 1;
  unsigned held[2][4];
#pragma unroll
  for (int f = 0; f < 2; ++f)
#pragma unroll
    for (int r = 0; r < 4; ++r) held[f][r] = 0x3c003c00u + lane + r;
  unsigned fold = 0;
  BlockTimer timer;
  timer.start();
  for (int i = 0; i < iters; ++i) {
    const unsigned w = window(base, i, lane);
#pragma unroll
    for (int kk = 0; kk < kKsteps; ++kk) {
      unsigned f[kFrags][4];
      if constexpr (L > 0) {
#pragma unroll
        for (int l = 0; l < L; ++l) ldsm<X, T>(&f[l * kRegs / 4][l * kRegs % 4], w + (kk * L + l) * kRegs * 128);
      }
      if constexpr (L > 0 && (M == 0 || !DEP)) {
#pragma unroll
        for (int q = 0; q < kFrags; ++q) fold ^= f[q][0] ^ f[q][1] ^ f[q][2] ^ f[q][3];
      }
#pragma unroll
      for (int j = 0; j < M; ++j) {
        const unsigned(&a)[4] = kHeld ? held[j % 2] : f[j % kFrags];
        const unsigned(&b)[4] = kHeld ? held[(j + 1) % 2] : f[(j + 1) % kFrags];
        mma(c[j % 8], a, b[(j & 1) * 2], b[(j & 1) * 2 + 1]);
      }
    }
  }
  float s = __uint_as_float(fold);  // any bit pattern: the compiler cannot rule out keep()'s store
#pragma unroll
  for (int j = 0; j < 8; ++j) s += c[j][0] + c[j][1] + c[j][2] + c[j][3];
  keep(s, -1.2345f, sink);
  timer.stop(times);
}

// A_MODE: 0 A held in registers (P of P V), 1 ldmatrix, 2 ldmatrix.trans. B_T: B by ldmatrix.trans.
template <int MT, int NT2, int A_MODE, bool B_T>
__device__ __forceinline__ void tile_loop(uint16_t* buf, int iters, float* sink, BlockTime* times) {
  const unsigned base = fill(buf);
  const int lane = threadIdx.x % 32;
  float c[MT][2 * NT2][4];
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int n = 0; n < 2 * NT2; ++n) c[m][n][0] = c[m][n][1] = c[m][n][2] = c[m][n][3] = 0.f;
  unsigned held[MT][4];
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int r = 0; r < 4; ++r) held[m][r] = 0x3c003c00u + lane + r;
  BlockTimer timer;
  timer.start();
  for (int i = 0; i < iters; ++i) {
    const unsigned w = window(base, i, lane);
#pragma unroll
    for (int kk = 0; kk < kKsteps; ++kk) {
      constexpr int kLoads = MT * (A_MODE > 0) + NT2;
      static_assert(kKsteps * kLoads * 512 <= 40960, "an iteration's loads fit the buffer");
      unsigned a[MT][4];
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        if constexpr (A_MODE == 0) {
#pragma unroll
          for (int r = 0; r < 4; ++r) a[m][r] = held[m][r];
        } else {
          ldsm<4, A_MODE == 2>(a[m], w + (kk * kLoads + m) * 512);
        }
      }
#pragma unroll
      for (int n2 = 0; n2 < NT2; ++n2) {
        unsigned b[4];
        ldsm<4, B_T>(b, w + (kk * kLoads + MT * (A_MODE > 0) + n2) * 512);
#pragma unroll
        for (int m = 0; m < MT; ++m) {
          mma(c[m][2 * n2], a[m], b[0], b[1]);
          mma(c[m][2 * n2 + 1], a[m], b[2], b[3]);
        }
      }
    }
  }
  float s = 0.f;
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int n = 0; n < 2 * NT2; ++n) s += c[m][n][0] + c[m][n][1] + c[m][n][2] + c[m][n][3];
  keep(s, -1.2345f, sink);
  timer.stop(times);
}

}  // namespace

#define KERNEL(NAME, BODY)                                                   \
  extern "C" __global__ void NAME(int iters, float* sink, BlockTime* times) { \
    __shared__ __align__(128) uint16_t buf[kBufHalfs];                       \
    BODY(buf, iters, sink, times);                                           \
  }
#define FORM(NAME, L, X, T, M) KERNEL(NAME, (form_loop<L, X, T, M>))
#define TILE(NAME, MT, NT2, A_MODE, B_T) KERNEL(NAME, (tile_loop<MT, NT2, A_MODE, B_T>))

// Products against loads: 8 products per k step with 0..8 ldmatrix.x4, and x2 / x1 at 2..8 instructions.
FORM(form_l0x4_m8, 0, 4, false, 8)
FORM(form_l1x4_m8, 1, 4, false, 8)
FORM(form_l2x4_m8, 2, 4, false, 8)
FORM(form_l3x4_m8, 3, 4, false, 8)
FORM(form_l4x4_m8, 4, 4, false, 8)
FORM(form_l6x4_m8, 6, 4, false, 8)
FORM(form_l8x4_m8, 8, 4, false, 8)
FORM(form_l2x4t_m8, 2, 4, true, 8)
FORM(form_l4x4t_m8, 4, 4, true, 8)
FORM(form_l2x2_m8, 2, 2, false, 8)
FORM(form_l4x2_m8, 4, 2, false, 8)
FORM(form_l8x2_m8, 8, 2, false, 8)
FORM(form_l4x1_m8, 4, 1, false, 8)
FORM(form_l8x1_m8, 8, 1, false, 8)
// The same ratios at 16 products per k step (more independent products between the loads).
FORM(form_l4x4_m16, 4, 4, false, 16)
FORM(form_l8x4_m16, 8, 4, false, 16)
FORM(form_l2x4_m16, 2, 4, false, 16)
// The same loads and products with nothing waiting on a load (is the cost a dependency or a shared resource?).
KERNEL(form_l2x4i_m8, (form_loop<2, 4, false, 8, false>))
KERNEL(form_l4x4i_m8, (form_loop<4, 4, false, 8, false>))
KERNEL(form_l8x4i_m8, (form_loop<8, 4, false, 8, false>))
// Plain 16-byte shared loads instead of ldmatrix.x4.
FORM(form_l4v4_m8, 4, 0, false, 8)
FORM(form_l4v4_m0, 4, 0, false, 0)
// Loads on the even warps, products on the odd ones (do different warps' loads and products interfere?).
extern "C" __global__ void split_l4x4_m8(int iters, float* sink, BlockTime* times) {
  __shared__ __align__(128) uint16_t buf[kBufHalfs];
  if (threadIdx.x / 32 % 2 == 0)
    form_loop<4, 4, false, 0>(buf, iters, sink, times);
  else
    form_loop<0, 4, false, 8>(buf, iters, sink, times);
}
// Loads on the even warps while the odd warps copy global memory into another part of shared memory with
// cp.async (a quarter of the loads' bytes, from an L2-resident array), or sit idle: do the copy engine's
// writes into shared memory take the read path ldmatrix uses?
__device__ uint4 g_fill_src[1 << 18];  // 4 MiB, read over and over: L2-resident after the first pass
constexpr int kFillOffsetHalfs = 12288;  // the copies land in the upper 24 KiB; the loads read the lower half
// One iteration of a filling warp: 8 x 512 bytes (a quarter of a loading warp's 16 KiB) from `at` on, one group
// left in flight.
__device__ __forceinline__ void fill_step(unsigned dst, int at) {
#pragma unroll
  for (int j = 0; j < 8; ++j)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst + j * 512),
                 "l"(g_fill_src + ((at + j * 32 * 64) & ((1 << 18) - 1))) : "memory");
  asm volatile("cp.async.commit_group;" ::: "memory");
  asm volatile("cp.async.wait_group 1;" ::: "memory");
}
__device__ __forceinline__ void fill_loop(uint16_t* buf, int iters, BlockTime* times, bool copy) {
  fill(buf);
  const int lane = threadIdx.x % 32, slot = threadIdx.x / 64;  // odd warps 1, 3, 5, 7, ... -> slots 0, 1, 2, 3
  const unsigned dst = smem_u32(buf + kFillOffsetHalfs) + (slot & 3) * 4096 + lane * 16;
  BlockTimer timer;
  timer.start();
  if (copy) {
    for (int i = 0; i < iters; ++i) fill_step(dst, ((i * 8) * 32 * 64 + slot * 256 + lane) & ((1 << 18) - 1));
    asm volatile("cp.async.wait_group 0;" ::: "memory");
  }
  timer.stop(times);
}
#define BESIDE(NAME, COPY)                                                  \
  extern "C" __global__ void NAME(int iters, float* sink, BlockTime* times) { \
    __shared__ __align__(128) uint16_t buf[kBufHalfs];                       \
    if (threadIdx.x / 32 % 2 == 0)                                           \
      form_loop<4, 4, false, 0>(buf, iters, sink, times);                    \
    else                                                                     \
      fill_loop(buf, iters, times, COPY);                                    \
  }
BESIDE(fill_l4x4_m0, true)
BESIDE(idle_l4x4_m0, false)
extern "C" __global__ void fillonly_l4x4_m0(int iters, float* sink, BlockTime* times) {
  __shared__ __align__(128) uint16_t buf[kBufHalfs];
  fill_loop(buf, iters, times, threadIdx.x / 32 % 2 == 1);
}
// The same bytes through the copy engine (TMA's 1-D bulk copies, as a warp-specialised kernel's producer
// issues them): lane 0 of each odd warp keeps two copies of an iteration's 4 KiB in flight, each completing on
// its own mbarrier. Does the copy engine's write into shared memory take the read path ldmatrix uses?
// Hopper only: the sm_80 build leaves these two kernels out.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#include "bulk_copy.cuh"
constexpr int kBarOffsetHalfs = kFillOffsetHalfs + 8192;  // the barriers after the 16 KiB of fill slots
__device__ __forceinline__ void tma_fill_loop(uint16_t* buf, int iters, BlockTime* times, bool copy) {
  fill(buf);
  const int slot = threadIdx.x / 64;  // odd warps 1, 3, 5, 7, ... -> slots 0, 1, 2, 3, ...
  const unsigned dst = smem_u32(buf + kFillOffsetHalfs) + (slot & 3) * 4096;
  const unsigned bar0 = smem_u32(buf + kBarOffsetHalfs) + (slot & 7) * 16;  // two barriers per slot
  const bool leader = copy && threadIdx.x % 32 == 0;
  const char* src = reinterpret_cast<const char*>(g_fill_src);
  BlockTimer timer;
  timer.start();  // every warp's fill() of the buffer is done: the barriers are not overwritten
  if (leader) {
    mbar_init(bar0, 1);
    mbar_init(bar0 + 8, 1);
    mbar_init_fence();
    for (int i = 0; i < iters; ++i) {
      const unsigned bar = bar0 + (i & 1) * 8;
      if (i >= 2) mbar_wait(bar, ((i - 2) >> 1) & 1);
      mbar_expect_tx(bar, 4096);
      bulk_copy(dst, src + ((static_cast<unsigned long long>(i) * 8 + slot) * 4096 & ((1ull << 22) - 1)), 4096, bar);
    }
    for (int i = iters < 2 ? 0 : iters - 2; i < iters; ++i) mbar_wait(bar0 + (i & 1) * 8, (i >> 1) & 1);
  }
  __syncwarp();
  timer.stop(times);
}
extern "C" __global__ void tmafill_l4x4_m0(int iters, float* sink, BlockTime* times) {
  __shared__ __align__(128) uint16_t buf[kBufHalfs];
  if (threadIdx.x / 32 % 2 == 0)
    form_loop<4, 4, false, 0>(buf, iters, sink, times);
  else
    tma_fill_loop(buf, iters, times, true);
}
extern "C" __global__ void tmafillonly_l4x4_m0(int iters, float* sink, BlockTime* times) {
  __shared__ __align__(128) uint16_t buf[kBufHalfs];
  tma_fill_loop(buf, iters, times, threadIdx.x / 32 % 2 == 1);
}
#endif
// Loads alone: the shared-memory port's rate per instruction and per byte.
FORM(form_l1x4_m0, 1, 4, false, 0)
FORM(form_l2x4_m0, 2, 4, false, 0)
FORM(form_l4x4_m0, 4, 4, false, 0)
FORM(form_l8x4_m0, 8, 4, false, 0)
FORM(form_l4x4t_m0, 4, 4, true, 0)
FORM(form_l8x2_m0, 8, 2, false, 0)
FORM(form_l8x1_m0, 8, 1, false, 0)

// Our kernels' k steps (MT = 2 m16 tiles per warp, then 1):
TILE(tile_fwd_s_bn128, 2, 8, 1, false)   // v2 forward S = Q K^T, BN 128 (d64)
TILE(tile_fwd_s_bn64, 2, 4, 1, false)    // v2 forward S, BN 64 (d128); v2 backward S and dP at d64
TILE(tile_fwd_pv_d64, 2, 4, 0, true)     // v2 forward O += P V, d64 (P in registers)
TILE(tile_fwd_pv_d128, 2, 8, 0, true)    // v2 forward O += P V, d128
TILE(tile_bwd_nn_32x32, 2, 2, 1, false)  // v2 backward S and dP at d128 (32 x 32 warp tiles)
TILE(tile_bwd_tt_32x32, 2, 2, 2, true)   // v2 backward dV += P^T dO, dK += dS^T Q at d64
TILE(tile_bwd_tt_32x64, 2, 4, 2, true)   // v2 backward dV, dK at d128
TILE(tile_bwd_nt_32x32, 2, 2, 1, true)   // v2 backward dQ += dS K
// One m16 tile per warp (64-row Q tiles of 4 warps: d128's 64 x 64 and d256's tiles):
TILE(tile_fwd_s_m16_bn64, 1, 4, 1, false)   // v2 forward S, BN 64, 16 rows per warp
TILE(tile_fwd_pv_m16_d128, 1, 8, 0, true)   // v2 forward O += P V, 16 rows per warp, 128 columns (d256: two)

// Two blocks per SM (xfill_l4x4_m0, xidle_l4x4_m0): the first block to arrive on an SM loads as form_l4x4_m0
// on all its warps; the second, resident beside it, copies global memory into its own shared memory with
// cp.async on all its warps (xfill) or sits idle (xidle), for `neighbour_cycles` SM cycles, longer than the
// loads take. Does one block's fill slow another block's loads as it slows its own block's (fill_l4x4_m0)?
// And does a loading block keep the whole port beside an idle neighbour? roles[block]: 0 loads, 1 neighbour;
// filled[block]: the neighbour's bytes copied.
__device__ unsigned g_sm_arrivals[1024];  // blocks seen per SM, over every launch: parity gives the role
__device__ __forceinline__ void neighbour_loop(uint16_t* buf, long long cycles, BlockTime* times, bool copy,
                                               unsigned long long* filled) {
  fill(buf);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const unsigned dst = smem_u32(buf + kFillOffsetHalfs) + (warp & 3) * 4096 + lane * 16;
  BlockTimer timer;
  timer.start();
  long long n = 0;
  if (copy) {
    const long long t0 = clock64();
    for (; clock64() - t0 < cycles; ++n)
      fill_step(dst, ((static_cast<int>(n) * 8) * 32 * 64 + warp * 256 + lane) & ((1 << 18) - 1));
    asm volatile("cp.async.wait_group 0;" ::: "memory");
  } else {
    const long long t0 = clock64();
    while (clock64() - t0 < cycles) __nanosleep(200);
  }
  if (lane == 0) atomicAdd(filled + blockIdx.x, static_cast<unsigned long long>(n) * 8 * 512);
  timer.stop(times);
}
#define NEIGHBOUR(NAME, COPY)                                                                              \
  extern "C" __global__ void NAME(int iters, long long neighbour_cycles, float* sink, BlockTime* times,     \
                                  int* roles, unsigned long long* filled) {                                \
    __shared__ __align__(128) uint16_t buf[kBufHalfs];                                                     \
    if (threadIdx.x == 0) /* the role goes through global memory: the buffer takes all 48 KiB */           \
      roles[blockIdx.x] = atomicAdd(&g_sm_arrivals[smid() & 1023], 1u) & 1;                                \
    __syncthreads();                                                                                       \
    if (reinterpret_cast<volatile int*>(roles)[blockIdx.x] == 0)                                           \
      form_loop<4, 4, false, 0>(buf, iters, sink, times);                                                  \
    else                                                                                                   \
      neighbour_loop(buf, neighbour_cycles, times, COPY, filled);                                          \
  }
NEIGHBOUR(xfill_l4x4_m0, true)
NEIGHBOUR(xidle_l4x4_m0, false)
