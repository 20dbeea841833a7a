"""A paged K/V cache (vLLM's PagedAttention layout, which FA2 takes through `block_table`).

K and V live in pages of `page_size` tokens; a block table maps each sequence's logical page to a physical
page of one shared pool. In the tile ops a paged K/V tensor is batch 0 of K (or V) with rows = physical page
x page_size + offset, and the block table is the int32 tensor BlockTable (row b: sequence b's pages).

How a K/V tile is fetched: our decode schedule copies with cp.async, where each thread computes its row's
address, so a tile is gathered from whichever pages hold its rows; we issue one request per page run in the
tile (block_n / page_size of them when pages are smaller than the tile), since a request names one
contiguous rectangle. TMA could not do better with small pages: a tensor map describes one strided box, so a
TMA kernel also needs one copy per page (FA3 gathers small pages with cp.async for that reason).
"""

from __future__ import annotations

import random

from .ir import GTile
from .parts import cdiv
from .problem import Problem

TABLE = "BlockTable"
TABLE_BYTES = 4  # int32 page indices
LAYOUT_SEED = 0  # pages are handed out in a shuffled order, as an allocator serving many requests leaves them


def pages_of(p: Problem, b: int) -> int:
    return cdiv(p.k_len(b), p.page_size)


def page_table(p: Problem, seed: int = LAYOUT_SEED) -> list[list[int]]:
    """Each sequence's physical pages, in logical order: a shuffled pool of every page the batch needs."""
    counts = [pages_of(p, b) for b in range(p.batch)]
    pool = list(range(sum(counts)))
    random.Random(seed).shuffle(pool)
    table, at = [], 0
    for n in counts:
        table.append(pool[at:at + n])
        at += n
    return table


def pool_pages(p: Problem) -> int:
    return sum(pages_of(p, b) for b in range(p.batch))


def kv_pieces(p: Problem, table: list[list[int]], tensor: str, b: int, hk: int, row0: int, rows: int):
    """The requests that fetch rows [row0, row0 + rows) of sequence b's K or V: one per page they touch, each
    with the tile row it lands at (None for the first: it starts the buffer afresh)."""
    ps, end = p.page_size, min(row0 + rows, p.k_len(b))
    r = row0
    while r < end:
        page, offset = divmod(r, ps)
        n = min(ps - offset, end - r)
        yield GTile(tensor, 0, hk, table[b][page] * ps + offset, n, 0, p.headdim, p.elem_bytes), r - row0 or None
        r += n


def table_tile(p: Problem, b: int, row0: int, rows: int) -> GTile:
    """The block-table entries of the pages holding K/V rows [row0, row0 + rows) of sequence b."""
    first = row0 // p.page_size
    last = cdiv(min(row0 + rows, p.k_len(b)), p.page_size)
    return GTile(TABLE, b, 0, first, last - first, 0, 1, TABLE_BYTES)


def table_entries(p: Problem, row0: int, rows: int, k_len: int) -> int:
    """Entries table_tile reads (for the closed forms)."""
    return cdiv(min(row0 + rows, k_len), p.page_size) - row0 // p.page_size


def shapes(p: Problem) -> dict[str, tuple[int, int, int, int]]:
    pool = pool_pages(p) * p.page_size
    return {"K": (1, p.kv_heads, pool, p.headdim), "V": (1, p.kv_heads, pool, p.headdim),
            TABLE: (p.batch, 1, max(pages_of(p, b) for b in range(p.batch)), 1)}


def to_pages(p: Problem, x, table: list[list[int]]):
    """A (B, Hkv, Nk, d) K or V tensor laid out in the page pool (for tests and the numeric interpreter)."""
    import torch

    pool = torch.zeros(1, p.kv_heads, pool_pages(p) * p.page_size, p.headdim, dtype=x.dtype)
    for b in range(p.batch):
        for page, phys in enumerate(table[b]):
            lo = page * p.page_size
            n = min(p.page_size, p.k_len(b) - lo)
            pool[0, :, phys * p.page_size: phys * p.page_size + n] = x[b, :, lo:lo + n]
    return pool
