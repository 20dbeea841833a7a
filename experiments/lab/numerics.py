"""`flashsim numerics`: one query row through V2's online softmax, block by block.

The numeric interpreter runs V2's own program; the program is only extended with Stores that copy the
running max m, the running sum l and the unnormalised output of the traced Q block to workspace tensors
after each K/V block (fp32 stores, so nothing is rounded on the way). Beside it the same recurrence is
replayed in fp64, to show that the end point is the exact row up to the arithmetic's own rounding."""

from __future__ import annotations

import math
from dataclasses import replace

from flashsim.errors import FlashsimError

BLOCK_M = 64
TRACE = "trace_"  # workspace tensor prefix (a name no schedule uses)


def _observed(program, p, block_n: int):
    """The role's program with Stores of m, l and acc after each K/V block's P V product."""
    from flashsim.algorithms.ir import FP32_BYTES, Gemm, GTile, OnlineSoftmax, Store

    def wrapped(cta):
        b, h, i = cta
        softmax, step = None, 0
        for op in program(cta):
            yield op
            if isinstance(op, OnlineSoftmax):
                softmax = op
            elif isinstance(op, Gemm) and softmax is not None and op.dst == softmax.acc:
                row0, rows = i * softmax.rows, softmax.rows
                for name, cols in ((softmax.m, 1), (softmax.l, 1), (softmax.acc, p.headdim)):
                    yield Store(name, GTile(f"{TRACE}{name}{step}", b, h, row0, rows, 0, cols, FP32_BYTES))
                step += 1

    return wrapped


def trace_row(row: int, seqlen: int = 1024, headdim: int = 64, block_n: int = 128, seed: int = 0,
              causal: bool = False) -> dict:
    """m, l and the output's relative error after each K/V block, for query `row` of random Q, K, V."""
    import torch
    from flashsim.algorithms import Problem, Tiling
    from flashsim.algorithms.numeric import run_numeric
    from flashsim.algorithms.schedules import build

    if not 0 <= row < seqlen:
        raise FlashsimError(f"--row must be in [0, {seqlen}) for --seqlen {seqlen}, got {row}")
    if block_n <= 0:
        raise FlashsimError(f"--block-n must be positive, got {block_n}")
    p = Problem(1, 1, seqlen, headdim, causal=causal, dtype="fp32")
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(1, 1, seqlen, headdim, generator=gen, dtype=torch.float64) for _ in range(3))
    schedule = build("v2", p, Tiling(BLOCK_M, block_n, 4, 2))
    kernel = schedule.kernels[0]
    roles = tuple(replace(r, program=_observed(r.program, p, block_n)) for r in kernel.roles)
    kernel = replace(kernel, ctas=[(0, 0, row // BLOCK_M)], roles=roles)  # only the block holding the row
    mem = run_numeric(replace(schedule, kernels=(kernel,)), {"Q": q.float(), "K": k.float(), "V": v.float()})

    s = (q[0, 0, row] @ k[0, 0].T) * p.scale  # the row's scores, fp64
    if causal:
        s[row + 1:] = -math.inf
    exact = torch.softmax(s, 0) @ v[0, 0]
    steps = []
    m64, l64, acc64 = -math.inf, 0.0, torch.zeros(headdim, dtype=torch.float64)
    j = 0
    while f"{TRACE}m{j}" in mem:
        lo, hi = j * block_n, min(seqlen, (j + 1) * block_n)
        m = float(mem[f"{TRACE}m{j}"][0, 0, row, 0])
        l = float(mem[f"{TRACE}l{j}"][0, 0, row, 0])
        out = mem[f"{TRACE}acc{j}"][0, 0, row].double() / l
        seen = s[:hi]
        m_direct = float(seen.max())
        l_direct = float((seen - m_direct).exp().sum())
        block = s[lo:hi]  # the fp64 replay of the same recurrence
        m_new = max(m64, float(block.max()))
        if m_new > -math.inf:
            corr = math.exp(m64 - m_new) if m64 > -math.inf else 0.0
            e = (block - m_new).exp()
            l64 = l64 * corr + float(e.sum())
            acc64 = acc64 * corr + e @ v[0, 0, lo:hi]
            m64 = m_new
        steps.append({
            "block": j, "keys": [lo, hi], "m": m, "l": l, "m_direct": m_direct, "l_direct": l_direct,
            "rel_error": _rel(out, exact),
            "rel_error_fp64_replay": _rel(acc64 / l64, exact) if l64 > 0 else math.inf,
        })
        j += 1
    return {"row": row, "seqlen": seqlen, "headdim": headdim, "block_m": BLOCK_M, "block_n": block_n,
            "seed": seed, "causal": causal, "steps": steps,
            "final_rel_error": steps[-1]["rel_error"],
            "final_rel_error_fp64_replay": steps[-1]["rel_error_fp64_replay"]}


def _rel(out, exact) -> float:
    return float((out - exact).norm() / exact.norm())


def print_trace(result: dict, console) -> None:
    from rich import box
    from rich.table import Table

    mask = ", causal" if result["causal"] else ""
    table = Table(title=f"Row {result['row']} through V2's online softmax (N={result['seqlen']}, "
                        f"d={result['headdim']}, K/V blocks of {result['block_n']}{mask})", box=box.SIMPLE_HEAD)
    for col in ("block", "keys", "running max m", "running sum l", "l (direct)", "rel. error of O",
                "fp64 replay"):
        table.add_column(col, justify="right", no_wrap=True)
    for st in result["steps"]:
        table.add_row(str(st["block"]), f"{st['keys'][0]}..{st['keys'][1] - 1}", f"{st['m']:.6g}",
                      f"{st['l']:.6g}", f"{st['l_direct']:.6g}", f"{st['rel_error']:.2e}",
                      f"{st['rel_error_fp64_replay']:.2e}")
    console.print(table)
    console.print(
        f"After the last block the output is the exact softmax row: relative error "
        f"{result['final_rel_error']:.1e} in the interpreter's fp32 arithmetic, "
        f"{result['final_rel_error_fp64_replay']:.1e} when the same recurrence runs in fp64. Before it, the "
        f"error is that of attending only to the keys seen so far, not an approximation the end keeps.")
