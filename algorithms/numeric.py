"""The numeric interpreter: runs a schedule's ops on tensors, tile by tile, on the CPU.

It emulates the precision of the kernels: tiles stored to global memory are rounded to their element type,
GEMM operands to the instruction's input type, accumulation is fp32. The warp roles of a thread block run as
coroutines that switch whenever one waits on a barrier that has not been reached, so a schedule with a
wrong barrier protocol deadlocks (an error) or computes the wrong numbers (a failing test).
"""

from __future__ import annotations

import itertools
import math

import torch
from flashsim.errors import FlashsimError

from .ir import (
    RMEM,
    Arrive,
    AtomicAdd,
    BlockSetup,
    Code,
    Fill,
    Gemm,
    GemmWait,
    GTile,
    Load,
    LseExp,
    Mask,
    MergeSplits,
    Normalize,
    OnlineSoftmax,
    Quantize,
    Rescale,
    RescaleMerge,
    RowDot,
    RowMax,
    RowSoftmax,
    Schedule,
    SoftmaxGrad,
    Store,
    StoreShared,
    SyncThreads,
    Wait,
    WarpReduce,
)
from .problem import Problem

FP8_MAX = 448.0
_TORCH_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


class ScheduleError(FlashsimError):
    """A schedule that cannot run: a deadlock or a read of a buffer nothing wrote."""


def round_to(x: torch.Tensor, dtype: str) -> torch.Tensor:
    """Round fp32 values to `dtype` and back, as storing them in that type would."""
    if dtype == "fp32":
        return x
    if dtype == "fp8":
        return x.clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn).to(torch.float32)
    return x.to(_TORCH_DTYPES[dtype]).to(torch.float32)


def _elem_dtype(p: Problem, elem_bytes: int) -> str:
    if elem_bytes == 4:
        return "fp32"
    if elem_bytes == 1:
        return "fp8"
    return p.dtype if p.dtype in ("fp16", "bf16") else "bf16"


def hadamard_matrix(d: int, seed: int) -> torch.Tensor:
    """diag(random +-1) H_d / sqrt(d): orthogonal, so (Q M)(K M)^T = Q K^T, and it spreads outliers.
    Head dims that are not a power of two (96, 192) use a block-diagonal H of the largest power of two
    dividing d, still orthogonal."""
    n = d & -d
    h = torch.ones(1, 1)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    h = torch.block_diag(*[h] * (d // n))
    gen = torch.Generator().manual_seed(seed)
    signs = torch.randint(0, 2, (d,), generator=gen).float() * 2 - 1
    return signs[:, None] * h / math.sqrt(n)


def global_shape(p: Problem, name: str) -> tuple[int, int, int, int]:
    """Shape (B, heads, rows, cols) of every global tensor a schedule may name."""
    kv = name.removeprefix("d")[:1] in ("K", "V")  # dK, dV and their fp32 accumulators too
    heads = p.kv_heads if kv else p.heads
    rows = p.seqlen_k if kv else p.seqlen_q
    if name in ("S", "P", "dP", "dS"):
        return p.batch, p.heads, p.seqlen_q, p.seqlen_k
    if name in ("LSE", "M", "L", "D") or name.endswith("scale"):
        return p.batch, heads, max(p.seqlen_q, p.seqlen_k), 1
    return p.batch, heads, rows, p.headdim


class _Memory:
    """Global tensors, allocated on first touch."""

    def __init__(self, p: Problem, inputs: dict[str, torch.Tensor], shapes: dict | None = None):
        self.p = p
        self.shapes = shapes or {}
        self.t = {k: v.to(torch.float32) for k, v in inputs.items()}

    def view(self, g: GTile) -> torch.Tensor:
        if g.tensor not in self.t:
            shape = self.shapes.get(g.tensor) or global_shape(self.p, g.tensor)
            self.t[g.tensor] = torch.full(shape, float("nan"))
        return self.t[g.tensor][g.batch, g.head, g.row:g.row + g.rows, g.col:g.col + g.cols]


def _masked(s: torch.Tensor, mask: Mask | None) -> torch.Tensor:
    if mask is None:
        return s
    rows = torch.arange(s.shape[0])[:, None] + mask.row0
    if mask.packed:
        rows = rows % mask.packed
    cols = torch.arange(s.shape[1])[None, :] + mask.col0
    hidden = cols >= mask.seqlen_k
    if mask.causal:
        hidden = hidden | (cols > rows + mask.shift)
    return s.masked_fill(hidden, -math.inf)


def _exp_shifted(s: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """exp(s - m) with rows whose max is -inf (nothing visible yet) giving 0, not NaN."""
    safe = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    return torch.exp(s - safe)


class _Cta:
    """One thread block: shared memory, barrier counters, and a register file per role."""

    def __init__(self, mem: _Memory, p: Problem):
        self.mem, self.p = mem, p
        self.smem: dict[str, torch.Tensor] = {}
        self.barriers: dict[str, int] = {}

    def run(self, programs: dict[str, object]) -> None:
        regs = {name: {} for name in programs}
        pending = {name: None for name in programs}  # the Wait a role is parked on
        live = dict(programs)
        while live:
            progressed = False
            for name in list(live):
                gen = live[name]
                while True:
                    op = pending[name]
                    if op is not None:
                        if self.barriers.get(op.barrier, 0) < op.target:
                            break
                        pending[name] = None
                    try:
                        op = next(gen)
                    except StopIteration:
                        del live[name]
                        progressed = True
                        break
                    progressed = True
                    if isinstance(op, Wait):
                        pending[name] = op
                        continue
                    self.execute(op, regs[name])
            if live and not progressed:
                waits = ", ".join(f"{n} on {pending[n].barrier} >= {pending[n].target} "
                                  f"(has {self.barriers.get(pending[n].barrier, 0)})" for n in live)
                raise ScheduleError(f"schedule deadlocks: {waits}")

    def get(self, regs: dict, name: str) -> torch.Tensor:
        if name in regs:
            return regs[name]
        if name in self.smem:
            return self.smem[name]
        raise ScheduleError(f"schedule reads buffer {name!r} before anything wrote it")

    def execute(self, op, regs: dict) -> None:
        p = self.p
        if isinstance(op, Load):
            tile = self.mem.view(op.src).clone()
            where = regs if op.level == RMEM else self.smem
            where[op.dst] = tile if op.dst_row is None else _placed(where.get(op.dst), op.dst_row, tile)
            if op.barrier:
                self.barriers[op.barrier] = self.barriers.get(op.barrier, 0) + 1
        elif isinstance(op, Store):
            value = self.get(regs, op.src)
            view = self.mem.view(op.dst)
            value = value[op.src_row: op.src_row + view.shape[0], : view.shape[1]]
            view.copy_(round_to(value, _elem_dtype(p, op.dst.elem_bytes)))
        elif isinstance(op, Gemm):
            self._gemm(op, regs)
        elif isinstance(op, OnlineSoftmax):
            self._online_softmax(op, regs)
        elif isinstance(op, RowMax):
            s = _masked(regs[op.s], op.mask)
            regs[op.s] = s
            regs[op.out] = torch.maximum(regs[op.m][: s.shape[0]], (s * op.scale).amax(1, keepdim=True))
        elif isinstance(op, Rescale):
            regs[op.acc] = regs[op.acc] * regs[op.corr]
        elif isinstance(op, RescaleMerge):
            self._rescale_merge(op, regs)
        elif isinstance(op, WarpReduce):
            regs[op.dst] = self.get(regs, op.src).sum(0)
        elif isinstance(op, Normalize):
            l = regs[op.l]
            regs[op.acc] = torch.where(l > 0, regs[op.acc] / torch.where(l > 0, l, 1.0), 0.0)
            if op.lse:
                regs[op.lse] = torch.where(l > 0, regs[op.m] + torch.log(l), math.inf)
        elif isinstance(op, MergeSplits):
            self._merge_splits(op, regs)
        elif isinstance(op, RowSoftmax):
            s = _masked(self.get(regs, op.s) * op.scale, op.mask)
            m = s.amax(1, keepdim=True)
            e = _exp_shifted(s, m)
            total = e.sum(1, keepdim=True)
            regs[op.p] = torch.where(total > 0, e / torch.where(total > 0, total, 1.0), 0.0)
        elif isinstance(op, Quantize):
            x = self.get(regs, op.src)
            if op.hadamard_seed is not None:
                x = x @ hadamard_matrix(x.shape[1], op.hadamard_seed)
            delta = (x.abs().max() / FP8_MAX).clamp_min(1e-12)
            regs[op.dst] = round_to(x / delta, "fp8")
            regs[op.scale] = delta.reshape(1, 1)
        elif isinstance(op, Fill):
            regs[op.dst] = torch.full((op.rows, op.cols), op.value)
        elif isinstance(op, AtomicAdd):
            view = self.mem.view(op.dst)
            view += self.get(regs, op.src)[: view.shape[0], : view.shape[1]]
        elif isinstance(op, StoreShared):
            self.smem[op.dst] = self.get(regs, op.src).clone()
        elif isinstance(op, RowDot):
            a, b = self.get(regs, op.a), self.get(regs, op.b)
            regs[op.dst] = (a * b).sum(1, keepdim=True)
        elif isinstance(op, LseExp):
            s = _masked(self.get(regs, op.s) * op.scale, op.mask)
            lse = self.get(regs, op.lse)[: s.shape[0]]
            regs[op.p] = torch.exp(s - lse)  # masked (-inf) and fully masked rows (LSE = inf) give 0
        elif isinstance(op, SoftmaxGrad):
            p_, dp = self.get(regs, op.p), self.get(regs, op.dp)
            d = self.get(regs, op.d)[: p_.shape[0]]
            regs[op.ds] = op.scale * p_ * (dp - d)
        elif isinstance(op, Arrive):
            self.barriers[op.barrier] = self.barriers.get(op.barrier, 0) + op.count
        elif isinstance(op, (SyncThreads, GemmWait, Code, BlockSetup)):
            pass  # ordering (code fetch, set-up latency) only: program order already holds in this interpreter
        else:
            raise ScheduleError(f"numeric interpreter has no rule for {type(op).__name__}")

    def _gemm(self, op: Gemm, regs: dict) -> None:
        a = round_to(self.get(regs, op.a), op.dtype)
        b = round_to(self.get(regs, op.b), op.dtype)
        if op.trans_a:
            a = a.T
        if op.trans_b:
            b = b.T
        rows = min(a.shape[0], op.m)
        kk = min(a.shape[1], b.shape[0])
        out = a[:rows, :kk] @ b[:kk]
        if op.a_scale:
            out = out * self.get(regs, op.a_scale)
        if op.b_scale:
            out = out * self.get(regs, op.b_scale)
        if op.split == "k":
            # split-K: each warp multiplies its slice of k; the partials stay separate until WarpReduce.
            edges = [kk * w // op.warps for w in range(op.warps + 1)]
            out = torch.stack([a[:rows, lo:hi] @ b[lo:hi] for lo, hi in itertools.pairwise(edges)])
        if op.accumulate:
            prev = regs[op.dst]
            out = prev[: out.shape[0]] + out if out.shape[0] < prev.shape[0] else prev + out
        regs[op.dst] = out

    def _online_softmax(self, op: OnlineSoftmax, regs: dict) -> None:
        s = _masked(regs[op.s] * op.scale, op.mask)
        rows = s.shape[0]
        if op.mode == "local":
            m_tile = s.amax(1, keepdim=True)
            e = _exp_shifted(s, m_tile)
            regs[op.p] = e
            regs[op.m] = m_tile
            regs[op.l] = e.sum(1, keepdim=True)
            return
        m_old = regs[op.m][:rows]
        m_new = regs[op.max_in][:rows] if op.max_in else torch.maximum(m_old, s.amax(1, keepdim=True))
        corr = torch.where(torch.isinf(m_new), torch.ones_like(m_new), torch.exp(m_old - m_new))
        e = _exp_shifted(s, m_new)
        regs[op.p] = e
        regs[op.m] = m_new
        regs[op.l] = regs[op.l][:rows] * corr + e.sum(1, keepdim=True)
        if op.corr:
            regs[op.corr] = corr
        elif op.acc:
            regs[op.acc] = regs[op.acc][:rows] * corr

    def _merge_splits(self, op: MergeSplits, regs: dict) -> None:
        lse = self.get(regs, op.lse_parts).reshape(op.splits, -1, 1)
        o = self.get(regs, op.o_parts).reshape(op.splits, lse.shape[1], -1)
        seen = torch.isfinite(lse)
        top = torch.where(seen, lse, -math.inf).amax(0)
        safe_top = torch.where(torch.isfinite(top), top, 0.0)
        weight = torch.where(seen, torch.exp(torch.where(seen, lse, 0.0) - safe_top), 0.0)
        total = weight.sum(0)
        regs[op.o] = torch.where(total > 0, (weight * torch.where(seen, o, 0.0)).sum(0) / total.clamp_min(1e-30), 0.0)
        regs[op.lse] = torch.where(total > 0, safe_top + torch.log(total.clamp_min(1e-30)), math.inf)

    def _rescale_merge(self, op: RescaleMerge, regs: dict) -> None:
        m_t, l_t, pv = regs[op.m_tile], regs[op.l_tile], regs[op.pv]
        rows = pv.shape[0]  # a ragged last Q block has fewer rows than the tile
        m, l, o = regs[op.m][:rows], regs[op.l][:rows], self.get(regs, op.o)[:rows]
        m_new = torch.maximum(m, m_t)
        a = torch.where(torch.isinf(m), torch.zeros_like(m), torch.exp(m - m_new))
        c = torch.where(torch.isinf(m_t), torch.zeros_like(m_t), torch.exp(m_t - m_new))
        l_new = a * l + c * l_t
        safe = torch.where(l_new > 0, l_new, 1.0)
        regs[op.o] = torch.where(l_new > 0, (a * l * o + c * pv) / safe, 0.0)
        regs[op.m], regs[op.l] = m_new, l_new


def _placed(buffer: torch.Tensor | None, row: int, tile: torch.Tensor) -> torch.Tensor:
    """buffer with tile written at `row`, grown (zero rows) to hold it."""
    rows = row + tile.shape[0]
    if buffer is None or buffer.shape[0] < rows:
        grown = torch.zeros(rows, tile.shape[1])
        if buffer is not None:
            grown[: buffer.shape[0]] = buffer
        buffer = grown
    buffer[row:rows] = tile
    return buffer


def run_numeric(schedule: Schedule, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Run every kernel of the schedule over its whole grid; returns the global tensors afterwards.

    Tiles are small, so torch's thread pool costs more than it saves: run single-threaded."""
    p = schedule.problem
    mem = _Memory(p, inputs, schedule.shapes)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for kernel in schedule.kernels:
            if kernel.carry is not None:
                _run_carried(kernel, mem, p)
                continue
            for cta in kernel.ctas:
                _Cta(mem, p).run({role.name: role.program(cta) for role in kernel.roles})
    finally:
        torch.set_num_threads(threads)
    return mem.t


# Blocks a kernel whose blocks run on from tile to tile (Kernel.carry) deals its tiles to, in turn.
CARRIED_BLOCKS = 3


def _run_carried(kernel, mem: _Memory, p: Problem) -> None:
    """Each block runs its tiles one after another on one set of barriers and shared buffers, every role's
    programs chained as the simulator chains them: a barrier target or a ring slot counted wrong from the
    state carried over deadlocks or reads another tile's data."""
    for first in range(min(CARRIED_BLOCKS, len(kernel.ctas))):
        tiles, state = [], None
        for cta in kernel.ctas[first::CARRIED_BLOCKS]:
            tiles.append((cta, state))
            state = kernel.carry(state, cta)
        _Cta(mem, p).run({role.name: itertools.chain.from_iterable([role.program(cta, s) for cta, s in tiles])
                          for role in kernel.roles})

