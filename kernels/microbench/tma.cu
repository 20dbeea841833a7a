// The Hopper copy engine (TMA) through 1-D bulk copies, cp.async.bulk global -> shared completing on an
// mbarrier: round-trip latency, issue cost, and streaming bandwidth. Tensor-map copies go through the same
// unit; a 1-D bulk copy needs no tensor map, so the host needs nothing beyond a plain launch. sm_90a only.
#include "bulk_copy.cuh"
#include "common.cuh"

// One thread: expect, copy `bytes`, wait for the barrier's phase to flip; `steps` times, each from the next
// `bytes`-sized piece of a src window of `window` bytes (a power of two; small enough to stay in L2).
// Also times the issue of 16 back-to-back copies onto one barrier (issue cost per copy).
extern "C" __global__ void bulk_latency(const char* __restrict__ src, unsigned long long window, unsigned bytes,
                                        int steps, long long* cycles) {
  __shared__ alignas(128) char buf[16 * 1024];
  __shared__ alignas(8) unsigned long long bar_storage;
  const unsigned bar = smem_addr(&bar_storage);
  if (threadIdx.x != 0) return;
  mbar_init(bar, 1);
  mbar_init_fence();
  unsigned parity = 0;
  const long long t0 = clock64();
  for (int s = 0; s < steps; ++s) {
    mbar_expect_tx(bar, bytes);
    bulk_copy(smem_addr(buf), src + (((unsigned long long)s * bytes) & (window - 1)), bytes, bar);
    mbar_wait(bar, parity);
    parity ^= 1;
  }
  const long long t1 = clock64();
  // Issue cost: 16 copies of bytes/16 each (>= 16 B, multiples of 16) before one wait.
  const unsigned piece = bytes / 16 < 16 ? 16 : (bytes / 16) & ~15u;
  mbar_expect_tx(bar, 16 * piece);
  const long long t2 = clock64();
#pragma unroll
  for (int k = 0; k < 16; ++k) bulk_copy(smem_addr(buf + k * piece), src + k * piece, piece, bar);
  const long long t3 = clock64();
  mbar_wait(bar, parity);
  cycles[0] = t1 - t0;
  cycles[1] = t3 - t2;
}

// Streaming through the copy engine: thread 0 of each block keeps `stages` chunks of `chunk` bytes in
// flight through a ring of shared-memory stages, each with its own barrier, and walks the block's share of
// a large buffer (HBM) or of a small one re-read (L2). Nothing consumes the data: this is the engine's and
// the memory's rate, the ceiling of a TMA producer warp.
extern "C" __global__ void bulk_stream(const char* __restrict__ src, unsigned long long total, unsigned chunk,
                                       int stages, int chunks_per_block, BlockTime* times) {
  extern __shared__ __align__(128) char ring[];  // stages * chunk bytes, then one 8-byte barrier per stage
  unsigned long long* bars = reinterpret_cast<unsigned long long*>(ring + (size_t)stages * chunk);
  BlockTimer timer;
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) mbar_init(smem_addr(bars + s), 1);
    mbar_init_fence();
  }
  timer.start();
  if (threadIdx.x == 0) {
    const unsigned long long first = (unsigned long long)blockIdx.x * chunks_per_block;
    const unsigned long long n_chunks = total / chunk;
    auto issue = [&](int i) {
      const int s = i % stages;
      const unsigned long long g = ((first + i) % n_chunks) * chunk;
      mbar_expect_tx(smem_addr(bars + s), chunk);
      bulk_copy(smem_addr(ring + (size_t)s * chunk), src + g, chunk, smem_addr(bars + s));
    };
    for (int i = 0; i < stages && i < chunks_per_block; ++i) issue(i);
    for (int i = 0; i < chunks_per_block; ++i) {
      mbar_wait(smem_addr(bars + i % stages), (i / stages) & 1);
      if (i + stages < chunks_per_block) issue(i + stages);
    }
  }
  timer.stop(times);
}
