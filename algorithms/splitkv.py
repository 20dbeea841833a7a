"""Split-KV (Flash-Decoding): several thread blocks share one Q tile's K/V range, and a combine kernel merges.

When batch x heads x Q blocks cannot fill the SMs (decode: one Q block per head), each Q tile's K/V blocks are
cut into `splits` contiguous ranges. Split s runs the usual inner loop over its range, normalises its own O_s
and LSE_s and writes both in fp32 to a global workspace (Oaccum, LSEaccum: row s * Nq + q of each (batch,
head)). A second launch reads every split's partials of a few rows and merges them exactly
(ir.MergeSplits), writing O in the output dtype and the LSE.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .ir import FP32_BYTES as F32
from .ir import RMEM, Code, GTile, Kernel, Load, MergeSplits, Normalize, Role, Store, SyncThreads
from .parts import cdiv, out_bytes, row_tile
from .problem import Problem

if TYPE_CHECKING:  # the closed forms are imported where used: a simulation needs none
    from . import closed_form as cf

O_PARTS, LSE_PARTS = "Oaccum", "LSEaccum"
MAX_SPLITS = 128  # FA2 refuses more (flash_api.cpp: num_splits <= 128)
COMBINE_WARPS = 4  # FA2's combine kernel: 128 threads
COMBINE_KERNEL = "flash_fwd_combine"
# Our combine's code (kernels/decode.cu), from Nsight Compute's executed counts per SASS instruction after 8 and
# 33 splits (experiments/results/h200/decode-fid/ncu/combine-*-sass.txt): its warps run 46-50 distinct 128-byte
# lines, with 3-4 taken branches each, all landing beyond the next line.
OUR_COMBINE_CODE = (46 * 128, 3, 3)


def split_block_n(d: int) -> int:
    """K/V rows per block of FA2's split-KV kernels (flash_api.cpp, set_params_splitkv: 256 up to d64, 128
    up to d128, 64 above); its split heuristic counts blocks of this size."""
    return 256 if d <= 64 else 128 if d <= 128 else 64


def splits_heuristic(tiles: int, slots: int, kv_blocks: int, max_splits: int = MAX_SPLITS) -> int:
    """How many K/V splits FA2 picks (num_splits_heuristic in csrc/flash_attn/flash_api.cpp of
    Dao-AILab/flash-attention, v2.x; re-derived here, not copied): none when the tiles (batch x heads x Q
    blocks) already fill 80% of the slots; else, of the split counts that change the blocks per split, the
    smallest whose wave efficiency (waves / waves rounded up) is within 85% of the best. FA2 passes twice the
    SM count as slots (two 128-thread blocks per SM) and at most 128 splits."""
    if tiles >= 0.8 * slots:
        return 1
    limit = min(max_splits, slots, kv_blocks)

    def eligible(n: int) -> bool:  # 11 splits of 64 blocks are 6 * 10 + 4, the same work as 11 of 6 each
        return n == 1 or cdiv(kv_blocks, n) != cdiv(kv_blocks, n - 1)

    efficiency = {}
    for n in range(1, limit + 1):
        if eligible(n):
            waves = tiles * n / slots
            efficiency[n] = waves / cdiv(tiles * n, slots)
    best = max(efficiency.values(), default=0.0)
    return next((n for n, e in efficiency.items() if e >= 0.85 * best), 1)


def auto_splits(p: Problem, tiles_per_head: int, profile, kv_heads_only: bool = False) -> int:
    """FA2's choice for this problem on this GPU. tiles_per_head: Q tiles of one (batch, head) (FA2 counts
    64-row blocks); kv_heads_only: the tiles are per K/V head (packed GQA)."""
    heads = p.kv_heads if kv_heads_only else p.heads
    return splits_heuristic(p.batch * heads * tiles_per_head, 2 * profile.sm_count,
                            cdiv(p.seqlen_k, split_block_n(p.headdim)))


def split_range(kv_blocks: int, visible: int, splits: int, s: int) -> tuple[int, int]:
    """(first K/V block, block count) of split s: FA2 cuts all kv_blocks into splits of ceil(kv_blocks /
    splits), then a causal tile stops at its `visible` blocks (a split past them is empty)."""
    per = cdiv(kv_blocks, splits)
    first = s * per
    return first, max(0, min(visible, first + per) - first)


def partial_stores(p: Problem, b: int, h: int, row0: int, rows: int, s: int, acc: str, src_row: int = 0):
    """Split s's normalised O_s and LSE_s (ir.Normalize ran once for the tile), written in fp32 to the
    workspace: rows [row0, row0 + rows) of head h, taken from row src_row of the tile (packed GQA)."""
    nq = p.seqlen_q
    yield Store(acc, GTile(O_PARTS, b, h, s * nq + row0, rows, 0, p.headdim, F32), RMEM, src_row=src_row)
    yield Store("lse", GTile(LSE_PARTS, b, h, s * nq + row0, rows, 0, 1, F32), RMEM, src_row=src_row)


def partial_epilogue(p: Problem, b: int, h: int, row0: int, block: int, s: int, acc: str, m: str, l: str,
                     warps: int):
    """Normalize a (not packed) tile of `block` rows and write the partials of its rows of sequence b."""
    yield Normalize(acc, m, l, "lse", block, p.headdim, warps)
    yield from partial_stores(p, b, h, row0, min(block, p.q_len(b) - row0), s, acc)


def combine_rows(d: int) -> int:
    """Rows one combine block merges (FA2's kBlockM for the combine: 4 at d128, 8 at d64, else 16)."""
    return 4 if d % 128 == 0 else 8 if d % 64 == 0 else 16


def combine_kernel(p: Problem, splits: int, ours: bool = False) -> Kernel:
    """One block per (batch, head, combine_rows queries): load every split's LSE and O of those rows, merge,
    write O and LSE. Each split's O partial waits for the one before: our combine's loop (kernels/decode.cu)
    keeps about one in flight (its split sweep, experiments/results/h200/decode-hbm/decode-splits.md, adds
    0.14-0.17 us per split from 8 to 66 splits, one L2 round trip each). ours: our combine's LSE_s are one
    lane's load each, all in flight together, and a barrier publishes the weights before the O loop;
    otherwise (FA2's combine, not measured apart) each LSE_s load also waits for the one before."""
    rb, d = combine_rows(p.headdim), p.headdim

    def program(cta):
        b, h, i = cta
        nq = p.q_len(b)
        row0 = i * rb
        rows = min(rb, nq - row0)
        if ours:  # new to the SM after the split kernel's
            yield Code(f"combine d{d}", *OUR_COMBINE_CODE)
        for s in range(splits):
            yield Load(GTile(LSE_PARTS, b, h, s * p.seqlen_q + row0, rows, 0, 1, F32), "lse_parts", RMEM,
                       dst_row=s * rows, in_flight=splits if ours else 1)
        if ours:  # the weights e^(LSE_s - LSE) go through shared memory before the O loop reads them
            yield SyncThreads()
        for s in range(splits):
            yield Load(GTile(O_PARTS, b, h, s * p.seqlen_q + row0, rows, 0, d, F32), "o_parts", RMEM,
                       dst_row=s * rows)
        yield MergeSplits("o_parts", "lse_parts", "o", "lse", splits, rows, d, COMBINE_WARPS)
        yield Store("o", row_tile(p, "O", b, h, row0, rows, elem_bytes=out_bytes(p)), RMEM)
        yield Store("lse", GTile("LSE", b, h, row0, rows, 0, 1, F32), RMEM)

    ctas = [(b, h, i) for b in range(p.batch) for h in range(p.heads) for i in range(cdiv(p.q_len(b), rb))]
    return Kernel(COMBINE_KERNEL, ctas, (Role("warps", COMBINE_WARPS, program),), 0, 64,
                  classes=lambda c: (c[2], p.q_len(c[0])))


def workspace_shapes(p: Problem, splits: int) -> dict[str, tuple[int, int, int, int]]:
    return {O_PARTS: (p.batch, p.heads, splits * p.seqlen_q, p.headdim),
            LSE_PARTS: (p.batch, p.heads, splits * p.seqlen_q, 1)}


def workspace_bytes(p: Problem, splits: int) -> dict[str, int]:
    """The fp32 partials FA2 allocates for a split launch (its softmax_lse_accum and out_accum)."""
    if splits <= 1:
        return {}
    rows = splits * p.batch * p.heads * p.seqlen_q
    return {O_PARTS: rows * p.headdim * F32, LSE_PARTS: rows * F32}


def combine_nest(p: Problem, splits: int) -> cf.KernelNest:
    """The combine's closed forms: every split's partials of every query row read once, O and LSE written."""
    from . import closed_form as cf
    rb, d, eo = combine_rows(p.headdim), p.headdim, out_bytes(p)
    blocks = [cdiv(p.q_len(b), rb) for b in range(p.batch)]
    ctas = p.heads * sum(blocks)
    rows = p.heads * sum(p.q_len(b) for b in range(p.batch))  # query rows of the whole problem
    r = min(rb, p.seqlen_q)
    merge = MergeSplits("", "", "", "", splits, rb, d, COMBINE_WARPS)
    exps = splits * rows + rows
    alu = 3 * splits * rows + 2 * splits * rows * d
    body = [
        cf.load(f"load LSE_s, s in 0..{splits}", LSE_PARTS, splits * r * F32, splits * rows * F32, ctas * splits,
                smem=False),
        cf.load(f"load O_s (fp32), s in 0..{splits}", O_PARTS, splits * r * d * F32, splits * rows * d * F32,
                ctas * splits, smem=False),
        cf.Step("O = sum_s e^(LSE_s - LSE) O_s", "rf", ctas,
                [cf.Effect("exps", "", merge.exps, exps), cf.Effect("alu_flops", "", merge.alu_flops, alu)]),
        cf.store("store O", "O", r * d * eo, rows * d * eo, ctas),
        cf.store("store LSE", "LSE", r * F32, rows * F32, ctas),
    ]
    loop = cf.Loop(f"(b, h, row block of {rb}) in {ctas}", ctas, ctas, body, grid=True)
    return cf.KernelNest(COMBINE_KERNEL, ctas, 32 * COMBINE_WARPS, [loop])
