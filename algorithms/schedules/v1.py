"""FlashAttention V1 (Dao et al. 2022, Algorithm 1): one thread block per (batch, head).

Outer loop over K/V blocks j (loaded to SRAM once); inner loop over Q blocks i, each step reading Q_i, O_i,
l_i, m_i from global memory and writing O_i, l_i, m_i back. Warps split the K/V block ("split-K"): each
computes S for a slice of keys, so row statistics and the partial P V products meet in shared memory.
O_i lives in an fp32 workspace between steps and is written in the input dtype by its last step.
Fully masked (causal) blocks are skipped. With tiling.splits > 1 each (batch, head) gets that many thread
blocks, block s taking Q blocks s, s + splits, ... (all of them still stream every K/V block): more blocks
in flight, the same loop order.
"""

from __future__ import annotations

import math
from dataclasses import replace

from .. import closed_form as cf
from ..footprint import REG_OVERHEAD
from ..ir import FP32_BYTES as F32
from ..ir import (
    RMEM,
    SMEM,
    Fill,
    Gemm,
    Kernel,
    Load,
    OnlineSoftmax,
    RescaleMerge,
    Role,
    Schedule,
    Store,
    SyncThreads,
    WarpReduce,
)
from ..mapping import Tiling
from ..parts import cdiv, gemm_dtype, kv_block_count, out_bytes, q_rows, row_tile, stat_tile, tile_mask
from ..problem import Problem
from ..record import Algorithm

# FA1 splits a (batch, head)'s query blocks over at most this many thread blocks.
FA1_MAX_SPLITS = 30
# ... and takes the fewest splits whose wave efficiency is within this fraction of the best.
FA1_SPLIT_EFFICIENCY = 0.95


def sram_elements(profile, problem: Problem) -> int:
    """M of the V1 paper: the on-chip memory one thread block may use, in elements of the input dtype."""
    return profile.smem_per_block_max_bytes // problem.elem_bytes


def v1_blocks(m_elements: int, d: int) -> tuple[int, int]:
    """Algorithm 1 of the V1 paper: Bc = M / 4d so Q_i, K_j, V_j and O_i share M; Br = min(Bc, d).

    The paper writes ceil(M / 4d); we round down so the four tiles never exceed M."""
    bc = max(1, m_elements // (4 * d))
    return min(bc, d), bc


def fa1_block_n(d: int) -> int:
    """Keys per K/V block of the released FA1 forward kernels for long key sequences: 256 at d <= 64, else 128."""
    return 256 if d <= 64 else 128


def fa1_tiling(d: int, seqlen_k: int) -> Tiling:
    """The released FA1 forward kernels' tiles: 16 query rows per inner step, a K/V block of fa1_block_n keys
    (128 when the whole key sequence fits in 128), 4 warps splitting the keys. (Algorithm 1's own
    Bc = M / 4d, Br = min(Bc, d) is `paper_tiling`.)"""
    return Tiling(16, fa1_block_n(d) if seqlen_k > 128 else 128, 4, 1)


def paper_tiling(problem: Problem, profile) -> Tiling:
    """Algorithm 1's blocks from the SRAM size, rounded down to what mma.sync can tile (footprint.py: Br a
    multiple of 16, Bc of 16 per warp); a real SM also holds S and the O slice in registers, so halve Bc
    (then Br) until the register budget takes them."""
    br, bc = v1_blocks(sram_elements(profile, problem), problem.headdim)
    bc = max(64, bc - bc % 64)
    br = max(16, br - br % 16)
    while registers(problem, Tiling(br, bc, 4, 1)) > profile.registers_per_thread_max:
        if bc > max(br, 64) or br <= 16:
            bc = max(64, bc // 2 - bc // 2 % 64)
        else:
            br //= 2
    return Tiling(br, bc, 4, 1)


def fa1_splits(problem: Problem, t: Tiling, profile) -> int:
    """Thread blocks per (batch, head) as the released FA1 forward picks them (fa1_split_count), with the
    chip's block slots from the profile's occupancy limits."""
    slots = profile.sm_count * max(1, min(profile.occupancy_limits(
        t.threads, registers(problem, t), smem_bytes(problem, t)).values()))
    return fa1_split_count(problem.batch * problem.heads, -(-problem.seqlen_q // t.block_m), slots)


def fa1_split_count(heads: int, q_blocks: int, slots: int) -> int:
    """FA1's rule: the wave efficiency of s splits is (heads s / slots) / ceil(heads s / slots) over the
    chip's block slots; take the fewest splits (at most FA1_MAX_SPLITS and the Q blocks) within 95% of the
    best. More blocks fill the SMs, but each re-reads all of K and V."""
    most = max(1, min(FA1_MAX_SPLITS, q_blocks))

    def efficiency(s: int) -> float:
        waves = heads * s / slots
        return waves / -(-heads * s // slots)

    best = max(efficiency(s) for s in range(1, most + 1))
    return next(s for s in range(1, most + 1) if efficiency(s) >= FA1_SPLIT_EFFICIENCY * best)


def mapper(p: Problem, profile) -> Tiling:
    """The released FA1 kernel's tiles and split count (no profile: one split)."""
    t = fa1_tiling(p.headdim, p.seqlen_k)
    return replace(t, splits=fa1_splits(p, t, profile)) if profile is not None else t


def smem_bytes(p: Problem, t: Tiling) -> int:
    """Q_i, K_j, V_j, and where the split-K warps meet: their partial P V products in fp32, 32 columns of O_i
    at a time (rows padded by 8 floats against bank conflicts), and their row max and sum."""
    d = p.headdim
    chunk = min(32, d) + 8
    return (t.block_m + 2 * t.block_n) * d * p.elem_bytes + t.warps * t.block_m * (chunk + 2) * 4 + t.block_m * 8


def registers(p: Problem, t: Tiling) -> int:
    """Each thread holds block_m * block_n / threads of S and block_m * d / threads of O (split-K reduces its
    partial O through shared memory in slices of that size), plus a fixed overhead."""
    return REG_OVERHEAD + (t.block_m * t.block_n + t.block_m * p.headdim) // t.threads


def build(p: Problem, t: Tiling) -> Schedule:
    br, bc, d, w = t.block_m, t.block_n, p.headdim, t.warps
    dt = gemm_dtype(p)
    tr, tc = cdiv(p.seqlen_q, br), cdiv(p.seqlen_k, bc)
    visits = [kv_block_count(p, i * br, br, bc) for i in range(tr)]  # K/V blocks each Q block sees

    def program(cta):
        b, h, split = cta
        mine = range(split, tr, t.splits)
        for j in range(tc):
            yield Load(row_tile(p, "K", b, h, j * bc, bc, kv=True), "sK", SMEM)
            yield Load(row_tile(p, "V", b, h, j * bc, bc, kv=True), "sV", SMEM)
            yield SyncThreads()
            for i in mine:
                if j >= visits[i]:
                    continue  # causal: this K/V block is fully masked for Q_i
                row0 = i * br
                last = j == visits[i] - 1
                yield Load(row_tile(p, "Q", b, h, row0, br), "sQ", SMEM)
                if j == 0:
                    yield Fill("o", br, d, 0.0)
                    yield Fill("m", br, 1, -math.inf)
                    yield Fill("l", br, 1, 0.0)
                else:
                    yield Load(row_tile(p, "Oacc", b, h, row0, br, elem_bytes=4), "o", RMEM)
                    yield Load(stat_tile(p, "M", b, h, row0, br), "m", RMEM)
                    yield Load(stat_tile(p, "L", b, h, row0, br), "l", RMEM)
                yield Gemm("S", "sQ", "sK", br, bc, d, SMEM, SMEM, "mma_sync", dt, w, trans_b=True, split="n")
                yield OnlineSoftmax("S", "P", "mt", "lt", br, bc, p.scale, tile_mask(p, row0, j * bc, br, bc),
                                    dt, mode="local", cross_warp=w, warps=w)
                yield Gemm("PVw", "P", "sV", br, d, bc, RMEM, SMEM, "mma_sync", dt, w, split="k")
                yield WarpReduce("PV", "PVw", br, d, w, w)
                yield RescaleMerge("o", "PV", "m", "l", "mt", "lt", br, d, w)
                if last:
                    yield Store("o", row_tile(p, "O", b, h, row0, br, elem_bytes=out_bytes(p)), RMEM)
                else:
                    yield Store("o", row_tile(p, "Oacc", b, h, row0, br, elem_bytes=4), RMEM)
                    yield Store("m", stat_tile(p, "M", b, h, row0, br), RMEM)
                    yield Store("l", stat_tile(p, "L", b, h, row0, br), RMEM)
                yield SyncThreads()
        for i in mine:
            if not visits[i]:  # causal with seqlen_q > seqlen_k: rows that see no key output zeros
                yield Fill("o", br, d, 0.0)
                yield Store("o", row_tile(p, "O", b, h, i * br, br, elem_bytes=out_bytes(p)), RMEM)

    ctas = [(b, h, s) for b in range(p.batch) for h in range(p.heads) for s in range(min(t.splits, tr))]
    kernel = Kernel("flash_fwd_v1", ctas, (Role("warps", w, program),), smem_bytes(p, t),
                    registers(p, t), classes=lambda c: (c[2],))
    return Schedule("v1", p, t, (kernel,))


def loop_nest(x: cf.Dims) -> list[cf.KernelNest]:
    BH, Nk, d, e, eo, eg, w, br, bc = x.BH, x.Nk, x.d, x.e, x.eo, x.eg, x.w, x.bm, x.bn
    tr, tc = x.Tr, x.Tc
    n = [x.visible(i) for i in range(tr)]
    pairs = sum(n)  # (j, i) steps one thread block runs
    q_rows = sum(n[i] * x.rows(i) for i in range(tr))  # Q_i is reloaded at every visited j
    mid = sum(max(0, n[i] - 1) for i in range(tr))  # steps that are neither a row block's first nor last
    mid_rows = sum(max(0, n[i] - 1) * x.rows(i) for i in range(tr))
    seen = [i for i in range(tr) if n[i]]
    unseen = [i for i in range(tr) if not n[i]]
    masked = sum(x.masked(i * br, n[i]) for i in range(tr))
    P = BH * pairs
    rq, rk = min(br, x.Nq), min(bc, Nk)

    inner = [
        cf.load("load Q_i", "Q", rq * d * e, BH * q_rows * d * e, P),
    ]
    if mid:
        inner += [
            cf.when("j > 0", cf.load("load O_i fp32 partial", "Oacc", rq * d * F32, BH * mid_rows * d * F32, BH * mid,
                                 smem=False)),
            cf.when("j > 0", cf.load("load m_i", "M", rq * F32, BH * mid_rows * F32, BH * mid, smem=False)),
            cf.when("j > 0", cf.load("load l_i", "L", rq * F32, BH * mid_rows * F32, BH * mid, smem=False)),
        ]
    # one warp alone keeps its row statistics in registers
    stats = (cf.SOFTMAX_STAT_COUNT * w * br * F32, cf.SOFTMAX_STAT_COUNT * w * w * br * F32) if w > 1 else (0, 0)
    inner += [
        cf.gemm("S = Q_i K_j^T  mma_sync, split keys", "mma_sync", x.dt, br, bc, d, P,
              ("Q", w * br * d * eg), ("K", bc * d * eg)),
        cf.work("local softmax (stats across warps)", P, br * bc,
              4 * br * bc + 2 * br, (4 * br * bc + 2 * br) * P + cf.MASK_OPS_PER_ELEMENT * BH * masked * br * bc,
              (cf.SOFTMAX_STATS, *stats)),
        cf.gemm("PV = P V_j  split keys", "mma_sync", x.dt, br, d, bc, P, None, ("V", bc * d * eg)),
        cf.work(f"sum the {w} warps' partial PV", P, 0, 0, smem=(cf.WARP_REDUCE, w * br * d * F32, w * br * d * F32)),
        cf.work("merge PV, m~, l~ into O_i, m_i, l_i", P, 2 * br, 4 * br * d + 6 * br),
    ]
    if mid:
        inner += [
            cf.when("j < last", cf.store("store O_i fp32 partial", "Oacc", rq * d * F32, BH * mid_rows * d * F32,
                                     BH * mid)),
            cf.when("j < last", cf.store("store m_i", "M", rq * F32, BH * mid_rows * F32, BH * mid)),
            cf.when("j < last", cf.store("store l_i", "L", rq * F32, BH * mid_rows * F32, BH * mid)),
        ]
    inner.append(cf.when("j = last", cf.store("store O_i", "O", rq * d * eo, BH * sum(x.rows(i) for i in seen) * d * eo,
                                          BH * len(seen))))
    note = "causal: skips masked blocks" if x.p.causal else ""
    sp = min(x.t.splits, tr)  # thread blocks per (b, h); each streams all of K and V
    q_loop = f"i in 0..{tr}  q-block" if sp == 1 else f"i in split..{tr} step {sp}  q-block"
    body = [
        cf.Loop(f"j in 0..{tc}  kv-block", tc, BH * sp * tc, [
            cf.load("load K_j", "K", rk * d * e, BH * sp * Nk * d * e, BH * sp * tc),
            cf.load("load V_j", "V", rk * d * e, BH * sp * Nk * d * e, BH * sp * tc),
            cf.Loop(q_loop, cf.cdiv(tr, sp), P, inner, note=note),
        ]),
    ]
    if sp > 1:
        body = [cf.Loop(f"split in 0..{sp}", sp, BH * sp, body, grid=True)]
    if unseen:
        body.append(cf.Loop(f"i in 0..{len(unseen)}  q-blocks that see no key", len(unseen), BH * len(unseen), [
            cf.store("store O_i = 0", "O", rq * d * eo, BH * sum(x.rows(i) for i in unseen) * d * eo,
                   BH * len(unseen))]))
    return [cf.KernelNest("flash_fwd_v1", BH * sp, 32 * w, [cf.bh_loop(x, body)])]


def hbm_tensors(p: Problem, t: Tiling) -> dict[str, int]:
    """O in an fp32 workspace between outer steps, with the running row max m and sum l (fp32)."""
    rows = q_rows(p)
    return {"Oacc": rows * p.headdim * F32, "M": rows * F32, "L": rows * F32}


ALGORITHM = Algorithm(
    name="v1",
    summary="FlashAttention (Algorithm 1): outer loop over K/V blocks, Q_i and O_i through global memory each step",
    build=build,
    mapper=mapper,
    smem_bytes=smem_bytes,
    registers=registers,
    loop_nest=loop_nest,
    hbm_tensors=hbm_tensors,
    why="K_j, V_j cross global memory once; Q_i and the fp32 O_i, m_i, l_i once per kv-block: Tc = {tc} "
        "passes. Algorithm 1 sets Bc = M / 4d, so Tc = 4 N d / M and the bytes are Theta(N^2 d^2 / M).",
    paper_tiling=paper_tiling,
    auto_splits=fa1_splits,
    warp_split="n",
    kv_outer_loop=True,
    probe_outer_steps=True,
)
