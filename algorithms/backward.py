"""Pieces the backward schedules share: which backward goes with which forward, the key blocks' Q ranges,
and the small kernels around the main one (D = rowsum(dO * O), fp32 accumulators zeroed and converted).

Tensors of the backward: dO (the output's gradient, input), O and LSE (saved by the forward), D (fp32 per
row), dQ dK dV (the gradients, in the input dtype), dQaccum (fp32 dQ that the key blocks add into), and
with GQA dKaccum dVaccum (fp32, the query heads of a group add into their K/V head's).
"""

from __future__ import annotations

from flashsim.errors import FlashsimError

from .ir import FP32_BYTES, RMEM, Fill, GTile, Kernel, Load, Role, RowDot, Store
from .parts import causal_shift, cdiv, lse_tensor, q_rows, row_tile, stat_tile
from .problem import Problem

PASSES = ("fwd", "bwd", "fwd+bwd")


def backward_of() -> dict[str, str]:
    """Forward schedule -> its backward, from the backward records' `forward` field."""
    from .catalog import records

    return {r.forward: r.name for r in records() if r.forward}


def forward_of() -> dict[str, str]:
    """Backward schedule -> the forward it belongs to."""
    return {bwd: fwd for fwd, bwd in backward_of().items()}


def check_pass(name: str) -> None:
    if name not in PASSES:
        raise FlashsimError(f"unknown pass {name!r}; choose one of {', '.join(PASSES)}")


def pass_algos(algo: str, pass_: str) -> list[str]:
    """The schedules a pass of `algo` runs: fwd: the forward; bwd: its backward; fwd+bwd: both. A backward
    schedule named directly runs as itself for fwd (the default) and bwd."""
    check_pass(pass_)
    if pass_ == "fwd":
        return [algo]  # before the records are read: that imports every schedule
    backward = backward_of()
    fwd = forward_of().get(algo, algo)
    if fwd not in backward:
        raise FlashsimError(f"{algo} has no backward schedule; the backward exists for {', '.join(backward)}")
    return [backward[fwd]] if pass_ == "bwd" else [fwd, backward[fwd]]


def forward_names() -> tuple[str, ...]:
    """The catalog's forward schedules (what `tour` and `compare` run by default)."""
    from .catalog import records

    return tuple(r.name for r in records() if not r.forward)


def pass_of(algo: str) -> str:
    """'bwd' for a backward schedule, else 'fwd'."""
    from .catalog import get

    return get(algo).pass_


def _gradients(p: Problem) -> dict[str, int]:
    """dO (an input of the backward) and the gradients dQ, dK, dV, in the input dtype (O, Q, K, V are counted
    by algorithms/memory.py as for every schedule)."""
    q = q_rows(p) * p.headdim * p.elem_bytes
    kv = p.batch * p.kv_heads * p.seqlen_k * p.headdim * p.elem_bytes
    return {"dO": q, "dQ": q, "dK": kv, "dV": kv}


def flash_backward_tensors(p: Problem, t=None) -> dict[str, int]:
    """v2-bwd, v3-bwd: the gradients, the forward's LSE, D = rowsum(dO * O) (fp32 per row) and the fp32 dQ
    accumulator the key blocks add into; with GQA fp32 dK, dV accumulators per K/V head too."""
    out = {**_gradients(p), **lse_tensor(p), "D": q_rows(p) * FP32_BYTES,
           "dQaccum": q_rows(p) * p.headdim * FP32_BYTES}
    if p.group > 1:
        acc = p.batch * p.kv_heads * p.seqlen_k * p.headdim * FP32_BYTES
        out.update(dKaccum=acc, dVaccum=acc)
    return out


def standard_backward_tensors(p: Problem, t=None) -> dict[str, int]:
    """standard-bwd: the gradients, the forward's P, and dP and dS materialised, (B, H, Nq, Nk) each."""
    scores = q_rows(p) * p.seqlen_k * p.elem_bytes
    return {**_gradients(p), "P": scores, "dP": scores, "dS": scores}


def first_q_block(p: Problem, col0: int, block_m: int) -> int:
    """The first Q block that sees key column col0 (0 without a causal mask): a Q block's last row r sees
    keys up to r + shift, so blocks before this one never reach the key block (and contribute nothing)."""
    if not p.causal:
        return 0
    return max(0, (col0 - causal_shift(p)) // block_m)


def q_blocks(p: Problem, col0: int, block_m: int) -> range:
    return range(first_q_block(p, col0, block_m), cdiv(p.seqlen_q, block_m))


def accum_tile(p: Problem, tensor: str, b: int, head: int, row0: int, block: int, kv: bool = False) -> GTile:
    """Rows of an fp32 accumulator (dQaccum, or with GQA dKaccum / dVaccum by K/V head)."""
    n = p.seqlen_k if kv else p.seqlen_q
    return GTile(tensor, b, head, row0, min(block, n - row0), 0, p.headdim, FP32_BYTES)


def preprocess_kernel(p: Problem, block_m: int, warps: int, zero_dq: bool) -> Kernel:
    """D = rowsum(dO * O) per query row (fp32), and dQaccum zeroed for the key blocks to add into (FA2's
    and FA3's dot_do_o kernels do both)."""

    def program(cta):
        b, h, i = cta
        row0 = i * block_m
        yield Load(row_tile(p, "dO", b, h, row0, block_m), "do", RMEM)
        yield Load(row_tile(p, "O", b, h, row0, block_m), "o", RMEM)
        yield RowDot("D", "do", "o", block_m, p.headdim, warps)
        yield Store("D", stat_tile(p, "D", b, h, row0, block_m), RMEM)
        if zero_dq:
            yield Fill("zero", block_m, p.headdim, 0.0)
            yield Store("zero", accum_tile(p, "dQaccum", b, h, row0, block_m), RMEM)

    ctas = [(b, h, i) for h in range(p.heads) for b in range(p.batch) for i in range(cdiv(p.seqlen_q, block_m))]
    return Kernel("bwd_dot_do_o", ctas, (Role("warps", warps, program),), 0, 64, classes=lambda c: (c[2],),
                  uniform=True)


def convert_dq_kernel(p: Problem, block_m: int, warps: int) -> Kernel:
    """dQ = dQaccum converted from fp32 to the input dtype."""

    def program(cta):
        b, h, i = cta
        row0 = i * block_m
        yield Load(accum_tile(p, "dQaccum", b, h, row0, block_m), "dq", RMEM)
        yield Store("dq", row_tile(p, "dQ", b, h, row0, block_m), RMEM)

    ctas = [(b, h, i) for h in range(p.heads) for b in range(p.batch) for i in range(cdiv(p.seqlen_q, block_m))]
    return Kernel("bwd_convert_dq", ctas, (Role("warps", warps, program),), 0, 32, classes=lambda c: (c[2],),
                  uniform=True)


def _kv_grid(p: Problem, block_n: int) -> list[tuple]:
    return [(b, hk, j) for hk in range(p.kv_heads) for b in range(p.batch) for j in range(cdiv(p.seqlen_k, block_n))]


def zero_dkv_kernel(p: Problem, block_n: int, warps: int) -> Kernel:
    """GQA: the fp32 dK and dV accumulators zeroed before the query heads of a group add into them."""

    def program(cta):
        b, hk, j = cta
        yield Fill("zero", block_n, p.headdim, 0.0)
        for tensor in ("dKaccum", "dVaccum"):
            yield Store("zero", accum_tile(p, tensor, b, hk, j * block_n, block_n, kv=True), RMEM)

    return Kernel("bwd_zero_dkv", _kv_grid(p, block_n), (Role("warps", warps, program),), 0, 32,
                  classes=lambda c: (c[2],), uniform=True, kv_head_of=lambda c: (c[0], c[1]))


def convert_dkv_kernel(p: Problem, block_n: int, warps: int) -> Kernel:
    """GQA: dK and dV converted from their fp32 accumulators to the input dtype."""

    def program(cta):
        b, hk, j = cta
        col0 = j * block_n
        for acc, out in (("dKaccum", "dK"), ("dVaccum", "dV")):
            yield Load(accum_tile(p, acc, b, hk, col0, block_n, kv=True), acc, RMEM)
            yield Store(acc, GTile(out, b, hk, col0, min(block_n, p.seqlen_k - col0), 0, p.headdim,
                                   p.elem_bytes), RMEM)

    return Kernel("bwd_convert_dkv", _kv_grid(p, block_n), (Role("warps", warps, program),), 0, 32,
                  classes=lambda c: (c[2],), uniform=True, kv_head_of=lambda c: (c[0], c[1]))


# -- closed forms (algorithms/closed_form.py) of the kernels above and the sums the main kernels need ------


def q_rows_seen(x) -> list[int]:
    """Per key block j: the query rows of the Q blocks that visit it (Nq - first_j Br)."""
    return [max(0, x.Nq - first_q_block(x.p, j * x.bn, x.bm) * x.bm) for j in range(x.Tc)]


def q_steps(x) -> list[int]:
    """Per key block j: the Q blocks that visit it."""
    return [max(0, x.Tr - first_q_block(x.p, j * x.bn, x.bm)) for j in range(x.Tc)]


def masked_steps(x, col0: int, cols: int, from_col: int | None = None) -> int:
    """Of the (Q block, key block) steps of a key block (cols keys from col0), those whose tile needs a mask:
    every one past the key sequence's end, else those whose first row does not see the tile's last key.
    from_col: the Q blocks run from the first that sees this column (default col0)."""
    first = first_q_block(x.p, col0 if from_col is None else from_col, x.bm)
    if col0 + cols > x.Nk:
        return max(0, x.Tr - first)
    if not x.p.causal:
        return 0
    reach = col0 + cols - 1 - causal_shift(x.p)  # a tile starting at row0 < reach has a hidden element
    return max(0, min(x.Tr, cdiv(reach, x.bm)) - first)


def preprocess_nest(x, warps: int, zero_dq: bool):
    from . import closed_form as cf

    BH, Nq, d, e, bm = x.BH, x.Nq, x.d, x.e, x.bm
    n = BH * x.Tr
    rq = min(bm, Nq)
    body = [
        cf.load("load dO_i", "dO", rq * d * e, BH * Nq * d * e, n, smem=False),
        cf.load("load O_i", "O", rq * d * e, BH * Nq * d * e, n, smem=False),
        cf.work("D_i = rowsum(dO_i * O_i)", n, 0, 2 * bm * d),
        cf.store("store D_i", "D", rq * FP32_BYTES, BH * Nq * FP32_BYTES, n),
    ]
    if zero_dq:
        body.append(cf.store("store dQaccum_i = 0 (fp32)", "dQaccum", rq * d * FP32_BYTES,
                             BH * Nq * d * FP32_BYTES, n))
    return cf.KernelNest("bwd_dot_do_o", n, 32 * warps, [cf.bh_loop(x, [
        cf.Loop(f"i in 0..{x.Tr}  q-block", x.Tr, n, body, grid=True)])])


def convert_dq_nest(x, warps: int):
    from . import closed_form as cf

    BH, Nq, d, e = x.BH, x.Nq, x.d, x.e
    n, rq = BH * x.Tr, min(x.bm, Nq)
    return cf.KernelNest("bwd_convert_dq", n, 32 * warps, [cf.bh_loop(x, [
        cf.Loop(f"i in 0..{x.Tr}  q-block", x.Tr, n, [
            cf.load("load dQaccum_i (fp32)", "dQaccum", rq * d * FP32_BYTES, BH * Nq * d * FP32_BYTES, n,
                    smem=False),
            cf.store("store dQ_i", "dQ", rq * d * e, BH * Nq * d * e, n),
        ], grid=True)])])


def dkv_nests(x, warps: int):
    """GQA: the zeroing and converting kernels of the fp32 dK, dV accumulators, per K/V head."""
    from . import closed_form as cf

    BK, Nk, d, e = x.B * x.Hkv, x.Nk, x.d, x.e
    n, rk = BK * x.Tc, min(x.bn, Nk)
    f32 = BK * Nk * d * FP32_BYTES
    zero = cf.KernelNest("bwd_zero_dkv", n, 32 * warps, [cf.bh_loop(x, [
        cf.Loop(f"j in 0..{x.Tc}  kv-block", x.Tc, n, [
            *cf.merged([cf.store("store dKaccum_j = 0, dVaccum_j = 0", "dKaccum", rk * d * FP32_BYTES, f32, n),
                        cf.store("", "dVaccum", rk * d * FP32_BYTES, f32, n)]),
        ], grid=True)], heads=x.Hkv)])
    convert = cf.KernelNest("bwd_convert_dkv", n, 32 * warps, [cf.bh_loop(x, [
        cf.Loop(f"j in 0..{x.Tc}  kv-block", x.Tc, n, [
            cf.load("load dKaccum_j (fp32)", "dKaccum", rk * d * FP32_BYTES, f32, n, smem=False),
            cf.store("store dK_j", "dK", rk * d * e, BK * Nk * d * e, n),
            cf.load("load dVaccum_j (fp32)", "dVaccum", rk * d * FP32_BYTES, f32, n, smem=False),
            cf.store("store dV_j", "dV", rk * d * e, BK * Nk * d * e, n),
        ], grid=True)], heads=x.Hkv)])
    return zero, convert
