"""Closed forms of every count of algorithms/counting.py, written as each schedule's loop nest.

Each schedule module describes itself once (its record's loop_nest, built from the pieces here) as a nest of loops
(grid and in-block) whose steps carry what one execution moves with full tiles (per_iter) and the exact total over
the launch, the latter an expression in B, H, Hkv, Nq, Nk, d, Br, Bc and the element sizes. Ragged last blocks and
causal skipping only enter through a few sums over q-blocks (visible K/V blocks, masked tiles). `closed_form` folds
the nest into IOCounts; tests check it equals the op-by-op count exactly, and `flashsim explain` prints the nest.

Notation: e input element bytes (1 for fp8 after quantisation), eo output bytes, eg GEMM operand bytes, w warps, Tr
/ Tc q / kv blocks, n_i kv blocks q-block i visits, f32 = 4 bytes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from flashsim.errors import FlashsimError

from .counting import OPERAND_BYTES, SOFTMAX_STAT_COUNT, SOFTMAX_STATS, WARP_REDUCE, IOCounts, KernelIO
from .ir import FP32_BYTES as F32
from .ir import MASK_OPS_PER_ELEMENT
from .mapping import Tiling
from .parts import causal_shift, gemm_dtype, out_bytes
from .problem import Problem

# Re-exported for the schedule modules' nests.
__all__ = ["F32", "MASK_OPS_PER_ELEMENT", "SOFTMAX_STATS", "SOFTMAX_STAT_COUNT", "WARP_REDUCE"]


@dataclass(frozen=True)
class Effect:
    """One count a step adds to: kind is a KernelIO field, key a tensor or 'instr/dtype' ('' for exps/alu)."""

    kind: str
    key: str
    per_iter: int
    total: int


@dataclass
class Step:
    """One op of the nest (path: the levels it moves data between, e.g. 'gmem->smem')."""

    text: str
    path: str
    execs: int
    effects: list[Effect]
    when: str = ""  # the condition under which it runs in its loop (e.g. 'j > 0'); '' = every iteration


@dataclass
class Loop:
    """var: the loop variable and what it walks; trip: iterations of one entry (the most, when they vary);
    execs: iterations over the whole launch; grid: the loop is the launch grid, not code in the block."""

    var: str
    trip: int
    execs: int
    body: list = field(default_factory=list)
    grid: bool = False
    note: str = ""


@dataclass
class KernelNest:
    name: str
    ctas: int
    threads: int
    body: list
    persistent: bool = False


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


class Dims:
    """The symbols of the closed forms for one problem and tiling."""

    def __init__(self, p: Problem, t: Tiling):
        self.p, self.t = p, t
        self.B, self.H, self.Hkv, self.Nq, self.Nk, self.d = (
            p.batch, p.heads, p.kv_heads, p.seqlen_q, p.seqlen_k, p.headdim)
        self.BH = self.B * self.H
        self.bm, self.bn, self.w = t.block_m, t.block_n, t.warps
        self.e, self.eo = p.elem_bytes, out_bytes(p)
        self.dt = gemm_dtype(p)
        self.eg = OPERAND_BYTES[self.dt]
        self.Tr, self.Tc = cdiv(self.Nq, self.bm), cdiv(self.Nk, self.bn)

    def rows(self, i: int) -> int:
        """Rows of q-block i (the last one may be ragged)."""
        return min(self.bm, self.Nq - i * self.bm)

    def visible(self, i: int) -> int:
        """n_i: K/V blocks q-block i visits; causal stops at the block holding the last key its last row
        sees (parts.causal_shift: bottom-right or top-left aligned)."""
        if not self.p.causal:
            return self.Tc
        last_row = min((i + 1) * self.bm, self.Nq) - 1
        keys = min(self.Nk, max(0, last_row + causal_shift(self.p) + 1))
        return cdiv(keys, self.bn)

    def masked(self, row0: int, n: int) -> int:
        """Of the first n kv tiles of a tile row starting at row0, those needing a mask: from the first
        tile that reaches past what row0 sees (causal) or past the sequence end."""
        limit = min(self.Nk, row0 + causal_shift(self.p) + 1) if self.p.causal else self.Nk
        return max(0, n - max(0, limit // self.bn))

    def kv_rows(self, n: int) -> int:
        """K (or V) rows of the first n blocks."""
        return min(n * self.bn, self.Nk)

    def kv_rows_from(self, first: int, n: int) -> int:
        """K (or V) rows of blocks first .. first + n - 1 (a split's range)."""
        return self.kv_rows(first + n) - first * self.bn if n else 0

    def masked_from(self, row0: int, first: int, n: int) -> int:
        """Of kv tiles first .. first + n - 1 of a tile row starting at row0, those needing a mask."""
        limit = min(self.Nk, row0 + causal_shift(self.p) + 1) if self.p.causal else self.Nk
        return max(0, first + n - max(first, limit // self.bn))


# -- step builders --------------------------------------------------------------------------------------


def load(text: str, tensor: str, per: int, total: int, execs: int, smem: bool = True) -> Step:
    effects = [Effect("gmem_read", tensor, per, total)]
    if smem:
        effects.append(Effect("smem_write", tensor, per, total))
    return Step(text, "gmem->smem" if smem else "gmem->rf", execs, effects)


def store(text: str, tensor: str, per: int, total: int, execs: int, tma: bool = False) -> Step:
    effects = [Effect("gmem_write", tensor, per, total)]
    if tma:  # staged in shared memory for the TMA engine
        effects += [Effect("smem_write", tensor, per, total), Effect("smem_read", tensor, per, total)]
    return Step(text, "rf->gmem tma" if tma else "rf->gmem", execs, effects)


def gemm(text: str, instr: str, dt: str, m: int, n: int, k: int, execs: int,
          a: tuple[str, int] | None, b: tuple[str, int] | None, scale: tuple[str, int] | None = None) -> Step:
    """a, b: (tensor in shared memory, bytes one execution reads of it) or None for a register operand;
    scale: likewise for an fp8 block scale read from shared memory."""
    effects = [Effect("flops", f"{instr}/{dt}", 2 * m * n * k, 2 * m * n * k * execs)]
    for operand in (a, b, scale):
        if operand:
            effects.append(Effect("smem_read", operand[0], operand[1], operand[1] * execs))
    return Step(text, "smem->rf" if a or b else "rf", execs, effects)


def atomic(text: str, tensor: str, per: int, total: int, execs: int, tma: bool = False) -> Step:
    """An fp32 reduce-add into global memory, done by the L2 (tma: staged in shared memory first)."""
    effects = [Effect("gmem_atomic", tensor, per, total)]
    if tma:
        effects += [Effect("smem_write", tensor, per, total), Effect("smem_read", tensor, per, total)]
    return Step(text, "smem->L2 add" if tma else "rf->L2 add", execs, effects)


def work(text: str, execs: int, exps: int, alu: int, alu_total: int | None = None,
          smem: tuple[str, int, int] | None = None) -> Step:
    """Non-matmul work: exps and ALU FLOPs per execution (alu_total when masking adds to some);
    smem: (key, bytes written, bytes read) per execution for what it exchanges through shared memory."""
    effects = [Effect("exps", "", exps, exps * execs),
               Effect("alu_flops", "", alu, alu * execs if alu_total is None else alu_total)]
    path = "rf"
    if smem:
        key, wr, rd = smem
        effects += [Effect("smem_write", key, wr, wr * execs), Effect("smem_read", key, rd, rd * execs)]
        path = "rf<->smem"
    return Step(text, path, execs, effects)


def when(condition: str, step: Step) -> Step:
    step.when = condition
    return step


def merged(steps: list[Step]) -> list[Step]:
    """Several steps shown as one line (the first one's text), e.g. two scale loads."""
    if not steps:
        return []
    return [Step(steps[0].text, steps[0].path, steps[0].execs, [e for s in steps for e in s.effects])]


def bh_loop(x: Dims, body: list, heads: int | None = None, var: str = "h") -> Loop:
    h = x.H if heads is None else heads
    return Loop(f"(b, {var}) in {x.B} x {h}", x.B * h, x.B * h, body, grid=True)


def per_sequence(x: Dims, nest: Callable[[Dims], KernelNest]) -> KernelNest:
    """nest(x), or for a variable-length batch the sum of each sequence's nest (its own Dims, batch 1): loops
    and steps keep the longest sequence's text and trips, executions and totals add up."""
    if not x.p.varlen:
        return nest(x)
    p = x.p
    longest = max(range(p.batch), key=p.k_len)
    parts = [nest(Dims(p.sequence(b), x.t)) for b in range(p.batch)]
    total = parts[longest]
    total.ctas = sum(n.ctas for n in parts)
    for other in (n for b, n in enumerate(parts) if b != longest):
        _add_body(total.body, other.body)
    return total


def _add_body(into: list, other: list) -> None:
    for a, b in zip(into, other, strict=True):
        a.execs += b.execs
        if isinstance(a, Loop):
            a.trip = max(a.trip, b.trip)
            _add_body(a.body, b.body)
        else:
            a.effects = [Effect(e.kind, e.key, e.per_iter, e.total + f.total)
                         for e, f in zip(a.effects, b.effects, strict=True)]


def loop_nest(algo: str, p: Problem, t: Tiling, hadamard: bool = True, **more) -> list[KernelNest]:
    """The schedule of `algo` for this problem and tiling as one loop nest per kernel."""
    from .catalog import get

    rec = get(algo)
    if rec.loop_nest is None:
        raise FlashsimError(f"{algo} has no closed form (its record has no loop_nest)")
    options = {"hadamard": hadamard, **more}  # more: other schedule options (v2-bwd's dq)
    return rec.loop_nest(Dims(p, t), **{k: v for k, v in options.items() if k in rec.options})


def walk(body: list):
    """Every step of a nest body, depth first."""
    for node in body:
        if isinstance(node, Loop):
            yield from walk(node.body)
        else:
            yield node


def fold(algo: str, nests: list[KernelNest]) -> IOCounts:
    """IOCounts from the nests' exact totals."""
    kernels = []
    for nest in nests:
        io = KernelIO(nest.name, nest.ctas)
        for step in walk(nest.body):
            for ef in step.effects:
                if ef.kind in ("exps", "alu_flops"):
                    setattr(io, ef.kind, getattr(io, ef.kind) + ef.total)
                else:
                    getattr(io, ef.kind)[ef.key] += ef.total
        for name in ("gmem_read", "gmem_write", "gmem_atomic", "smem_read", "smem_write", "flops"):
            setattr(io, name, Counter({k: v for k, v in getattr(io, name).items() if v}))
        kernels.append(io)
    return IOCounts(algo, kernels)


def closed_form(algo: str, p: Problem, t: Tiling, hadamard: bool = True, **more) -> IOCounts:
    """Every count of count_io(build(algo, p, t)), from formulas instead of walking the ops."""
    return fold(algo, loop_nest(algo, p, t, hadamard, **more))
