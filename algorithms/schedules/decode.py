"""Decode (Nq = 1..16 new tokens against a K/V cache): split-KV with the query heads of a K/V head packed.

FA2's split-KV kernel runs one 64-row Q tile per query head, so a one-token decode fills 1 of its 64 rows and
reads the K/V cache once per query head. Packing GQA/MQA (FA3's PackGQA) gives the tile the rows of every
query head that shares a K/V head: rows = Nq x heads / kv_heads, head-major (tile row r is query head
hk * group + r // Nq, query r % Nq), so each K/V block is read once per K/V head and multiplied against all
of them. The K/V range is split as in Flash-Decoding (algorithms/splitkv.py; FA2's heuristic by default)
so that batch x kv_heads tiles still fill the GPU. The cache may be paged (algorithms/paged.py) and the
batch of variable length (one grid of real tiles per sequence, no padding).

Per thread block (batch b, K/V head hk, row block i, split s), as our kernel (kernels/decode.cu) runs it:
    (a page-table read, when paged) | Q rows (one copy per head) and the first stages - 1 K/V blocks, each
    block's K and V one cp.async group in its ring stage | for each K/V block j of the split's range: wait
    for block j, barrier, refill the freed stage with block j + stages - 1, S = Q K_j^T, online softmax,
    O += P V_j | O_s, LSE_s
So up to stages - 1 blocks per thread block are in flight while one is multiplied: how many bytes an SM
keeps in flight against the HBM latency follows from the ring, not from a formula.
"""

from __future__ import annotations

import math
from dataclasses import replace

from flashsim.errors import FlashsimError

from .. import closed_form as cf
from .. import paged
from ..footprint import REG_OVERHEAD
from ..ir import FP32_BYTES as F32
from ..ir import (
    RMEM,
    SMEM,
    Code,
    Fill,
    Gemm,
    GTile,
    Kernel,
    Load,
    Mask,
    Normalize,
    OnlineSoftmax,
    Role,
    Schedule,
    Store,
    StoreShared,
    SyncThreads,
    Wait,
)
from ..mapping import Tiling
from ..parts import causal_shift, cdiv, gemm_dtype, lse_tensor, out_bytes, row_tile
from ..problem import Problem
from ..record import Algorithm
from ..splitkv import (
    LSE_PARTS,
    O_PARTS,
    auto_splits,
    combine_kernel,
    combine_nest,
    partial_stores,
    split_range,
    workspace_bytes,
    workspace_shapes,
)

MAX_QUERIES = 16
BLOCK_M = 64  # FA2's split-KV kernels: kBlockM = 64, 4 warps
WARPS = 4
# Our kernel's cp.async ring (kernels/decode.cu): STAGES (K, V) tile pairs, filled STAGES - 1 blocks ahead of
# the math. One pair is 32 KiB (64 keys at d128, 128 at d64), so three and the Q tile (112 / 104 KiB) let two
# thread blocks share an H100/H200 SM, as FA2's split heuristic assumes.
STAGES = 3
MERGE = "warp merge"  # the key-split warps' partial O, max and sum (shared memory)
# Warp instructions a thread's 16-byte cp.async costs with its address arithmetic, from the kernel's SASS
# (cuobjdump -sass of decode.cu for sm_90a; experiments/results/h200/decode-fid/sass/): a K/V block's
# refill is 260 instructions for 16 copies at d128 and 252 at d64 (row, bounds check, page and 64-bit
# offsets per copy), a Q copy 289 per four (its head and query by division by the runtime Nq). The page
# numbers of the next block cost 2 per copy row when dense (a move and a branch) and 11 when paged (the
# bounds check, the table's address and its load). One warp per scheduler issues them with nothing to hide
# behind, so they lengthen every step of a lone block.
KV_COPY_ISSUE = 16
Q_COPY_ISSUE = 72
PAGE_FETCH_ISSUE = {False: 2, True: 11}
# The 128-byte lines of SASS a block's warps run in each stretch of our kernel (ir.Code; the SM fetches those
# it does not keep): the distinct lines of the instructions Nsight Compute saw executed
# (experiments/results/h200/decode-fid/ncu/, d128 fwd, -sass.txt: SASS rows before 3360, 3360-5096 and
# after): the prologue 28; a step 106 (the launch of one K/V block), and 192 with the refill and page fetch
# (16 blocks); the epilogue 89 (87 with the split's partial stores). The d64 kernel is within 3% in size.
CODE_LINES = {"prologue": 28, "step": 106, "refill": 192 - 106, "epilogue": 89}
CODE_LINE_BYTES = 128
# Taken branches per warp in each stretch, and of them those landing beyond the next line (back, or over a
# line), from the same runs' executed counts per SASS instruction (a branch is taken as often as it runs less
# the times its next instruction runs by falling through; 16 K/V blocks): the prologue 39, 19 far (its Q and
# two K/V blocks' copies, each copy row's bounds check a branch over the copy); a step 2, both far (the back
# edge and the exit test); a refill 8, 2 far (its copy rows' bounds checks); the epilogue none.
CODE_BRANCHES = {"prologue": (39, 19), "step": (2, 2), "refill": (8, 2), "epilogue": (0, 0)}


def code(d: int, stretch: str) -> Code:
    return Code(f"decode d{d} {stretch}", CODE_LINES[stretch] * CODE_LINE_BYTES, *CODE_BRANCHES[stretch])


def check_problem(p: Problem) -> None:
    if p.seqlen_q > MAX_QUERIES:
        raise FlashsimError(f"decode takes 1 to {MAX_QUERIES} new queries per sequence, got {p.seqlen_q} "
                            f"(prefill with v2 or v3)")


def check_tiling(p: Problem, t: Tiling) -> None:
    if t.stages < 2:
        raise FlashsimError(f"decode's K/V ring needs at least 2 stages (one landing while one is multiplied), "
                            f"got {t.stages}")


def packed_rows(p: Problem, b: int = 0) -> int:
    return p.q_len(b) * p.group


def kernel_block_n(d: int) -> int:
    """Keys per K/V block of our kernel: a (K, V) pair of 32 KiB at d64 and d128."""
    return 128 if d <= 64 else 64


def kernel_tiling(d: int) -> Tiling:
    """The tiles our decode kernel is built with for head dim d (kernels/decode.py takes them from here)."""
    return Tiling(BLOCK_M, kernel_block_n(d), WARPS, STAGES)


def math_shape(rows_left: int, t: Tiling) -> tuple[int, int, str]:
    """(rows multiplied, warps doing the math, how they divide it) of a tile with rows_left packed rows from
    its first on, as the kernel runs it: each warp owns block_m / warps rows and a warp whose rows are all
    padding skips the math; a tile whose rows fit one warp's (a one-query GQA group of up to 16) instead gives
    every warp those rows and its own share of each block's keys ('n'), merging the warps at the end."""
    per_warp = t.block_m // t.warps
    if t.warps > 1 and rows_left <= per_warp:
        return per_warp, t.warps, "n"
    active = cdiv(min(t.block_m, rows_left), per_warp)
    return per_warp * active, active, "m"


def mapper(p: Problem, profile) -> Tiling:
    t = kernel_tiling(p.headdim)
    return Tiling(t.block_m, t.block_n, t.warps, t.stages, splits=auto(p, t, profile)) if profile else t


def auto(p: Problem, t: Tiling, profile) -> int:
    """FA2's split heuristic over the packed tiles (batch x kv_heads x row blocks)."""
    return auto_splits(p, cdiv(packed_rows(p), t.block_m), profile, kv_heads_only=True)


def smem_bytes(p: Problem, t: Tiling) -> int:
    """The Q tile and the ring's `stages` (K, V) pairs (decode.cu, Config::kSmemBytes)."""
    return (t.block_m + 2 * t.stages * t.block_n) * p.headdim * p.elem_bytes


def registers(p: Problem, t: Tiling) -> int:
    return REG_OVERHEAD + (t.block_m * t.block_n + t.block_m * p.headdim) // t.threads


def segments(nq: int, row0: int, rows: int):
    """(head in group, first query, query count, tile row) of the head-major packed rows [row0, row0 + rows)."""
    r, end = row0, row0 + rows
    while r < end:
        hh, q = divmod(r, nq)
        n = min(nq - q, end - r)
        yield hh, q, n, r - row0
        r += n


def query_range(nq: int, row0: int, rows: int) -> tuple[int, int]:
    """Smallest and largest query index among packed rows [row0, row0 + rows)."""
    if rows >= nq:
        return 0, nq - 1
    qs = [(row0 + r) % nq for r in range(rows)]
    return min(qs), max(qs)


def visible_blocks(ps: Problem, q_last: int, bn: int) -> int:
    """K/V blocks the tile visits: all, or (causal) up to the last key its last query sees."""
    if not ps.causal:
        return cdiv(ps.seqlen_k, bn)
    return cdiv(min(ps.seqlen_k, max(0, q_last + causal_shift(ps) + 1)), bn)


def copy_issue(p: Problem, t: Tiling) -> tuple[float, float]:
    """(one K/V block's, the Q tile's) warp instructions per warp: each thread copies 16-byte chunks of
    block_n (block_m) rows, a row's d / 8 chunks spread over the threads (decode.cu, KVCopy)."""
    chunks = p.headdim * p.elem_bytes // 16
    passes = t.block_n * chunks // t.threads
    kv = 2 * passes * KV_COPY_ISSUE + passes * PAGE_FETCH_ISSUE[bool(p.page_size)]
    return kv, t.block_m * chunks // t.threads * Q_COPY_ISSUE


def build(p: Problem, t: Tiling) -> Schedule:
    check_problem(p)
    bm, bn, d, w, splits, g, stages = (t.block_m, t.block_n, p.headdim, t.warps, t.splits, p.group,
                                       t.stages)
    dt = gemm_dtype(p)
    table = paged.page_table(p) if p.page_size else None
    kv_issue, q_issue = copy_issue(p, t)

    def kv_loads(ps, tensor, buffer, b, hk, row0, barrier):
        if table is None:
            yield Load(row_tile(ps, tensor, b, hk * g, row0, bn, kv=True), buffer, SMEM, "cp.async", barrier)
            return
        for tile, at in paged.kv_pieces(p, table, tensor, b, hk, row0, bn):
            yield Load(tile, buffer, SMEM, "cp.async", barrier, dst_row=at)

    def program(cta):
        b, hk, i, s = cta
        ps = p.sequence(b)
        nq, nk = ps.seqlen_q, ps.seqlen_k
        row0 = i * bm
        rows = min(bm, nq * g - row0)
        q_first, q_last = query_range(nq, row0, rows)
        first, n = split_range(cdiv(nk, bn), visible_blocks(ps, q_last, bn), splits, s)
        mr, mw, split = math_shape(nq * g - row0, t)
        through = []  # K/V copies issued up to and including block j: block j has landed at that count

        def copy_block(jj):
            """Block jj's K and V into ring stage jj % stages: one cp.async group, as the kernel commits it."""
            col0, stage = (first + jj) * bn, jj % stages
            loads = [*kv_loads(ps, "K", f"sK{stage}", b, hk, col0, "kv"),
                     *kv_loads(ps, "V", f"sV{stage}", b, hk, col0, "kv")]
            through.append((through[-1] if through else 0) + len(loads))
            issued = [replace(ld, issue=kv_issue / len(loads), warps=w) for ld in loads]
            # a refill in the loop runs code of its own (the prologue's copies are the prologue's)
            return [code(d, "refill"), *issued] if jj >= stages - 1 else issued

        yield code(d, "prologue")
        if n or splits == 1:
            if table is not None and n:
                yield Load(paged.table_tile(p, b, first * bn, n * bn), "pages", RMEM)
            loads = 0
            q_loads = len(list(segments(nq, row0, rows)))
            for hh, q0, cnt, at in segments(nq, row0, rows):
                yield Load(row_tile(ps, "Q", b, hk * g + hh, q0, cnt), "sQ", SMEM, "cp.async", "q",
                           dst_row=at or None, issue=q_issue / q_loads, warps=w)
                loads += 1
            for jj in range(min(stages - 1, n)):  # the prologue: the ring's first stages - 1 blocks
                yield from copy_block(jj)
            yield Wait("q", loads)
            yield SyncThreads()
        yield Fill("acc", bm, d, 0.0)
        yield Fill("m", bm, 1, -math.inf)
        yield Fill("l", bm, 1, 0.0)
        for jj in range(n):
            col0, stage = (first + jj) * bn, jj % stages
            yield Wait("kv", through[jj])
            yield SyncThreads()  # block jj landed for every warp; all are done with block jj - 1's stage
            yield code(d, "step")
            if jj + stages - 1 < n:  # refill that stage, stages - 1 blocks ahead of the math
                yield from copy_block(jj + stages - 1)
            yield Gemm("S", "sQ", f"sK{stage}", mr, bn, d, SMEM, SMEM, "mma_sync", dt, mw, trans_b=True, split=split)
            mask = Mask(row0, col0, nq, nk, ps.causal, ps.causal_align, packed=nq)
            yield OnlineSoftmax("S", "P", "m", "l", mr, bn, p.scale, mask if mask.needed(rows, bn) else None,
                                dt, acc="acc", acc_cols=d, warps=mw)
            yield Gemm("acc", "P", f"sV{stage}", mr, d, bn, RMEM, SMEM, "mma_sync", dt, mw, accumulate=True,
                       split=split)
        yield code(d, "epilogue")
        if split == "n":  # each warp's running max, sum and O through shared memory to warp 0
            yield SyncThreads()
            yield StoreShared("acc", "merge", bm, d + 2, F32, MERGE)
            yield SyncThreads()
        # after the merge warp 0 alone goes on (decode.cu: the other warps return): it normalises and writes
        yield Normalize("acc", "m", "l", "lse", mr, d, 1 if split == "n" else mw)
        for hh, q0, cnt, at in segments(nq, row0, rows):
            h = hk * g + hh
            if splits > 1:
                yield from partial_stores(p, b, h, q0, cnt, s, "acc", src_row=at)
            else:
                yield Store("acc", row_tile(ps, "O", b, h, q0, cnt, elem_bytes=out_bytes(p)), RMEM, src_row=at)
                yield Store("lse", GTile("LSE", b, h, q0, cnt, 0, 1, F32), RMEM, src_row=at)

    ctas = [(b, hk, i, s) for b in range(p.batch) for hk in range(p.kv_heads) for s in range(splits)
            for i in range(cdiv(packed_rows(p, b), bm))]
    kernel = Kernel("flash_fwd_splitkv_decode" if splits > 1 else "flash_fwd_decode", ctas,
                    (Role("warps", w, program),), smem_bytes(p, t), registers(p, t),
                    classes=lambda c: (c[2], c[3], p.q_len(c[0]), p.k_len(c[0])),
                    kv_head_of=lambda c: (c[0], c[1]))
    shapes = {**(workspace_shapes(p, splits) if splits > 1 else {}), **(paged.shapes(p) if table else {})}
    kernels = (kernel, combine_kernel(p, splits, ours=True)) if splits > 1 else (kernel,)
    return Schedule("decode", p, t, kernels, shapes=shapes)


def sequence_nest(x: cf.Dims) -> cf.KernelNest:
    """The attention kernel of one sequence (all of the batch when every sequence has the same length)."""
    p, B, Hkv, H, Nq, d, e, eo, eg, w, bm, bn = (x.p, x.B, x.Hkv, x.H, x.Nq, x.d, x.e, x.eo, x.eg, x.w, x.bm,
                                                  x.bn)
    S, g = x.t.splits, p.group
    R = Nq * g
    tr = cdiv(R, bm)
    G = B * Hkv  # tiles run per K/V head
    blocks = []  # (rows, first query, first kv block, kv blocks) per (row block, split)
    for i in range(tr):
        rows = min(bm, R - i * bm)
        q_first, q_last = query_range(Nq, i * bm, rows)
        vis = visible_blocks(p, q_last, bn)
        for s in range(S):
            first, n = split_range(x.Tc, vis, S, s)
            blocks.append((rows, q_first, first, n))
    shapes = [math_shape(R - i * bm, x.t) for i in range(tr) for _ in range(S)]  # per entry of blocks
    n_all = [n for *_, n in blocks]
    P = G * sum(n_all)
    kv = G * sum(x.kv_rows_from(f, n) for _, _, f, n in blocks) * d * e
    loaded = [(r, f, n) for r, _, f, n in blocks if n or S == 1]
    q_bytes = G * sum(r for r, _, _ in loaded) * d * e
    q_loads = G * sum(len(list(segments(Nq, i * bm, min(bm, R - i * bm)))) for i in range(tr)
                      for s in range(S) if blocks[i * S + s][3] or S == 1)
    rk = min(bn, x.Nk)

    def per_step(f) -> int:
        """Sum of f(math rows, warps, split) x K/V blocks over the tiles."""
        return G * sum(f(*shape) * n for shape, (*_, n) in zip(shapes, blocks, strict=True))

    def reads(split: str, warps: int, first: bool) -> int:  # operand_reads: 'm' reads B per warp, 'n' A
        return warps if (split == "n") == first else 1

    mr0, mw0, split0 = shapes[0]
    soft = 4 * mr0 * bn + mr0 * (2 + d)
    masked_alu = G * sum(x.masked_from(qf, f, n) * mr * bn
                         for (mr, _, _), (_, qf, f, n) in zip(shapes, blocks, strict=True))
    merging = G * sum(1 for _, _, split in shapes if split == "n")
    merge = [cf.Step("key-split warps: O, max and sum to shared memory for warp 0", "rf->smem", merging,
                     [cf.Effect("smem_write", MERGE, bm * (d + 2) * F32, merging * bm * (d + 2) * F32)])]
    table = []
    if p.page_size:
        entries = G * sum(paged.table_entries(p, f * bn, n * bn, x.Nk) for _, _, f, n in blocks if n)
        table = [cf.load("load page-table entries of the split", paged.TABLE, cdiv(rk * max(n_all), p.page_size) * 4,
                         entries * paged.TABLE_BYTES, G * sum(1 for *_, n in blocks if n), smem=False)]
    per_tile = cdiv(bn, p.page_size) if p.page_size and p.page_size < bn else 1
    how = f" ({per_tile} page copies)" if per_tile > 1 else " (one page)" if p.page_size else ""
    if S > 1:
        out = [cf.store("store O_s (fp32 workspace), per head", O_PARTS, min(bm, R) * d * F32, S * B * H * Nq * d * F32,
                        G * tr * S),
               cf.store("store LSE_s", LSE_PARTS, min(bm, R) * F32, S * B * H * Nq * F32, G * tr * S)]
    else:
        out = [cf.store("store O, per head", "O", min(bm, R) * d * eo, B * H * Nq * d * eo, G * tr),
               cf.store("store LSE", "LSE", min(bm, R) * F32, B * H * Nq * F32, G * tr)]
    body = [
        *table,
        cf.load(f"load Q of the {g} heads (rows Nq x group = {R})", "Q", min(bm, R) * d * e, q_bytes, q_loads),
        cf.Loop(f"j in 0..{max(n_all)}  kv-block of the split", max(n_all), P, [
            cf.load(f"load K_j{how}", "K", rk * d * e, kv, P),
            cf.load(f"load V_j{how}", "V", rk * d * e, kv, P),
            cf.Step(f"S = Q K_j^T  mma_sync on the group's rows ({mr0} rows, {mw0} warps split {split0})",
                    "smem->rf", P, [
                        cf.Effect("flops", f"mma_sync/{x.dt}", 2 * mr0 * bn * d,
                                  per_step(lambda m, w_, s_: 2 * m * bn * d)),
                        cf.Effect("smem_read", "Q", mr0 * d * eg * reads(split0, mw0, True),
                                  per_step(lambda m, w_, s_: m * d * eg * reads(s_, w_, True))),
                        cf.Effect("smem_read", "K", bn * d * eg * reads(split0, mw0, False),
                                  per_step(lambda m, w_, s_: bn * d * eg * reads(s_, w_, False)))]),
            cf.Step("online softmax, O *= e^(m_old - m)", "rf", P, [
                cf.Effect("exps", "", mr0 * bn + mr0, per_step(lambda m, w_, s_: m * bn + m)),
                cf.Effect("alu_flops", "", soft, per_step(lambda m, w_, s_: 4 * m * bn + m * (2 + d))
                          + cf.MASK_OPS_PER_ELEMENT * masked_alu)]),
            cf.Step("O += P V_j", "smem->rf", P, [
                cf.Effect("flops", f"mma_sync/{x.dt}", 2 * mr0 * d * bn, per_step(lambda m, w_, s_: 2 * m * d * bn)),
                cf.Effect("smem_read", "V", bn * d * eg * reads(split0, mw0, False),
                          per_step(lambda m, w_, s_: bn * d * eg * reads(s_, w_, False)))]),
        ], note="causal: to the last query's diagonal" if p.causal else ""),
        *(merge if merging else []),
        cf.Step("O /= l, LSE = m + log l", "rf", G * tr * S, [
            cf.Effect("exps", "", 2 * mr0, G * S * sum(2 * shapes[i * S][0] for i in range(tr))),
            cf.Effect("alu_flops", "", mr0 * d + mr0, G * S * sum(shapes[i * S][0] * (d + 1) for i in range(tr)))]),
        *out,
    ]
    grid = [cf.Loop(f"i in 0..{tr}  packed row block", tr, G * tr, [
        cf.Loop(f"s in 0..{S}  kv split", S, G * tr * S, body, grid=True)], grid=True)]
    name = "flash_fwd_splitkv_decode" if S > 1 else "flash_fwd_decode"
    return cf.KernelNest(name, G * tr * S, 32 * w, [cf.bh_loop(x, grid, heads=Hkv, var="hk")])


def loop_nest(x: cf.Dims) -> list[cf.KernelNest]:
    nests = [cf.per_sequence(x, sequence_nest)]
    return nests + ([combine_nest(x.p, x.t.splits)] if x.t.splits > 1 else [])


def hbm_tensors(p: Problem, t: Tiling) -> dict[str, int]:
    table = {paged.TABLE: paged.pool_pages(p) * paged.TABLE_BYTES} if p.page_size else {}
    return {**lse_tensor(p), **workspace_bytes(p, t.splits), **table}


ALGORITHM = Algorithm(
    name="decode",
    summary="Decode: the query heads of a K/V head packed in one tile, split-KV (Flash-Decoding), paged cache",
    build=build,
    mapper=mapper,
    smem_bytes=smem_bytes,
    registers=registers,
    loop_nest=loop_nest,
    hbm_tensors=hbm_tensors,
    layouts=("varlen", "paged"),
    max_seqlen_q=MAX_QUERIES,
    auto_splits=auto,
    check_tiling=check_tiling,
    why="The K/V cache is read once per K/V head: the query heads that share it are rows of one tile, and "
        "its blocks are split over thread blocks so that batch x kv_heads tiles fill the GPU.",
    dtypes=("bf16", "fp16"),
)
