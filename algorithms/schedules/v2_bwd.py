"""FlashAttention-2's backward (Dao 2023, Algorithm 2), as the public kernels launch it:

    bwd_dot_do_o   per Q block: D = rowsum(dO * O) (fp32), and the fp32 dQ accumulator zeroed
    flash_bwd_v2   one thread block per K/V block j (grid: key blocks fastest, then batch, then heads): K_j and
                   V_j stay in shared memory, dK_j and dV_j accumulate in registers; for each Q block i that
                   sees block j (causal: from the diagonal down):
                       S = Q_i K_j^T; P = exp(scale S - LSE_i)     (recomputed from the saved logsumexp)
                       dV_j += P^T dO_i; dP = dO_i V_j^T; dS = scale P (dP - D_i)
                       dK_j += dS^T Q_i; dQ_i += dS K_j            (fp32 red.global.add into dQaccum)
                   Q_i is double-buffered (cp.async), dO_i single (the kernels' shared-memory layout).
    bwd_convert_dq dQ = dQaccum in the input dtype.

Option dq='pass': no atomics; a second kernel per Q block recomputes S, P, dP and dS and accumulates dQ_i
in registers over the key blocks (FA1's choice for the deterministic path), and nothing to convert.
GQA: the query heads of a group add their dK_j, dV_j into fp32 accumulators of their K/V head (zeroed first,
converted last). FA2 itself writes per-query-head dK, dV and sums them in PyTorch; FA3 accumulates as here.
"""

from __future__ import annotations

from flashsim.errors import FlashsimError

from .. import backward as bw
from .. import closed_form as cf
from ..counting import OPERAND_BYTES
from ..footprint import REG_OVERHEAD
from ..ir import FP32_BYTES as F32
from ..ir import (
    RMEM,
    SMEM,
    AtomicAdd,
    Fill,
    Gemm,
    Kernel,
    Load,
    LseExp,
    Role,
    Schedule,
    SoftmaxGrad,
    Store,
    StoreShared,
    SyncThreads,
    Wait,
)
from ..mapping import Tiling
from ..parts import cdiv, gemm_dtype, kv_block_count, row_tile, stat_tile, tile_mask
from ..problem import Problem
from ..record import Algorithm
from .backward_code import backward_code

DQ_MODES = ("atomic", "pass")


def _fa2_bwd_tile(d: int, profile) -> tuple[int, int, int]:
    """(kBlockM, kBlockN, stages) of the public FA2 backward per head dim (csrc/flash_attn/src/
    flash_bwd_launch_template.h, run_mha_bwd_hdim*; all with 8 warps). The thresholds are the kernels' shared
    memory, which smem_bytes below reproduces: 104 KB (d32), 144 KB (d64, d128), 116 KB (d96), 136 KB (d192),
    176 KB (d256). stages 1: the kernels' No_double_buffer variant (Q single-buffered)."""
    big = profile.smem_per_block_max_bytes >= 144 * 1024
    if d <= 32:
        return 128, 128, 2
    if d <= 64:
        return (128, 128, 2) if big else (64, 128, 2)
    if d <= 96:
        return 64, 128, 2
    if d <= 128:
        return (64, 128, 2) if big else (64, 64, 2)
    if d <= 192:
        return 64, 64, 2
    return (64, 64, 2) if profile.smem_per_block_max_bytes >= 176 * 1024 else (64, 64, 1)


# The kernels' warp layouts (AtomLayoutMSdP, AtomLayoutNdKV, AtomLayoutMdQ of Flash_bwd_kernel_traits, same
# source) by (d, kBlockM, kBlockN): warps along the rows of the S / dP, the dK / dV and the dQ products.
_FA2_BWD_LAYOUTS = {(32, 128, 128): (4, 4, 4), (64, 128, 128): (4, 4, 4), (64, 64, 128): (2, 4, 4),
                    (96, 64, 128): (2, 4, 4), (128, 64, 128): (2, 4, 2), (128, 64, 64): (4, 2, 2),
                    (192, 64, 64): (4, 2, 2), (256, 64, 64): (4, 2, 2)}


def warp_grids(d: int, t: Tiling) -> tuple[str, str, str]:
    """Warp grids 'RxC' of the S / dP, dK / dV and dQ GEMMs: the kernels' layout for their own tiles, else
    rows split in two (or one warp) and columns over the rest."""
    w = t.warps
    rows = _FA2_BWD_LAYOUTS.get((d, t.block_m, t.block_n), (min(2, w),) * 3)
    return tuple(f"{r}x{w // r}" if w % r == 0 else f"1x{w}" for r in rows)


def dp_before_p(t: Tiling) -> bool:
    """The kernel issues dP = dO V^T straight after S where its tiles are at most 64 x 128 (one long run of
    mma; at 128 x 128 ptxas would spill), else after P is stored."""
    return t.block_m * t.block_n <= 64 * 128


def _reads(grid: str) -> tuple[int, int]:
    """How many times a warp grid reads all of A and all of B (counting.operand_reads)."""
    r, c = map(int, grid.split("x"))
    return c, r


def mapper(p: Problem, profile) -> Tiling:
    bm, bn, stages = _fa2_bwd_tile(p.headdim, profile)
    return Tiling(bm, bn, 8, stages)


def smem_bytes(p: Problem, t: Tiling) -> int:
    """Q (double-buffered unless stages = 1), dO, K and V tiles, and P and dS staged for the dK/dV GEMMs."""
    q_bufs = 2 if t.stages >= 2 else 1
    return ((q_bufs + 1) * t.block_m * p.headdim + 2 * t.block_n * p.headdim + 2 * t.block_m * t.block_n) * p.elem_bytes


def registers(p: Problem, t: Tiling) -> int:
    """dK_j and dV_j accumulators and the S / dP tiles spread over the threads (dQ's partial reuses S's)."""
    return REG_OVERHEAD + (2 * t.block_n * p.headdim + 2 * t.block_m * t.block_n) // t.threads


def dk_store_chain(p: Problem, t: Tiling) -> int:
    """dK stores per thread in the epilogue (4-byte bf16 pairs of its accumulator fragments)."""
    return t.block_n * p.headdim // (2 * t.threads)


def dq_red_chain(t: Tiling, grid: str) -> int:
    """Groups of dQ reductions per thread and step: one per 8-row slice of its warp's dQ rows (the float2
    reductions of a row slice share one address register, which the next slice reuses)."""
    rows = int(grid.split("x")[0])
    return t.block_m // rows // 8


def check_options(dq: str) -> None:
    if dq not in DQ_MODES:
        raise FlashsimError(f"unknown dQ accumulation {dq!r}; choose one of {', '.join(DQ_MODES)}")


def build(p: Problem, t: Tiling, dq: str = "atomic", bookkeeping: bool = False) -> Schedule:
    """dq: 'atomic' (FA2's) or 'pass' (above). bookkeeping: the main kernel's stretches carry the compiler's
    bookkeeping instructions (backward_code.BOOKKEEPING; FA2's for the exp2f form, which only its kernel
    computes, else ours), which only the instruction-issue model charges."""
    check_options(dq)
    bm, bn, d, w = t.block_m, t.block_n, p.headdim, t.warps
    dt, g = gemm_dtype(p), p.group
    atomic = dq == "atomic"
    double_q = t.stages >= 2
    g_sdp, g_dkv, g_dq = warp_grids(d, t)
    dp_first = dp_before_p(t)
    code = backward_code("fa2" if t.exp2 == "exp2f" else "flashsim", d, bm, bn, w) \
        if bookkeeping and atomic else None

    def main(cta):
        b, h, j = cta
        col0 = j * bn
        hk = h // g
        if code:
            yield code["prologue"]
        yield Load(row_tile(p, "K", b, h, col0, bn, kv=True), "sK", SMEM, "cp.async", "kv")
        yield Load(row_tile(p, "V", b, h, col0, bn, kv=True), "sV", SMEM, "cp.async", "kv")
        yield Fill("dK", bn, d, 0.0)
        yield Fill("dV", bn, d, 0.0)
        blocks = list(bw.q_blocks(p, col0, bm))

        def load_q(n):
            yield Load(row_tile(p, "Q", b, h, blocks[n] * bm, bm), f"sQ{n % 2 if double_q else 0}", SMEM,
                       "cp.async", "q")

        if blocks:
            yield from load_q(0)
            yield Load(row_tile(p, "dO", b, h, blocks[0] * bm, bm), "sdO", SMEM, "cp.async", "do")
        yield Wait("kv", 2)
        for n, i in enumerate(blocks):
            row0 = i * bm
            sq = f"sQ{n % 2 if double_q else 0}"
            yield Wait("q", n + 1)
            yield Wait("do", n + 1)
            if code:
                yield code["loop"]
            yield SyncThreads()  # Q_i, dO_i landed; every warp is done with step i-1's Q buffer, P and dS
            if double_q and n + 1 < len(blocks):
                yield from load_q(n + 1)
            # the kernel reads LSE_i and D_i just before the barrier; here they follow it, as this interpreter's
            # barrier waits for every load in flight and the hardware's does not wait for register loads
            yield Load(stat_tile(p, "LSE", b, h, row0, bm), "lse", RMEM)
            yield Load(stat_tile(p, "D", b, h, row0, bm), "delta", RMEM)
            yield Gemm("S", sq, "sK", bm, bn, d, SMEM, SMEM, "mma_sync", dt, w, trans_b=True, split=g_sdp)
            if dp_first:
                yield Gemm("dP", "sdO", "sV", bm, bn, d, SMEM, SMEM, "mma_sync", dt, w, trans_b=True, split=g_sdp)
            yield LseExp("S", "P", "lse", bm, bn, p.scale, tile_mask(p, row0, col0, bm, bn), w, t.exp2)
            # P and dS go to shared memory: the dK / dV products read them transposed, across warps
            yield StoreShared("P", "sP", bm, bn, OPERAND_BYTES[dt], "P")
            if not dp_first:
                yield Gemm("dP", "sdO", "sV", bm, bn, d, SMEM, SMEM, "mma_sync", dt, w, trans_b=True, split=g_sdp)
            yield SoftmaxGrad("dS", "P", "dP", "delta", bm, bn, p.scale, w)
            yield StoreShared("dS", "sdS", bm, bn, OPERAND_BYTES[dt], "dS")
            yield SyncThreads()  # P and dS complete
            yield Gemm("dV", "sP", "sdO", bn, d, bm, SMEM, SMEM, "mma_sync", dt, w, accumulate=True, trans_a=True,
                       split=g_dkv)
            yield SyncThreads()  # every warp is done with dO_i
            if n + 1 < len(blocks):
                yield Load(row_tile(p, "dO", b, h, blocks[n + 1] * bm, bm), "sdO", SMEM, "cp.async", "do")
            yield Gemm("dK", "sdS", sq, bn, d, bm, SMEM, SMEM, "mma_sync", dt, w, accumulate=True, trans_a=True,
                       split=g_dkv)
            if atomic:
                yield Gemm("dQ", "sdS", "sK", bm, d, bn, SMEM, SMEM, "mma_sync", dt, w, split=g_dq)
                yield AtomicAdd("dQ", bw.accum_tile(p, "dQaccum", b, h, row0, bm), chained=dq_red_chain(t, g_dq))
            if not double_q and n + 1 < len(blocks):
                yield SyncThreads()
                yield from load_q(n + 1)
        if code:
            yield code["epilogue"]
        if g > 1:
            yield AtomicAdd("dK", bw.accum_tile(p, "dKaccum", b, hk, col0, bn, kv=True))
            yield AtomicAdd("dV", bw.accum_tile(p, "dVaccum", b, hk, col0, bn, kv=True))
        else:
            # straight from the accumulators, bf16 pairs: the kernel packs every dK pair into one register, so
            # each of a thread's dK stores waits for the one before it (Nsight Compute: ~300 cycles each)
            yield Store("dK", row_tile(p, "dK", b, h, col0, bn, kv=True), RMEM, chained=dk_store_chain(p, t))
            yield Store("dV", row_tile(p, "dV", b, h, col0, bn, kv=True), RMEM)

    def dq_pass(cta):
        b, h, i = cta
        row0 = i * bm
        yield Load(row_tile(p, "Q", b, h, row0, bm), "sQ", SMEM, "cp.async", "q")
        yield Load(row_tile(p, "dO", b, h, row0, bm), "sdO", SMEM, "cp.async", "q")
        yield Load(stat_tile(p, "LSE", b, h, row0, bm), "lse", RMEM)
        yield Load(stat_tile(p, "D", b, h, row0, bm), "delta", RMEM)
        yield Fill("dQ", bm, d, 0.0)
        yield Wait("q", 2)
        for j in range(kv_block_count(p, row0, bm, bn)):
            col0 = j * bn
            yield Load(row_tile(p, "K", b, h, col0, bn, kv=True), "sK", SMEM, "cp.async", "kv")
            yield Load(row_tile(p, "V", b, h, col0, bn, kv=True), "sV", SMEM, "cp.async", "kv")
            yield Wait("kv", 2 * (j + 1))
            yield SyncThreads()
            yield Gemm("S", "sQ", "sK", bm, bn, d, SMEM, SMEM, "mma_sync", dt, w, trans_b=True, split=g_sdp)
            yield LseExp("S", "P", "lse", bm, bn, p.scale, tile_mask(p, row0, col0, bm, bn), w, t.exp2)
            yield Gemm("dP", "sdO", "sV", bm, bn, d, SMEM, SMEM, "mma_sync", dt, w, trans_b=True, split=g_sdp)
            yield SoftmaxGrad("dS", "P", "dP", "delta", bm, bn, p.scale, w)
            yield Gemm("dQ", "dS", "sK", bm, d, bn, RMEM, SMEM, "mma_sync", dt, w, accumulate=True, split=g_dq)
            yield SyncThreads()  # K_j and V_j are refilled next
        yield Store("dQ", row_tile(p, "dQ", b, h, row0, bm), RMEM)

    kernels = []
    if g > 1:
        kernels.append(bw.zero_dkv_kernel(p, bn, w))
    kernels.append(bw.preprocess_kernel(p, bm, w, zero_dq=atomic))
    ctas = [(b, h, j) for h in range(p.heads) for b in range(p.batch) for j in range(cdiv(p.seqlen_k, bn))]
    kernels.append(Kernel("flash_bwd_v2", ctas, (Role("warps", w, main),), smem_bytes(p, t), registers(p, t),
                          classes=lambda c: (c[2],), uniform=not p.causal))
    if atomic:
        kernels.append(bw.convert_dq_kernel(p, bm, w))
    else:
        q_ctas = [(b, h, i) for h in range(p.heads) for b in range(p.batch) for i in range(cdiv(p.seqlen_q, bm))]
        kernels.append(Kernel("flash_bwd_v2_dq", q_ctas, (Role("warps", w, dq_pass),),
                              (2 * bm + 2 * bn) * d * p.elem_bytes, registers(p, t), classes=lambda c: (c[2],),
                              uniform=not p.causal))
    if g > 1:
        kernels.append(bw.convert_dkv_kernel(p, bn, w))
    return Schedule("v2-bwd", p, t, tuple(kernels))


def loop_nest(x: cf.Dims, dq: str = "atomic") -> list[cf.KernelNest]:
    BH, Nq, Nk, d, e, eg, w, bm, bn = x.BH, x.Nq, x.Nk, x.d, x.e, x.eg, x.w, x.bm, x.bn
    atomic = dq == "atomic"
    steps = bw.q_steps(x)
    P = BH * sum(steps)
    rows = BH * sum(bw.q_rows_seen(x))  # query rows streamed past the key blocks
    masked = BH * sum(bw.masked_steps(x, j * bn, bn) for j in range(x.Tc))
    rq, rk = min(bm, Nq), min(bn, Nk)
    mask_alu = cf.MASK_OPS_PER_ELEMENT * masked * bm * bn
    (sa, sb), (ka, kb), (qa, qb) = (_reads(grid) for grid in warp_grids(d, x.t))
    kv = BH * Nk * d * e
    staged = bm * bn * eg  # P or dS in shared memory
    inner = [
        cf.load("load Q_i (double-buffered)", "Q", rq * d * e, rows * d * e, P),
        cf.load("load dO_i", "dO", rq * d * e, rows * d * e, P),
        cf.merged([cf.load("load LSE_i, D_i", "LSE", rq * F32, rows * F32, P, smem=False),
                   cf.load("", "D", rq * F32, rows * F32, P, smem=False)])[0],
        cf.gemm("S = Q_i K_j^T", "mma_sync", x.dt, bm, bn, d, P, ("Q", sa * bm * d * eg), ("K", sb * bn * d * eg)),
        cf.work("P = exp(scale S - LSE_i)", P, bm * bn, 2 * bm * bn, 2 * bm * bn * P + mask_alu),
        cf.Step("P -> shared memory", "rf->smem", P, [cf.Effect("smem_write", "P", staged, P * staged)]),
        cf.gemm("dP = dO_i V_j^T", "mma_sync", x.dt, bm, bn, d, P, ("dO", sa * bm * d * eg), ("V", sb * bn * d * eg)),
        cf.work("dS = scale P (dP - D_i)", P, 0, 3 * bm * bn),
        cf.Step("dS -> shared memory", "rf->smem", P, [cf.Effect("smem_write", "dS", staged, P * staged)]),
        cf.gemm("dV_j += P^T dO_i", "mma_sync", x.dt, bn, d, bm, P, ("P", ka * staged), ("dO", kb * bm * d * eg)),
        cf.gemm("dK_j += dS^T Q_i", "mma_sync", x.dt, bn, d, bm, P, ("dS", ka * staged), ("Q", kb * bm * d * eg)),
    ]
    if atomic:
        inner += [
            cf.gemm("dQ_i = dS K_j", "mma_sync", x.dt, bm, d, bn, P, ("dS", qa * staged), ("K", qb * bn * d * eg)),
            cf.atomic("dQaccum_i += dQ_i  (fp32 red.global.add)", "dQaccum", rq * d * F32, rows * d * F32, P),
        ]
    if x.p.group > 1:
        out = cf.merged([cf.atomic("dKaccum_j += dK_j, dVaccum_j += dV_j  (fp32)", "dKaccum", rk * d * F32,
                                   BH * Nk * d * F32, BH * x.Tc),
                         cf.atomic("", "dVaccum", rk * d * F32, BH * Nk * d * F32, BH * x.Tc)])
    else:
        out = [cf.store("store dK_j", "dK", rk * d * e, kv, BH * x.Tc),
               cf.store("store dV_j", "dV", rk * d * e, kv, BH * x.Tc)]
    body = [
        cf.load("load K_j", "K", rk * d * e, kv, BH * x.Tc),
        cf.load("load V_j", "V", rk * d * e, kv, BH * x.Tc),
        cf.Loop(f"i in 0..{max(steps)}  q-block", max(steps), P, inner,
                note="causal: from the diagonal" if x.p.causal else ""),
        *out,
    ]
    nests = [bw.preprocess_nest(x, w, zero_dq=atomic)]
    nests.append(cf.KernelNest("flash_bwd_v2", BH * x.Tc, 32 * w, [cf.bh_loop(x, [
        cf.Loop(f"j in 0..{x.Tc}  kv-block", x.Tc, BH * x.Tc, body, grid=True)])]))
    if atomic:
        nests.append(bw.convert_dq_nest(x, w))
    else:
        nests.append(_dq_pass_nest(x))
    if x.p.group > 1:
        zero, convert = bw.dkv_nests(x, w)
        nests = [zero, *nests, convert]
    return nests


def _dq_pass_nest(x: cf.Dims) -> cf.KernelNest:
    BH, Nq, d, e, eg, w, bm, bn = x.BH, x.Nq, x.d, x.e, x.eg, x.w, x.bm, x.bn
    n = [x.visible(i) for i in range(x.Tr)]
    P = BH * sum(n)
    kv = BH * sum(x.kv_rows(k) for k in n) * d * e
    masked = BH * sum(x.masked(i * bm, n[i]) for i in range(x.Tr))
    rq, rk, tr = min(bm, Nq), min(bn, x.Nk), x.Tr
    (sa, sb), _, (_, qb) = (_reads(grid) for grid in warp_grids(d, x.t))
    body = [
        cf.load("load Q_i", "Q", rq * d * e, BH * Nq * d * e, BH * tr),
        cf.load("load dO_i", "dO", rq * d * e, BH * Nq * d * e, BH * tr),
        *cf.merged([cf.load("load LSE_i, D_i", "LSE", rq * F32, BH * Nq * F32, BH * tr, smem=False),
                    cf.load("", "D", rq * F32, BH * Nq * F32, BH * tr, smem=False)]),
        cf.Loop(f"j in 0..{max(n)}  kv-block", max(n), P, [
            cf.load("load K_j", "K", rk * d * e, kv, P),
            cf.load("load V_j", "V", rk * d * e, kv, P),
            cf.gemm("S = Q_i K_j^T", "mma_sync", x.dt, bm, bn, d, P, ("Q", sa * bm * d * eg), ("K", sb * bn * d * eg)),
            cf.work("P = exp(scale S - LSE_i)", P, bm * bn, 2 * bm * bn,
                    2 * bm * bn * P + cf.MASK_OPS_PER_ELEMENT * masked * bm * bn),
            cf.gemm("dP = dO_i V_j^T", "mma_sync", x.dt, bm, bn, d, P, ("dO", sa * bm * d * eg),
                    ("V", sb * bn * d * eg)),
            cf.work("dS = scale P (dP - D_i)", P, 0, 3 * bm * bn),
            cf.gemm("dQ_i += dS K_j", "mma_sync", x.dt, bm, d, bn, P, None, ("K", qb * bn * d * eg)),
        ], note="causal: to the diagonal" if x.p.causal else ""),
        cf.store("store dQ_i", "dQ", rq * d * e, BH * Nq * d * e, BH * tr),
    ]
    return cf.KernelNest("flash_bwd_v2_dq", BH * tr, 32 * w, [cf.bh_loop(x, [
        cf.Loop(f"i in 0..{tr}  q-block", tr, BH * tr, body, grid=True)])])


ALGORITHM = Algorithm(
    name="v2-bwd",
    forward="v2",
    summary="FlashAttention-2's backward: a block per K/V tile, P recomputed from the LSE, dQ added in fp32 "
            "by atomics (or a second pass)",
    build=build,
    mapper=mapper,
    smem_bytes=smem_bytes,
    registers=registers,
    loop_nest=loop_nest,
    hbm_tensors=bw.flash_backward_tensors,
    why="K_j and V_j cross global memory once; Q, dO, LSE and D once per kv-block: Tc = {tc} passes, and dQ "
        "is added into an fp32 accumulator Tc times (atomics served by the L2).",
    options=("dq", "bookkeeping"),
    dtypes=("bf16", "fp16"),  # FA2's backward takes 16-bit inputs
    warp_split="n",  # the kernels' 2 x 4 warp grids: block_n a multiple of 8 x warps with S's n
    block_n_is_k=False,
)
