// The tile scheduler: which (query block, head, batch) the t-th tile is, and how many key blocks it visits.
#pragma once

#include "v3_params.cuh"

namespace v3 {

// One (m_block, head, batch) of the tile list; tiles of a head are consecutive (K/V stay in L2), heaviest
// (last) query block first so a causal grid's long tiles start early.
struct Tile {
  int m_block, head, batch, kv_head, n_blocks;
};
template <class C>
__device__ __forceinline__ Tile tile_at(int t, int n_mblocks, const V3Params& prm) {
  Tile x;
  x.m_block = n_mblocks - 1 - t % n_mblocks;
  x.head = (t / n_mblocks) % prm.heads;
  x.batch = t / (n_mblocks * prm.heads);
  x.kv_head = x.head / prm.group;
  // Causal: keys past the tile's last row's diagonal (bottom-right) are never seen; 0 blocks when none is.
  const int keys = C::CAUSAL ? min(prm.nk, max(0, (x.m_block + 1) * C::BM + prm.nk - prm.nq)) : prm.nk;
  x.n_blocks = (keys + C::BN - 1) / C::BN;
  return x;
}

}  // namespace v3
