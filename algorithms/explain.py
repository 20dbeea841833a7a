"""A schedule as a loop nest with the bytes each level moves (Timeloop's map.txt, for attention).

The nest is algorithms/closed_form.py's: loops with trip counts, steps with what one execution moves (full
tiles) and what all executions move in the launch (exact). The totals are checked against the op-by-op count
(algorithms/counting.py) every time, so the printout cannot drift from the schedules.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

from flashsim.units import format_bytes

from . import catalog
from .closed_form import KernelNest, Loop, Step, fold, loop_nest
from .counting import IOCounts, count_io
from .dag import CriticalPath, critical_path
from .problem import Problem
from .splitkv import COMBINE_KERNEL
from .tiling import Tiling

_W = 46  # width of the loop-nest column; with the others a line stays within 120 columns
_GMEM = ("gmem_read", "gmem_write", "gmem_atomic")  # atomics: the backward's fp32 reduce-adds
_SMEM = ("smem_read", "smem_write")

def human_bytes(n: float) -> str:
    """A size for the loop-nest columns: "-" for nothing moved."""
    return format_bytes(n) if n else "-"


def human_count(n: float) -> str:
    for unit in ("", "k", "M", "G", "T", "P"):
        if n < 1000 or unit == "P":
            return f"{n:.0f}" if unit == "" else f"{n:.3g}{unit}"
        n /= 1000
    return ""


@dataclass
class Explanation:
    algo: str
    problem: Problem
    tiling: Tiling
    nests: list[KernelNest]
    totals: IOCounts  # from the nest
    counted: IOCounts  # from walking the ops
    critical: list[CriticalPath]  # per kernel, through one thread block's op graph

    @property
    def agrees(self) -> bool:
        return self.totals.as_dict() == self.counted.as_dict()

    def text(self) -> str:
        p, t = self.problem, self.tiling
        out = [f"{self.algo}: {p.describe()}; tiles {t.describe()}"]
        head = f"{'':<{_W}} {'path':<12} {'execs':>7} {'gmem/it':>9} {'gmem':>9} {'smem/it':>9} {'smem':>9}  work/it"
        for k, nest in enumerate(self.nests, 1):
            grid = "work tiles (persistent grid)" if nest.persistent else "thread blocks"
            if nest.ctas == 1:
                grid = grid.replace("tiles", "tile").replace("blocks", "block")
            out += ["", f"kernel {k}/{len(self.nests)} {nest.name}: {nest.ctas} {grid} x {nest.threads} threads",
                    head]
            out += _lines(nest.body, 0)
            io = self.totals.kernels[k - 1]
            out.append(textwrap.fill(f"total: gmem {human_bytes(io.gmem_bytes)} (read {_by_tensor(io.gmem_read)}; "
                                     f"write {_by_tensor(io.gmem_write)}"
                                     + (f"; atomic {_by_tensor(io.gmem_atomic)}" if io.gmem_atomic else "")
                                     + f"), smem {human_bytes(io.smem_bytes)}",
                                     118, initial_indent="  ", subsequent_indent="    "))
            cp = self.critical[k - 1]
            out.append(textwrap.fill(
                f"critical path of thread block {cp.cta} (op graph): {cp.length} of {cp.ops} ops, "
                f"{human_count(cp.flops)} tensor FLOPs, {human_bytes(cp.bytes)} loaded/stored ({cp.kinds_text()})",
                118, initial_indent="  ", subsequent_indent="    "))
        tot = self.totals
        out += ["", f"schedule total: gmem {human_bytes(tot.gmem_bytes)} ({tot.gmem_bytes} B), "
                    f"smem {human_bytes(tot.smem_bytes)} ({tot.smem_bytes} B), "
                    f"{human_count(sum(tot.flops.values()))} tensor FLOPs, {human_count(tot.exps)} exps",
                textwrap.fill(catalog.get(self.algo).why.format(tc=-(-p.seqlen_k // t.block_n),
                                                     tr=-(-p.seqlen_q // t.block_m), stages=t.stages)
                              + self.split_why(), 118),
                "totals agree with the op-by-op count" if self.agrees
                else "WARNING: totals differ from the op-by-op count (a bug in the nest or the schedule)"]
        return "\n".join(out) + "\n"

    def split_why(self) -> str:
        """Split-KV's line: how the K/V range is cut and what the combine costs in global memory."""
        if self.nests[-1].name != COMBINE_KERNEL:
            return ""
        combine = self.totals.kernels[-1]
        return (f" Split-KV: each q-block's K/V blocks are cut into {self.tiling.splits} contiguous ranges, one "
                f"thread block each, whose fp32 partial O and LSE cross global memory twice (written, then read "
                f"by the combine: {human_bytes(combine.gmem_bytes)} in the combine kernel).")

    def as_dict(self) -> dict:
        return {
            "algo": self.algo,
            "problem": self.problem.as_dict(),
            "tiling": self.tiling.as_dict(),
            "kernels": [{"name": n.name, "ctas": n.ctas, "threads": n.threads, "persistent": n.persistent,
                         "nest": [_node_dict(x) for x in n.body]} for n in self.nests],
            "totals": self.totals.as_dict(),
            "counted": self.counted.as_dict(),
            "agrees_with_count": self.agrees,
            "critical_paths": [c.as_dict() for c in self.critical],
        }


def explain(algo: str, problem: Problem, tiling: Tiling, hadamard: bool = True, **options) -> Explanation:
    """options: other schedule options (v2-bwd's dq), passed to the records that take them."""
    nests = loop_nest(algo, problem, tiling, hadamard, **options)
    schedule = catalog.get(algo).schedule(problem, tiling, hadamard=hadamard, **options)
    return Explanation(algo, problem, tiling, nests, fold(algo, nests), count_io(schedule),
                       [critical_path(k) for k in schedule.kernels])


def _by_tensor(c) -> str:
    return ", ".join(f"{k} {human_bytes(v)}" for k, v in sorted(c.items()) if v) or "-"


def _sum(step: Step, kinds: tuple[str, ...], attr: str) -> int:
    return sum(getattr(e, attr) for e in step.effects if e.kind in kinds)


def _work(step: Step) -> str:
    parts = []
    for e in step.effects:
        if e.kind == "flops":
            parts.append(f"{human_count(e.per_iter)} FLOP")
        elif e.kind == "exps" and e.per_iter:
            parts.append(f"{human_count(e.per_iter)} exp")
        elif e.kind == "alu_flops" and e.per_iter and not any(x.kind == "exps" and x.per_iter for x in step.effects):
            parts.append(f"{human_count(e.per_iter)} alu")  # shown only when there is no exp
    return ", ".join(parts)


def _lines(body: list, depth: int) -> list[str]:
    lines = []
    pad = "  " * (depth + 1)
    for node in body:
        if isinstance(node, Loop):
            tag = " [grid]" if node.grid else ""
            note = f" ({node.note})" if node.note else ""
            head = f"for {node.var}" if " in " in node.var else f"{node.var}:"
            lines.append(f"{pad + head + tag + note:<{_W + 13}} {node.execs:>7}")
            lines += _lines(node.body, depth + 1)
        else:
            lines.append(
                f"{pad + node.text + (f' ({node.when})' if node.when else ''):<{_W}} {node.path:<12} {node.execs:>7} "
                f"{human_bytes(_sum(node, _GMEM, 'per_iter')):>9} {human_bytes(_sum(node, _GMEM, 'total')):>9} "
                f"{human_bytes(_sum(node, _SMEM, 'per_iter')):>9} {human_bytes(_sum(node, _SMEM, 'total')):>9}"
                f"  {_work(node)}".rstrip()
            )
    return lines


def _node_dict(node) -> dict:
    if isinstance(node, Loop):
        return {"loop": node.var, "trip": node.trip, "execs": node.execs, "grid": node.grid, "note": node.note,
                "body": [_node_dict(x) for x in node.body]}
    return {"step": node.text, "when": node.when, "path": node.path, "execs": node.execs,
            "effects": [{"kind": e.kind, "key": e.key, "per_iter": e.per_iter, "total": e.total}
                        for e in node.effects]}
