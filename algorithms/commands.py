"""`flashsim io` (Theorem 2's IO complexity, measured) and `flashsim explain` (a schedule as a loop nest).

Kept light at import time: the CLI imports every command module, so the work is imported when a command runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from flashsim.hw_profiles.commands import add_profile_args, profile_from_args

from .cli_args import (
    add_algo_arg,
    add_pass_arg,
    add_problem_args,
    add_tiling_args,
    problem_from_args,
    tiling_from_args,
    tiling_overridden,
)

PLOT_DIR = "flashsim-out"


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "io",
        help="IO complexity: global-memory bytes of standard, v1, v2 (--pass bwd: standard-bwd, v2-bwd, v3-bwd) "
             "as N, d and SRAM size M vary",
        description="FlashAttention's Theorem 2 measured on the schedules: standard attention moves "
        "Theta(N d + N^2) bytes, FlashAttention Theta(N^2 d^2 / M) for d <= M <= N d. M is varied through "
        "the profile's smem_per_block_max_bytes; V1's tiles follow from it (Algorithm 1) and, in this "
        "experiment, V2 runs square tiles of V1's Bc so that its tiles scale with M too. --pass bwd fits the "
        "backward schedules' exponents (their key blocks take V1's Bc), --pass fwd+bwd both passes summed.",
    )
    add_profile_args(p)
    add_pass_arg(p)
    p.add_argument("--dtype", default="fp16", help="input dtype: fp16 (default), bf16 or fp32")
    p.add_argument("--plot-dir", default=PLOT_DIR, help=f"where the PNG and SVG plots go (default ./{PLOT_DIR})")
    p.add_argument("--no-plot", action="store_true", help="skip the plots")
    p.add_argument("--json", action="store_true", help="print one JSON object (fits and points) instead of tables")
    p.set_defaults(func=_cmd_io)

    p = subparsers.add_parser(
        "explain",
        help="a schedule as a loop nest with the bytes each memory level moves",
        description="The schedule of ALGO as a loop nest: each loop with its trip count, each step with the "
        "bytes it moves between global memory, shared memory and registers per iteration and in total. "
        "The totals are checked against the op-by-op count.",
    )
    add_algo_arg(p, default=None)
    add_pass_arg(p)
    add_profile_args(p)
    add_problem_args(p)
    add_tiling_args(p)
    p.add_argument("--dq", choices=("atomic", "pass"), default="atomic",
                   help="v2-bwd: dQ added by fp32 atomics (default, as FA2) or computed in a second pass per Q block")
    p.add_argument("--no-hadamard", action="store_true", help="v3-fp8: quantise without incoherent processing")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.set_defaults(func=_cmd_explain)

    _register_memory(subparsers)


def _register_memory(subparsers: Any) -> None:
    from .catalog import names

    p = subparsers.add_parser(
        "memory",
        help="HBM each algorithm needs per pass (inputs, saved activations, gradients, workspace), and the "
             "longest sequence that fits",
        description="The global-memory footprint of one attention call per algorithm and pass: every tensor "
        "it keeps in HBM at once (Q, K, V, O, LSE; S and P for standard; dO, dQ, dK, dV, the fp32 dQ "
        "accumulator and D for the backward), its share of the profile's HBM, and the longest sequence "
        "(query = key length) whose footprint fits.",
    )
    add_profile_args(p)
    add_problem_args(p)
    add_pass_arg(p)
    p.add_argument("--algos", nargs="+", choices=names(), default=["standard", "v1", "v2", "v3"], metavar="ALGO",
                   help="algorithms (default: standard v1 v2 v3; with --pass bwd those that have a backward)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.set_defaults(func=_cmd_memory)


def _cmd_memory(args: argparse.Namespace) -> int:
    from flashsim.errors import FlashsimError

    from . import catalog
    from .pass_memory import memory_report

    profile = profile_from_args(args)
    # each algorithm's problem in its own default dtype unless --dtype names one; an algorithm that does not
    # take that dtype has no footprint in it, and is skipped like one that lacks the pass
    taken, skipped = {}, []
    for algo in args.algos:
        problem = problem_from_args(args, algo)
        try:
            catalog.check_dtype(algo, problem)
        except FlashsimError as exc:
            skipped.append({"algo": algo, "reason": str(exc)})
            continue
        taken[algo] = problem
    if not taken:
        raise FlashsimError("no algorithm takes this dtype: " + "; ".join(r["reason"] for r in skipped))
    parts = []
    for problem in dict.fromkeys(taken.values()):  # one report per dtype
        group = [a for a, p in taken.items() if p == problem]
        try:
            parts.append(memory_report(group, problem, args.pass_, profile))
        except FlashsimError as exc:  # none of the group has the pass: the reasons its message lists
            skipped.append({"algo": ", ".join(group), "reason": str(exc).removeprefix("no algorithm has this pass: ")})
    if not parts:
        raise FlashsimError("no algorithm has this pass: " + "; ".join(r["reason"] for r in skipped))
    report = {**parts[0], "algorithms": [dict(row, dtype=taken[row["algo"]].dtype) for part in parts
                                         for row in part["algorithms"]],
              "skipped": skipped + [r for part in parts for r in part["skipped"]]}
    report["algorithms"].sort(key=lambda row: args.algos.index(row["algo"]))
    if args.json:
        sys.stdout.write(json.dumps(report) + "\n")
        return 0
    from rich.console import Console
    from rich.table import Table

    def gib(n: float) -> str:
        for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
            if n >= size:
                v = n / size
                return f"{v:.3g} {unit}" if v < 1000 else f"{v:,.0f} {unit}"
        return f"{n:.0f} B"

    rows = report["algorithms"]
    from flashsim.simulator.report import problem_title

    shown = problem_title((row["algo"], taken[row["algo"]]) for row in rows)
    table = Table(title=f"HBM per {args.pass_} pass on {profile.name} ({gib(profile.hbm_bytes)}): {shown}",
                  title_justify="left")
    table.add_column("tensor")
    for r in rows:
        table.add_column(r["algo"], justify="right")
    names_ = list(dict.fromkeys(n for r in rows for n in r["tensors"]))
    for name in names_:
        table.add_row(name, *(gib(r["tensors"][name]) if name in r["tensors"] else "-" for r in rows))
    table.add_section()
    table.add_row("total", *(gib(r["total_bytes"]) for r in rows))
    table.add_row("of HBM", *(f"{100 * r['hbm_fraction']:.1f}%" + ("" if r["fits"] else " (does not fit)")
                              for r in rows))
    table.add_row("longest seqlen that fits", *(f"{r['longest_seqlen']:,}" for r in rows))
    console = Console()
    console.print(table)
    for r in report["skipped"]:
        console.print(f"[yellow]skipped {r['algo']}: {r['reason']}[/yellow]")
    return 0


def _cmd_io(args: argparse.Namespace) -> int:
    from flashsim.experiments.io_complexity import main

    return main(args)


def _cmd_explain(args: argparse.Namespace) -> int:
    from flashsim.errors import FlashsimError

    from .backward import pass_algos
    from .explain import explain

    profile = profile_from_args(args)
    algos = pass_algos(args.algo, args.pass_)
    if len(algos) > 1 and tiling_overridden(args):
        raise FlashsimError("tile options apply to one pass: use them with --pass fwd or --pass bwd")
    results = []
    for algo in algos:
        problem = problem_from_args(args, algo)
        tiling = tiling_from_args(args, algo, problem, profile)  # refuses a dtype the algorithm lacks
        results.append(explain(algo, problem, tiling, hadamard=not args.no_hadamard, dq=args.dq))
    if args.json:
        out = results[0].as_dict() if len(results) == 1 else {"passes": [r.as_dict() for r in results]}
        sys.stdout.write(json.dumps(out) + "\n")
    else:
        sys.stdout.write("\n".join(r.text() for r in results))
    return 0
