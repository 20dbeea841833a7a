"""FlashAttention-2 (Dao 2023): one thread block per (Q block, head, batch), inner loop over K/V blocks.

Warps split Q (each owns block_m / warps rows, so no cross-warp exchange); K and V are single shared
buffers refilled by cp.async while the other is in use, as the public kernels do:
    wait K_j | issue V_j | S = Q K_j^T | softmax | wait V_j | issue K_j+1 | O += P V_j
O stays unnormalised in registers until the end and is written once, with the logsumexp.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING

from .. import splitkv
from ..footprint import REG_OVERHEAD
from ..ir import (
    EXP2F_EXTRA_PER_EXP,
    RMEM,
    SMEM,
    Fill,
    Gemm,
    Kernel,
    Load,
    Mask,
    OnlineSoftmax,
    Role,
    Schedule,
    SyncThreads,
    Wait,
    causal_offset,
)
from ..ir import FP32_BYTES as F32
from ..mapping import Tiling
from ..oplists import OpList
from ..parts import cdiv, flash_epilogue, gemm_dtype, kv_block_count, lse_tensor, row_tile, tile_mask
from ..problem import Problem
from ..record import Algorithm
from ..splitkv import (
    LSE_PARTS,
    O_PARTS,
    combine_kernel,
    combine_nest,
    partial_epilogue,
    split_range,
    workspace_bytes,
    workspace_shapes,
)
from .forward_code import MASKING_STEPS, fa2_even, forward_code, mask_code

if TYPE_CHECKING:  # the closed forms are imported where used: a simulation needs none
    from .. import closed_form as cf


def _fa2_tile(d: int, profile) -> tuple[int, int, int]:
    """The public FA2 kernels' (kBlockM, kBlockN, warps) per head dim (sm80 code path, also on Hopper)."""
    if d <= 64:
        return 128, 128, 4  # d32/d64: 128x128 fits registers (S: 128 fp32 per thread) and 64 KB SMEM
    if d <= 128:
        return 128, 64, 4  # d96/d128: halve block_n so the O accumulator (d/... per thread) fits registers
    if d <= 192:
        return 128, 64, 8  # 8 warps: the 128 x 192 O accumulator needs two threads' worth of registers
    # d256: 128x64x8 needs 128 KB SMEM; FA2 takes it only on SMs with < 192 KB (A100), else 64x64x4.
    if profile.smem_per_block_max_bytes >= 128 * 1024 and profile.smem_per_sm_bytes < 192 * 1024:
        return 128, 64, 8
    return 64, 64, 4


def mapper(p: Problem, profile) -> Tiling:
    return Tiling(*_fa2_tile(p.headdim, profile), 2)


def smem_bytes(p: Problem, t: Tiling) -> int:
    return (t.block_m + 2 * t.block_n) * p.headdim * p.elem_bytes  # Q, K and V tiles (the FA2 kernels' formula)


def registers(p: Problem, t: Tiling) -> int:
    """Each thread holds block_m * block_n / threads of S and block_m * d / threads of O, plus a fixed overhead."""
    return REG_OVERHEAD + (t.block_m * t.block_n + t.block_m * p.headdim) // t.threads


def build(p: Problem, t: Tiling, instr: str = "mma_sync", code: bool = False, bookkeeping: bool = False) -> Schedule:
    """code: name the kernel's code stretches (ir.Code; the timing fetches them with the profile's fetch_model
    1, which is when simulate asks for them: by default they would only be ops that cost nothing).
    bookkeeping: the stretches carry the compiler's bookkeeping instructions (forward_code.BOOKKEEPING), which
    the issue model charges (simulate asks for them with the profile's issue_model 1)."""
    bm, bn, d, w, splits = t.block_m, t.block_n, p.headdim, t.warps, t.splits
    dt = gemm_dtype(p)
    s_args = ("S", "sQ", "sK", bm, bn, d, SMEM, SMEM, instr, dt, w)
    pv_args = ("acc", "P", "sV", bm, d, bn, RMEM, SMEM, instr, dt, w)
    # Every block of a (batch, K/V head) issues the same K/V loads and waits: made once (ops are immutable
    # values), for the head the blocks last worked on.
    kv_ops: dict = {"head": None}

    def for_head(b: int, h: int) -> dict:
        head = (b, h // p.group)
        if kv_ops["head"] != head:
            kv_ops.clear()
            kv_ops["head"] = head
        return kv_ops

    def kv_load(ps, tensor: str, b: int, h: int, col0: int):
        op = for_head(b, h).get((tensor, col0))
        if op is None:
            tile = row_tile(ps, tensor, b, h, col0, bn, kv=True)
            op = kv_ops[tensor, col0] = Load(tile, f"s{tensor}", SMEM, "cp.async", tensor.lower())
        return op

    waits: dict = {}

    def wait(barrier: str, target: int) -> Wait:
        op = waits.get((barrier, target))
        if op is None:
            op = waits[barrier, target] = Wait(barrier, target)
        return op

    # the ops every step issues alike are made once (ops are immutable values)
    sync, qk, pv = SyncThreads(), Gemm(*s_args, trans_b=True), Gemm(*pv_args, accumulate=True)
    # the stretches of the kernel's code its warps run (exp2f: SDPA's flash kernel, else ours), where known
    kernel_code = "fa2" if t.exp2 == "exp2f" else "flashsim"
    even = kernel_code != "fa2" or fa2_even(p, bm, bn)
    code = forward_code(kernel_code, d, bm, bn, w, p.causal, code, bookkeeping, even) \
        if (code or bookkeeping) and splits == 1 else None
    # the causal steps the kernel runs its masking code on, counted from a block's last (FA2: its source's count)
    masking = MASKING_STEPS[kernel_code](bm, bn, even) if p.causal and splits == 1 and kernel_code in MASKING_STEPS \
        else 0
    # a masked step's own code (its fetch paces it the first time an SM runs it), named whatever is asked
    mask_stretch = mask_code(kernel_code, d, bm, bn, w) if p.causal and splits == 1 else None
    unmasked = OnlineSoftmax("S", "P", "m", "l", bm, bn, p.scale, None, dt, acc="acc", acc_cols=d, warps=w,
                             exp2=t.exp2)

    def kv_loop(ps, b: int, h: int, row0: int, first: int, n: int) -> list:
        """A block's K/V loop as a list of ops, made once per (head, range) where no tile needs a mask and
        shared by the head's blocks (the same ops in the same order; the loop skip pulls every left-out one)."""
        # K/V tiles ending at or before `visible` need no mask (tile_mask's test, made once per block)
        visible = ps.seqlen_k
        if ps.causal:
            visible = min(visible, row0 + causal_offset(ps.causal_align, ps.seqlen_q, ps.seqlen_k) + 1)
        # blocks whose tiles need no mask share the list (a mask depends on the block's rows)
        key = None if (first + n) * bn > visible or masking else ("loop", first, n)
        ops = for_head(b, h).get(key)
        if ops is not None:
            return ops
        ops = OpList()
        masking_from = n - min(n, masking)
        # the steps that repeat one another but for their barrier counts (OpList.repeat): from the second (the
        # first may run its code peeled) while neither tile needs a mask or masking code, both tiles it loads
        # (V_j, K_j+1) are whole (a ragged last one has other rows) and a K load follows
        last = min(masking_from, n - 1, ps.seqlen_k // bn - first - 1)  # steps [1, last) may be regular
        start = stop = steps = 0  # the regular steps' first op, the end of their last, how many
        for jj in range(n):
            col0 = (first + jj) * bn
            mask = None if col0 + bn <= visible else tile_mask(ps, row0, col0, bm, bn)
            if mask is None and jj >= masking_from:  # masking code on a tile that needs none: it hides nothing
                mask = Mask(row0, col0, ps.seqlen_q, ps.seqlen_k, ps.causal, ps.causal_align)
            begin = len(ops)
            if code and (jj or not code["peeled"]):
                ops.append(code["loop"])
            if code and "masking" in code and jj > masking_from:  # a masking step after the peeled one
                ops.append(code["masking"])
            ops += (wait("k", jj + 1), sync, kv_load(ps, "V", b, h, col0), qk)
            if mask is not None and mask_stretch is not None:
                ops.append(mask_stretch)  # after S, as in the kernel
            ops += (unmasked if mask is None else replace(unmasked, mask=mask), wait("v", jj + 1), sync)
            if jj + 1 < n:
                ops.append(kv_load(ps, "K", b, h, col0 + bn))
            ops.append(pv)
            if 1 <= jj < last and mask is None:
                start, stop, steps = (start if steps else begin), len(ops), steps + 1
        if steps >= 2:
            ops.repeat = (start, stop, (stop - start) // steps)
        if key is not None:
            for_head(b, h)[key] = ops
        return ops

    def program(cta):
        b, h, i = cta[:3]
        ps = p.sequence(b)  # a variable-length batch: this sequence's lengths
        row0 = i * bm
        n = kv_block_count(ps, row0, bm, bn)
        first = 0
        if splits > 1:  # split-KV: this block's contiguous share of the K/V blocks
            first, n = split_range(cdiv(ps.seqlen_k, bn), n, splits, cta[3])
        if code:
            yield code["prologue"]
        if n or splits == 1:
            yield Load(row_tile(ps, "Q", b, h, row0, bm), "sQ", SMEM, "cp.async", "q")
            yield Wait("q", 1)
        yield Fill("acc", bm, d, 0.0)
        yield Fill("m", bm, 1, -math.inf)
        yield Fill("l", bm, 1, 0.0)
        if n:
            yield kv_load(ps, "K", b, h, first * bn)
            yield from kv_loop(ps, b, h, row0, first, n)
        if code:
            yield code["epilogue"]
        if splits > 1:
            yield from partial_epilogue(p, b, h, row0, bm, cta[3], "acc", "m", "l", w)
        else:
            yield from flash_epilogue(ps, b, h, row0, bm, "acc", "m", "l", w)

    # Launch order of the public kernels' grid (N/bm, B, H): Q blocks fastest, then batch, then heads; the
    # split-KV kernel's (N/bm, splits, B x H): Q blocks, then splits, then heads, then batch.
    if splits > 1:
        ctas = [(b, h, i, s) for b in range(p.batch) for h in range(p.heads) for s in range(splits)
                for i in range(cdiv(p.q_len(b), bm))]
    else:
        ctas = [(b, h, i) for h in range(p.heads) for b in range(p.batch) for i in range(cdiv(p.q_len(b), bm))]
    kernel = Kernel("flash_fwd_splitkv_v2" if splits > 1 else "flash_fwd_v2", ctas, (Role("warps", w, program),),
                    smem_bytes(p, t), registers(p, t), classes=lambda c: (*c[2:], p.q_len(c[0]), p.k_len(c[0])),
                    uniform=not p.causal and splits == 1 and not p.varlen,
                    steps=(lambda c: kv_block_count(p.sequence(c[0]), c[2] * bm, bm, bn))
                    if p.causal and splits == 1 else None)
    if splits == 1:
        return Schedule("v2", p, t, (kernel,))
    return Schedule("v2", p, t, (kernel, combine_kernel(p, splits)), shapes=workspace_shapes(p, splits))


def sequence_nest(x: cf.Dims) -> cf.KernelNest:
    """The attention kernel of one sequence (of the batch, when all have the same length)."""
    from .. import closed_form as cf
    BH, Nq, d, e, eo, eg, w, bm, bn = x.BH, x.Nq, x.d, x.e, x.eo, x.eg, x.w, x.bm, x.bn
    tr, S = x.Tr, x.t.splits
    ranges = [[split_range(x.Tc, x.visible(i), S, s) if S > 1 else (0, x.visible(i)) for s in range(S)]
              for i in range(tr)]
    n = [c for per in ranges for _, c in per]
    P = BH * sum(n)
    kv = BH * sum(x.kv_rows_from(f, c) for per in ranges for f, c in per) * d * e
    masked = BH * sum(x.masked_from(i * bm, f, c) for i in range(tr) for f, c in ranges[i])
    q_loads = [(i, f, c) for i in range(tr) for f, c in ranges[i] if c or S == 1]
    rq, rk = min(bm, Nq), min(bn, x.Nk)
    soft = 4 * bm * bn + bm * (2 + d) + (EXP2F_EXTRA_PER_EXP * (bm * bn + bm) if x.t.exp2 == "exp2f" else 0)
    if S > 1:
        out = [cf.store("store O_s (fp32 workspace)", O_PARTS, rq * d * F32, S * BH * Nq * d * F32, BH * tr * S),
               cf.store("store LSE_s", LSE_PARTS, rq * F32, S * BH * Nq * F32, BH * tr * S)]
    else:
        out = [cf.store("store O_i", "O", rq * d * eo, BH * Nq * d * eo, BH * tr),
               cf.store("store LSE_i", "LSE", rq * F32, BH * Nq * F32, BH * tr)]
    body = [
        cf.load("load Q_i", "Q", rq * d * e, BH * sum(x.rows(i) for i, _, _ in q_loads) * d * e, BH * len(q_loads)),
        cf.Loop(f"j in 0..{max(n)}  kv-block", max(n), P, [
            cf.load("load K_j", "K", rk * d * e, kv, P),
            cf.load("load V_j", "V", rk * d * e, kv, P),
            cf.gemm("S = Q_i K_j^T  mma_sync, split rows", "mma_sync", x.dt, bm, bn, d, P,
                  ("Q", bm * d * eg), ("K", w * bn * d * eg)),
            cf.work("online softmax, O *= e^(m_old - m)", P, bm * bn + bm, soft,
                  soft * P + cf.MASK_OPS_PER_ELEMENT * masked * bm * bn),
            cf.gemm("O += P V_j", "mma_sync", x.dt, bm, d, bn, P, None, ("V", w * bn * d * eg)),
        ], note="causal: to the diagonal" if x.p.causal else ""),
        cf.work("O /= l, LSE = m + log l", BH * tr * S, 2 * bm, bm * d + bm),
        *out,
    ]
    if S > 1:
        body = [cf.Loop(f"s in 0..{S}  kv split (first blocks {x.Tc} / {S} each)", S, BH * tr * S, body, grid=True)]
    name = "flash_fwd_splitkv_v2" if S > 1 else "flash_fwd_v2"
    return cf.KernelNest(name, BH * tr * S, 32 * w, [cf.bh_loop(x, [
        cf.Loop(f"i in 0..{tr}  q-block", tr, BH * tr, body, grid=True)])])


def loop_nest(x: cf.Dims) -> list[cf.KernelNest]:
    from .. import closed_form as cf
    nests = [cf.per_sequence(x, sequence_nest)]
    return nests + ([combine_nest(x.p, x.t.splits)] if x.t.splits > 1 else [])


def flash_tensors(p: Problem, t: Tiling) -> dict[str, int]:
    """LSE, and the split-KV workspace when the K/V range is split."""
    return {**lse_tensor(p), **workspace_bytes(p, t.splits)}


def auto_splits(p: Problem, t: Tiling, profile) -> int:
    """FA2's split count for this problem (its heuristic counts 64-row Q blocks)."""
    return splitkv.auto_splits(p, cdiv(p.seqlen_q, 64), profile)


ALGORITHM = Algorithm(
    name="v2",
    summary="FlashAttention-2: one block per Q tile, warps split Q, K/V streamed by cp.async, O written once",
    build=build,
    mapper=mapper,
    smem_bytes=smem_bytes,
    registers=registers,
    loop_nest=loop_nest,
    hbm_tensors=flash_tensors,
    layouts=("varlen",),
    options=("code", "bookkeeping"),
    auto_splits=auto_splits,
    why="Q_i and O_i cross global memory once; K and V once per q-block: Tr = {tr} passes over K and V. "
        "Tiles of ~M / d rows give Tr ~ N d / M, so the bytes are Theta(N^2 d^2 / M).",
)
