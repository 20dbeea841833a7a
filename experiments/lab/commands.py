"""`flashsim lab` (experiments that test FlashAttention's claims) and `flashsim numerics` (one row through
the online softmax). Light at import time: the experiments load when a command runs."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from flashsim.errors import FlashsimError


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "lab",
        help="experiments that test what FlashAttention is taught by: a claim, a plot, a verdict",
        description="Each experiment states a claim, runs the numeric, counting and timing interpreters with "
        "controlled variables, writes a plot (PNG) and its numbers (JSON), and says whether the claim HOLDS.",
    )
    p.add_argument("--list", action="store_true", help="the experiments and their claims")
    sub = p.add_subparsers(dest="lab_command", metavar="ACTION")
    run = sub.add_parser("run", help="run one experiment (or --all)")
    run.add_argument("name", nargs="?", help="experiment name (see flashsim lab --list)")
    run.add_argument("--all", action="store_true", help="run every experiment")
    run.add_argument("--out", default=None,
                     help="directory for the PNG and JSON files (default: experiments/results/lab inside the "
                     "repository, else ./flashsim-out/lab)")
    run.add_argument("--quick", action="store_true", help="the small sizes the tests use")
    run.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.set_defaults(func=_cmd_lab, lab_parser=p)

    p = subparsers.add_parser(
        "numerics",
        help="one query row through the online softmax: m, l and the output's error after each K/V block",
        description="Runs V2's schedule in the numeric interpreter on random Q, K, V (fp32) and reports, for "
        "query row R after every K/V block, the running max m, the running sum l and the relative error of "
        "the current output against the exact softmax row.",
    )
    p.add_argument("--row", type=int, required=True, help="query row to trace")
    p.add_argument("--seqlen", type=int, default=1024, help="sequence length N (default 1024)")
    p.add_argument("--headdim", type=int, default=64, help="head dim d (default 64)")
    p.add_argument("--block-n", type=int, default=128, help="keys per K/V block (default 128)")
    p.add_argument("--seed", type=int, default=0, help="random seed of Q, K, V (default 0)")
    p.add_argument("--causal", action="store_true", help="causal mask")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.set_defaults(func=_cmd_numerics)


def _console():
    from rich.console import Console

    console = Console()
    return console if console.is_terminal else Console(width=140)


def _cmd_lab(args: argparse.Namespace) -> int:
    from . import experiments

    if args.list:
        return _print_list(experiments())
    if args.lab_command is None:
        args.lab_parser.print_help()
        return 2
    if args.all == bool(args.name):
        raise FlashsimError("lab run needs an experiment name or --all (not both)")
    from .runner import default_out_dir, run_all, run_one

    out = args.out if args.out is not None else default_out_dir()
    console = None if args.json else _console()
    if args.all:
        results = run_all(out, args.quick, on_done=(lambda r: _print_result(r, console)) if console else None)
    else:
        results = [run_one(args.name, out, args.quick)]
        if console:
            _print_result(results[0], console)
    if args.json:
        sys.stdout.write(json.dumps(results[0] if len(results) == 1 and not args.all else results) + "\n")
    else:
        held = sum(r["holds"] for r in results)
        console.print(f"{held} of {len(results)} claims hold; plots and numbers in {out}")
    return 0


def _print_list(found: dict) -> int:
    from rich import box
    from rich.table import Table

    table = Table(title="flashsim lab: run one with `flashsim lab run NAME`", box=box.SIMPLE_HEAD)
    table.add_column("experiment", no_wrap=True)
    table.add_column("claim")
    for name, module in found.items():
        table.add_row(name, module.CLAIM)
    _console().print(table)
    return 0


def _print_result(result: dict, console) -> None:
    mark = "[bold green]HOLDS[/]" if result["holds"] else "[bold red]DOES NOT HOLD[/]"
    console.print(f"[bold]{result['name']}[/]: {result['claim']}")
    console.print(f"  {mark}: {result['verdict']}", highlight=False)


def _cmd_numerics(args: argparse.Namespace) -> int:
    from .numerics import print_trace, trace_row

    result = trace_row(args.row, args.seqlen, args.headdim, args.block_n, args.seed, args.causal)
    if args.json:
        sys.stdout.write(json.dumps(result) + "\n")
    else:
        print_trace(result, _console())
    return 0
