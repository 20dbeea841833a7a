"""FlashAttention-3's work-tile order and grid, shared by the v3 schedule and the v3 kernels' launcher.

A work tile is (batch, head, query block). Without a causal mask every tile costs the same, so tiles run
head by head (the blocks side by side share one head's K/V in L2) on a persistent grid, one thread block per
SM. With one, a tile's cost grows with its query block; the (batch, head) pairs are cut into sections whose
K/V fit in a quarter of the L2, and a section lists every pair's last query block, then every pair's
second-to-last, and so on: longest first across heads, not only within one. kernels/v3_tile_scheduler.cuh
decodes a tile index the same way (tile_at).

Grids: 16-bit d64 and d128 run the kernel with two Q buffers on a persistent grid whose blocks take the next
tile of this order from a counter as they finish (prefetch), as the simulator hands out work tiles. Other
causal problems run one thread block per tile, except short heads with 192-row tiles (persistent); a
persistent kernel without the counter deals one tile per round of grid-many tiles to each block, odd rounds
backwards with sections (nth_tile), which approximates the same greedy order.
"""

from __future__ import annotations

# K/V bytes of one section: a quarter of the H200's 60 MiB L2, so a section's K/V stay resident.
SECTION_KV_BYTES = 16 << 20
# Causal problems run on the persistent grid only with the 192-row tile (three consumer warpgroups) and
# heads of at most 1 MiB of K/V: measured on the H200 against one block per tile, where the 128-row tiles
# ran faster one block per tile at every length (experiments/results/h200/order/).
PERSISTENT_CAUSAL_KV_BYTES = 1 << 20
PERSISTENT_CAUSAL_BLOCK_M = 192
# The two-Q-buffer kernels (prefetch) are built for these head dims; two Q tiles and a two-stage K/V ring
# must fit in this much shared memory (227 KiB less the barriers' and alignment's 2 KiB).
PREFETCH_HEADDIMS = (64, 128)
PREFETCH_SMEM_BYTES = 225 << 10


def head_kv_bytes(seqlen_k: int, headdim: int, elem_bytes: int) -> int:
    """K and V of one K/V head."""
    return 2 * seqlen_k * headdim * elem_bytes


def section_pairs(causal: bool, seqlen_k: int, headdim: int, elem_bytes: int, group: int, pairs: int) -> int:
    """(batch, head) pairs per section: 0 (head by head) without a causal mask; with one, as many pairs as
    share SECTION_KV_BYTES of K/V (the query heads of one GQA group share theirs)."""
    if not causal:
        return 0
    per_pair = max(1, head_kv_bytes(seqlen_k, headdim, elem_bytes) // max(1, group))
    return max(1, min(pairs, SECTION_KV_BYTES // per_pair))


def persistent(causal: bool, seqlen_k: int, headdim: int, elem_bytes: int, block_m: int) -> bool:
    """Whether the grid is one thread block per SM taking tiles in order (else one block per tile)."""
    if not causal:
        return True
    short = head_kv_bytes(seqlen_k, headdim, elem_bytes) <= PERSISTENT_CAUSAL_KV_BYTES
    return short and block_m >= PERSISTENT_CAUSAL_BLOCK_M


def prefetch(causal: bool, seqlen_k: int, headdim: int, elem_bytes: int, block_m: int, block_n: int) -> bool:
    """Whether the call runs the kernel with two Q buffers (tile table schedule pingpong-q2) on a persistent
    grid whose blocks take tiles from a counter: each block loads its next tile's Q and first K/V blocks
    while the current tile runs, and a block that finishes early takes the next tile of the order. 16-bit
    d64 and d128, wherever the second Q buffer fits beside the two-stage K/V ring (so not d128's non-causal
    128x176 tile). Measured on the H200 against one block per tile and the persistent grid dealing every
    grid-th tile (experiments/results/h200/causal1k/), causal 512..4k: d128 128x128 / cuDNN 0.85, 0.96,
    1.01, 1.03 (was 0.64, 0.78, 0.93, 0.99), d64 192x128 0.79, 0.84, 1.03, 1.08 (was 0.77, 0.79, 0.97,
    1.00); non-causal d64 1k 1.01 (was 0.96). seqlen_k and causal do not enter the rule."""
    if elem_bytes != 2 or headdim not in PREFETCH_HEADDIMS:
        return False
    return (2 * block_m + 4 * block_n) * headdim * elem_bytes <= PREFETCH_SMEM_BYTES


def tiles(pairs: int, q_blocks: int, section: int) -> list[tuple[int, int]]:
    """(pair, query block) of every tile index in launch order; pair = batch * heads + head."""
    if section <= 0:
        return [(pair, q_blocks - 1 - i) for pair in range(pairs) for i in range(q_blocks)]
    order = []
    for first in range(0, pairs, section):
        width = min(section, pairs - first)
        order += [(first + i % width, q_blocks - 1 - i // width) for i in range(width * q_blocks)]
    return order
