// The tile scheduler: which (query block, head, batch) the t-th tile is, and how many key blocks it visits.
#pragma once

#include "v3_params.cuh"

namespace v3 {

// One (m_block, head, batch) of the tile list. Section 0: tiles of a head are consecutive (K/V stay in L2),
// heaviest (last) query block first. Section S > 0: the (batch, head) pairs are cut into sections of S
// whose K/V fit in L2 together; a section lists every pair's last query block, then every pair's
// second-to-last, and so on, so the grid starts the long causal tiles of S heads before any short one
// (longest first across heads, not only within one), and blocks taking tiles in order finish together.
struct Tile {
  int m_block, head, batch, kv_head, n_blocks;
};
template <class C>
__device__ __forceinline__ Tile tile_at(int t, int n_mblocks, const V3Params& prm) {
  Tile x;
  int pair;  // batch * heads + head
  if (prm.section > 0) {
    const int per = prm.section * n_mblocks, sec = t / per, first = sec * prm.section;
    const int width = min(prm.section, prm.batch * prm.heads - first), i = t - sec * per;
    x.m_block = n_mblocks - 1 - i / width;
    pair = first + i % width;
  } else {
    x.m_block = n_mblocks - 1 - t % n_mblocks;
    pair = t / n_mblocks;
  }
  x.head = pair % prm.heads;
  x.batch = pair / prm.heads;
  x.kv_head = x.head / prm.group;
  // Causal: keys past the tile's last row's diagonal (bottom-right) are never seen; 0 blocks when none is.
  const int keys = C::CAUSAL ? min(prm.nk, max(0, (x.m_block + 1) * C::BM + prm.nk - prm.nq)) : prm.nk;
  x.n_blocks = (keys + C::BN - 1) / C::BN;
  return x;
}

// The n-th tile a thread block takes: tile b in round 0, then one per round of gridDim.x tiles. With sections
// (causal), odd rounds run backwards (block b takes the round's (gridDim.x - 1 - b)-th tile), so the blocks
// that took one round's longest tiles take the next round's shortest ones.
__device__ __forceinline__ int nth_tile(int n, const V3Params& prm) {
  const int g = gridDim.x, b = blockIdx.x;
  return n * g + (prm.section > 0 && (n & 1) ? g - 1 - b : b);
}

// Taking tiles from the grid's counter (prm.tile_counter set): the producer's n-th tile is tile b first, then
// the next one not yet taken, so a block that finishes early takes the next tile of the list as the hardware
// block scheduler would hand it to a new block, without a block's launch and prologue per tile.
__device__ __forceinline__ int counted_tile(int n, const V3Params& prm) {
  return n == 0 ? static_cast<int>(blockIdx.x) : static_cast<int>(gridDim.x) + atomicAdd(prm.tile_counter, 1);
}

// Called once per block after its producer drew a tile index past the end: no block takes another, so the
// last one to get here zeroes the counter for the next launch on the stream.
__device__ __forceinline__ void release_tile_counter(const V3Params& prm) {
  if (atomicAdd(prm.tile_counter + 1, 1) == static_cast<int>(gridDim.x) - 1) {
    atomicExch(prm.tile_counter, 0);
    atomicExch(prm.tile_counter + 1, 0);
  }
}

}  // namespace v3
