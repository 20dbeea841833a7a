// FlashAttention-3 forward for Hopper (sm_90a only): TMA + mbarrier producer, wgmma consumers.
//
// A tile is block_m query rows of one (batch, head). Warpgroup 0 is the producer, warpgroups 1..NC
// (NC = block_m / 64) are consumers; consumer c owns query rows [64c, 64c + 64) of the tile.
// Grid: persistent (one thread block per SM, tiles b, b + grid, ...) or one thread block per tile (where
// tile costs differ, the hardware's block scheduler balances them). Kernels with two Q buffers (_q2) may
// instead take tiles from a counter in global memory (prm.tile_counter): a persistent block whose tiles were
// short takes the next one of the order, as a new block would, without a launch and prologue per tile.
// The host's choice: algorithms/tile_order.py. Tiles of one head are consecutive, heaviest query block first.
//
// Shared memory (tiles stored as swizzled panels of 128-byte rows, 64 16-bit columns; 64-byte rows where
// the head dim is not a multiple of 64 (d96); 1024-byte aligned):
//   Q              block_m x d, refilled per tile (two buffers in _q2 kernels, used by alternate tiles)
//   K[s], V[s]     block_n x d each, s = 0..STAGES-1, a circular buffer whose stage/phase run on across tiles
//   barriers       q_full, k_full[s], v_full[s]: TMA transaction counts (the producer's arrive.expect_tx)
//                  q_empty, k_empty[s], v_empty[s]: NC * 128 consumer arrivals each
//
// Pipeline (key blocks j visited from the last to the first, so the masked ones come first):
//   producer, one thread, per tile:
//     [counted: t = the counter's next tile; slot[b] = t]
//     wait q_empty (consumers done with the Q of the last tile that used this buffer); q_full <- TMA(Q)
//     for each block, it counting over all tiles: s = it % STAGES, phase = (it / STAGES) & 1
//       wait k_empty[s] (phase ^ 1); k_full[s] <- TMA(K_j)
//       wait v_empty[s] (phase ^ 1); v_full[s] <- TMA(V_j)
//   With two Q buffers the next tile's Q, and its first K/V blocks as the ring frees, arrive while the
//   current tile's last blocks and epilogue run, so a persistent block starts its next tile without waiting.
//   consumer warpgroup, OVERLAP (FA3's intra-warpgroup pipelining), per tile:
//     wait q_full; S = Q K_first^T; wait; arrive k_empty; softmax -> P_first
//     for the next blocks: [PINGPONG: bar.sync own turn]
//                   wait k_full[s]; issue S = Q K_j^T             (wgmma group 1, both operands in smem)
//                   wait v_full[s']; issue O += P_prev V_prev     (wgmma group 2, P from registers)
//                   [PINGPONG: bar.arrive next warpgroup's turn]
//                   wait group 1 -> arrive k_empty[s]; mask; online softmax of S (overlaps group 2)
//                   wait group 2 -> arrive v_empty[s']; rescale O; P = bf16/fp16(S) in the A layout
//     arrive q_empty; [turn] O += P V_last; arrive v_empty; O /= l; store from registers (rows >= N skipped)
//   consumer warpgroup, !OVERLAP: per block, S GEMM, wait, softmax, PV GEMM, wait (no pipelining).
//   PINGPONG: named barriers 1..NC; warpgroup c waits on barrier c, issues its GEMMs, then signals barrier
//   c + 1 (mod NC), so one warpgroup's GEMMs run while the others do softmax. Turns continue across tiles.
//   setmaxnreg: producer drops to 24 (NC = 2) / 32 (NC = 3) registers, consumers rise to 240 / 160.
//
// Causal (bottom-right aligned, as FlashAttention >= 2.1 and the simulator: query i sees keys
// j <= i + nk - nq): blocks wholly past the diagonal are never loaded; a tile whose rows see no key at all
// (nq > nk) loads none and stores zeros. Ragged N: TMA zero-fills rows past N, scores of keys >= N are
// masked, output rows >= N are not stored. GQA: K/V head = query head / (H / Hkv).
//
// Files (FA3's hopper/ split): v3_params.cuh (launch parameters), v3_primitives.cuh (mbarrier, TMA, wgmma
// control), v3_mainloop.cuh (configuration, the consumer's GEMMs, mask and softmax), v3_tile_scheduler.cuh
// (tile order and key-block counts), v3_epilogue.cuh (normalise and store O), and this file: the producer
// and the per-tile block loop. The tiles built, and each call's default, are the rows of v3_tiles.tsv.
// The fp8 variant (v3_fp8.cu) is this file with T = E4m3.

#include "include/phase_stamps.cuh"
#include "v3_epilogue.cuh"
#include "v3_mainloop.cuh"
#include "v3_params.cuh"
#include "v3_primitives.cuh"
#include "v3_tile_scheduler.cuh"

namespace v3 {

// Phase stamps, for experiments only (experiments/phase_stamps.py builds with FLASHSIM_PHASE_STAMPS): thread 0 of
// each warpgroup (the producer's one thread, a consumer's first lane) notes clock64 at its phase boundaries of
// the block's first tile, 16 slots per (block, warpgroup) in flashsim_v3_stamps (the producer's own from slot 11);
// slot 14 holds %globaltimer at entry and slot 15 the SM. A stamp after an issued wgmma or TMA copy marks its issue, after a wait its end.
// Without the macro the stamps compile to nothing.
#ifdef FLASHSIM_PHASE_STAMPS
__device__ unsigned long long flashsim_v3_stamps[1 << 16];
#define FLASHSIM_V3_PHASE(FIRST, K)                                                                       \
  do {                                                                                                     \
    if ((FIRST) && threadIdx.x % 128 == 0)                                                                 \
      flashsim_phase_stamp(flashsim_v3_stamps + (blockIdx.x * 4 + threadIdx.x / 128) * 16, K);             \
  } while (0)
#else
#define FLASHSIM_V3_PHASE(FIRST, K) \
  do {                              \
  } while (0)
#endif

// Persistent: thread block b takes tiles nth_tile(0), nth_tile(1), ... (a grid of one block per tile is the plain
// launch). The K/V ring's stage and phase run on across tiles; Q is refilled once consumers release it.
template <class C>
__device__ __forceinline__ void attention_fwd(const CUtensorMap& tm_q, const CUtensorMap& tm_k,
                                              const CUtensorMap& tm_v, const V3Params& prm) {
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t base = (raw + 1023) & ~1023u;
  const uint32_t sk = base + C::OFF_K, sv = base + C::OFF_V, sbar = base + C::OFF_BAR;
  constexpr int QB = C::Q_BUFS;
  // Q buffer b serves tiles n = b, b + QB, ...; its barriers' phase flips once per QB tiles.
  auto sq = [&](int n) { return base + (n % QB) * C::Q_BYTES; };
  auto q_full = [&](int n) { return sbar + 8 * (n % QB); };
  auto q_empty = [&](int n) { return sbar + 8 * (QB + n % QB); };
  auto q_phase = [&](int n) { return static_cast<uint32_t>((n / QB) & 1); };
  auto k_full = [&](int s) { return sbar + 8 * (2 * QB + s); };
  auto v_full = [&](int s) { return sbar + 8 * (2 * QB + C::STAGES + s); };
  auto k_empty = [&](int s) { return sbar + 8 * (2 * QB + 2 * C::STAGES + s); };
  auto v_empty = [&](int s) { return sbar + 8 * (2 * QB + 3 * C::STAGES + s); };
  // Taking tiles from the grid's counter (two Q buffers only): the producer writes each tile's index beside
  // its Q buffer before q_full's arrival, and consumers read it after their wait; past the end it writes
  // n_tiles and arrives without loading, which ends the consumers' loop.
  const bool counted = C::Q_BUFS > 1 && prm.tile_counter != nullptr;
  volatile int* slot = reinterpret_cast<volatile int*>(smem_raw + (base - raw) + C::OFF_SLOT);

  const int n_mblocks = (prm.nq + C::BM - 1) / C::BM;
  const int n_tiles = n_mblocks * prm.heads * prm.batch;
  const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
  FLASHSIM_V3_PHASE(true, 0);  // entry
  if (threadIdx.x == 0) {
    for (int b = 0; b < QB; ++b) {
      mbar_init(q_full(b), 1);
      mbar_init(q_empty(b), C::NC * 128);
    }
    for (int s = 0; s < C::STAGES; ++s) {
      mbar_init(k_full(s), 1);
      mbar_init(v_full(s), 1);
      mbar_init(k_empty(s), C::NC * 128);
      mbar_init(v_empty(s), C::NC * 128);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  FLASHSIM_V3_PHASE(wg == 0, 11);  // producer: barriers set up

  if (wg == 0) {
    // ---------------- producer ----------------
    regs_dec<C::PRODUCER_REGS>();
    FLASHSIM_V3_PHASE(true, 12);  // producer: registers lowered
    if (tid == 0) {
      constexpr int QK_COLS = C::QK_W / C::EB, QK_PANELS = C::D / QK_COLS;
      int it = 0;  // K/V blocks issued so far, over all tiles
      for (int n = 0;; ++n) {
        const int t = counted ? counted_tile(n, prm) : nth_tile(n, prm);
        if (t >= n_tiles) {
          if (counted) {
            mbar_wait(q_empty(n), q_phase(n) ^ 1);
            slot[2 * (n % QB)] = n_tiles;
            mbar_arrive(q_full(n));
            release_tile_counter(prm);
          }
          break;
        }
        const Tile x = tile_at<C>(t, n_mblocks, prm);
        mbar_wait(q_empty(n), q_phase(n) ^ 1);
        if (counted) slot[2 * (n % QB)] = t;
        mbar_expect_tx(q_full(n), C::Q_BYTES);
        FLASHSIM_V3_PHASE(n == 0, 13);  // producer: tile picked, Q's buffer free, about to copy Q
        for (int p = 0; p < QK_PANELS; ++p)
          tma_load_4d(sq(n) + p * C::BM * C::QK_W, &tm_q, q_full(n), p * QK_COLS, x.m_block * C::BM, x.head,
                      x.batch);
        FLASHSIM_V3_PHASE(n == 0, 1);  // producer: Q's copy issued
        for (int i = 0; i < x.n_blocks; ++i, ++it) {
          const int j = x.n_blocks - 1 - i, s = it % C::STAGES;
          const uint32_t ph = (it / C::STAGES) & 1;
          mbar_wait(k_empty(s), ph ^ 1);
          mbar_expect_tx(k_full(s), C::KV_BYTES);
          for (int p = 0; p < QK_PANELS; ++p)
            tma_load_4d(sk + s * C::KV_BYTES + p * C::BN * C::QK_W, &tm_k, k_full(s), p * QK_COLS, j * C::BN,
                        x.kv_head, x.batch);
          FLASHSIM_V3_PHASE(n == 0 && i == 0, 2);  // producer: the first K's copy issued
          mbar_wait(v_empty(s), ph ^ 1);
          mbar_expect_tx(v_full(s), C::KV_BYTES);
          if constexpr (C::FP8) {
            for (int p = 0; p < C::BN / C::V_W; ++p)
              tma_load_4d(sv + s * C::KV_BYTES + p * C::D * C::V_W, &tm_v, v_full(s), j * C::BN + p * C::V_W, 0,
                          x.kv_head, x.batch);
          } else {
            for (int p = 0; p < QK_PANELS; ++p)
              tma_load_4d(sv + s * C::KV_BYTES + p * C::BN * C::QK_W, &tm_v, v_full(s), p * QK_COLS, j * C::BN,
                          x.kv_head, x.batch);
          }
        }
        FLASHSIM_V3_PHASE(n == 0, 3);  // producer: the first tile's copies all issued
      }
    }
    return;
  }

  // ---------------- consumers ----------------
  regs_inc<C::CONSUMER_REGS>();
  FLASHSIM_V3_PHASE(true, 1);  // consumer: registers raised
  const int c = wg - 1, warp = tid / 32, lane = tid % 32;
  const int col0 = 2 * (lane % 4);
  const int my_bar = 1 + c, next_bar = 1 + (c + 1) % C::NC;
  const bool last_wg = c == C::NC - 1;
  const int kv_blocks = (prm.nk + C::BN - 1) / C::BN;
  if (C::PINGPONG && last_wg) bar_arrive(1, 256);  // warpgroup 0 takes the first turn

  int it = 0;  // K/V blocks consumed so far, over all tiles
  for (int n = 0;; ++n) {
    int t;
    if (counted) {
      mbar_wait(q_full(n), q_phase(n));
      t = slot[2 * (n % QB)];
    } else {
      t = nth_tile(n, prm);
    }
    if (t >= n_tiles) break;
    const Tile x = tile_at<C>(t, n_mblocks, prm);
    // Counted tiles never know they are the last: the final turn is taken back after the loop instead.
    const bool last_tile = !counted && nth_tile(n + 1, prm) >= n_tiles;
    const uint32_t sqn = sq(n);
    const int row0 = x.m_block * C::BM + c * 64 + warp * 16 + lane / 4;  // this thread's rows: row0, row0 + 8
    // Blocks that need masking: the ragged last one, and (causal) those reaching past the first row.
    const int offset = prm.nk - prm.nq;  // causal: query i sees keys j <= i + offset
    auto needs_mask = [&](int j) {
      return (j + 1) * C::BN > prm.nk || (C::CAUSAL && (j + 1) * C::BN - 1 > x.m_block * C::BM + offset);
    };
    float q_scale = 1.f;
    const float *k_scale = nullptr, *v_scale = nullptr;
    if constexpr (C::FP8) {
      q_scale = prm.q_scale[(x.batch * prm.heads + x.head) * n_mblocks + x.m_block];
      k_scale = prm.k_scale + (x.batch * (prm.heads / prm.group) + x.kv_head) * kv_blocks;
      v_scale = prm.v_scale + (x.batch * (prm.heads / prm.group) + x.kv_head) * kv_blocks;
    }
    auto block_sl2 = [&](int j) {
      if constexpr (C::FP8) return prm.scale_log2 * q_scale * k_scale[j];
      return prm.scale_log2;
    };
    auto stage = [&](int i) { return (it + i) % C::STAGES; };
    auto phase = [&](int i) { return static_cast<uint32_t>(((it + i) / C::STAGES) & 1); };

    Consumer<C> cs;
#pragma unroll
    for (int i = 0; i < Consumer<C>::NO; ++i) cs.o[i] = 0.f;
    cs.m[0] = cs.m[1] = -INFINITY;
    cs.l[0] = cs.l[1] = 0.f;
    float dv = 1.f;  // fp8: V scale of the block whose P is in registers; O is kept in those units
    const int nb = x.n_blocks;

    if (!counted) mbar_wait(q_full(n), q_phase(n));
    FLASHSIM_V3_PHASE(n == 0, 2);  // consumer: Q landed
    if (nb == 0) {
      // Causal tile that sees no key: nothing was loaded but Q; O stays 0. One ping-pong turn keeps the
      // warpgroups' turn order (and the skipped last arrive) as for any other tile.
      mbar_arrive(q_empty(n));
      if (C::PINGPONG) {
        bar_sync(my_bar, 256);
        if (!(last_wg && last_tile)) bar_arrive(next_bar, 256);
      }
    } else if constexpr (C::OVERLAP) {
      {
        const int j = nb - 1;
        const float sl2 = block_sl2(j);
        if (C::PINGPONG) bar_sync(my_bar, 256);
        FLASHSIM_V3_PHASE(n == 0, 3);  // consumer: its turn
        mbar_wait(k_full(stage(0)), phase(0));
        FLASHSIM_V3_PHASE(n == 0, 4);  // consumer: the first K landed
        cs.gemm_qk(sqn, sk + stage(0) * C::KV_BYTES, c);
        if (C::PINGPONG) bar_arrive(next_bar, 256);
        wg_wait<0>();
        pin(cs.s);
        FLASHSIM_V3_PHASE(n == 0, 5);  // consumer: the first S done
        mbar_arrive(k_empty(stage(0)));
        if (needs_mask(j)) cs.mask(j, row0, col0, prm.nk, offset);
        float alpha[2];
        cs.softmax(sl2, alpha);
        if constexpr (C::FP8) dv = v_scale[j];
        cs.convert_p();
        FLASHSIM_V3_PHASE(n == 0, 6);  // consumer: the first softmax done, P in registers
      }
      for (int i = 1; i < nb; ++i) {
        const int j = nb - 1 - i;
        const float sl2 = block_sl2(j);
        if (C::PINGPONG) bar_sync(my_bar, 256);
        mbar_wait(k_full(stage(i)), phase(i));
        cs.gemm_qk(sqn, sk + stage(i) * C::KV_BYTES, c);
        mbar_wait(v_full(stage(i - 1)), phase(i - 1));
        cs.gemm_pv(sv + stage(i - 1) * C::KV_BYTES);
        if (C::PINGPONG) bar_arrive(next_bar, 256);
        wg_wait<1>();
        pin(cs.s);
        mbar_arrive(k_empty(stage(i)));
        if (needs_mask(j)) cs.mask(j, row0, col0, prm.nk, offset);
        float alpha[2];
        cs.softmax(sl2, alpha);
        wg_wait<0>();
        pin(cs.o);
        pin(cs.p);
        mbar_arrive(v_empty(stage(i - 1)));
        float extra = 1.f;
        if constexpr (C::FP8) {
          const float dv_new = v_scale[j];
          extra = dv / dv_new;
          dv = dv_new;
        }
        cs.rescale_o(alpha, extra);
        cs.convert_p();
      }
      mbar_arrive(q_empty(n));  // every S GEMM of this tile has completed
      FLASHSIM_V3_PHASE(n == 0, 7);  // consumer: the middle K/V blocks done
      {
        if (C::PINGPONG) bar_sync(my_bar, 256);
        mbar_wait(v_full(stage(nb - 1)), phase(nb - 1));
        FLASHSIM_V3_PHASE(n == 0, 8);  // consumer: its last turn, the last V landed
        cs.gemm_pv(sv + stage(nb - 1) * C::KV_BYTES);
        if (C::PINGPONG && !(last_wg && last_tile)) bar_arrive(next_bar, 256);
        wg_wait<0>();
        pin(cs.o);
        mbar_arrive(v_empty(stage(nb - 1)));
        FLASHSIM_V3_PHASE(n == 0, 9);  // consumer: the last O += P V done
      }
    } else {
      for (int i = 0; i < nb; ++i) {
        const int j = nb - 1 - i;
        const float sl2 = block_sl2(j);
        mbar_wait(k_full(stage(i)), phase(i));
        cs.gemm_qk(sqn, sk + stage(i) * C::KV_BYTES, c);
        wg_wait<0>();
        pin(cs.s);
        mbar_arrive(k_empty(stage(i)));
        if (needs_mask(j)) cs.mask(j, row0, col0, prm.nk, offset);
        float alpha[2];
        cs.softmax(sl2, alpha);
        float extra = 1.f;
        if constexpr (C::FP8) {
          const float dv_new = v_scale[j];
          extra = i == 0 ? 1.f : dv / dv_new;
          dv = dv_new;
        }
        cs.rescale_o(alpha, extra);
        cs.convert_p();
        mbar_wait(v_full(stage(i)), phase(i));
        cs.gemm_pv(sv + stage(i) * C::KV_BYTES);
        wg_wait<0>();
        pin(cs.o);
        mbar_arrive(v_empty(stage(i)));
      }
      mbar_arrive(q_empty(n));
    }
    it += nb;

    store_o<C>(cs, dv, x, row0, col0, prm);
    FLASHSIM_V3_PHASE(n == 0, 10);  // consumer: O normalised and stored
  }
  // Counted tiles: the last warpgroup's final arrive on warpgroup 0's barrier has no turn after it; take it.
  if (C::PINGPONG && counted && c == 0) bar_sync(my_bar, 256);
}

}  // namespace v3

// One entry point per row of v3_tiles.tsv; the build writes the V3_ENTRY(...) lines (kernels/hopper_tiles.py).
#define V3_ENTRY(TY, D, BM, BN, ST, CAUSAL, PP, OV)                                                       \
  extern "C" __global__ void __launch_bounds__(128 * (BM / 64 + 1), 1)                                    \
      v3_##TY##_d##D##_m##BM##_n##BN##_s##ST##_c##CAUSAL##_p##PP##_o##OV(                                \
          const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,              \
          const __grid_constant__ CUtensorMap tm_v, const V3Params prm) {                                 \
    v3::attention_fwd<v3::Cfg<v3::TY, D, BM, BN, ST, CAUSAL, PP, OV>>(tm_q, tm_k, tm_v, prm);            \
  }
// The same with two Q buffers (name suffix _q2).
#define V3_ENTRY_Q2(TY, D, BM, BN, ST, CAUSAL, PP, OV)                                                    \
  extern "C" __global__ void __launch_bounds__(128 * (BM / 64 + 1), 1)                                    \
      v3_##TY##_d##D##_m##BM##_n##BN##_s##ST##_c##CAUSAL##_p##PP##_o##OV##_q2(                           \
          const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,              \
          const __grid_constant__ CUtensorMap tm_v, const V3Params prm) {                                 \
    v3::attention_fwd<v3::Cfg<v3::TY, D, BM, BN, ST, CAUSAL, PP, OV, 2>>(tm_q, tm_k, tm_v, prm);         \
  }
