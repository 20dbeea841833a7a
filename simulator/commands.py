"""`flashsim simulate | compare | sweep | trace | tour`."""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
from typing import Any

from flashsim.algorithms import catalog
from flashsim.algorithms.backward import forward_names
from flashsim.algorithms.cli_args import (
    add_algo_arg,
    add_pass_arg,
    add_problem_args,
    add_tiling_args,
    problem_from_args,
    tiling_from_args,
    tiling_overridden,
)
from flashsim.algorithms.problem import Problem
from flashsim.algorithms.tiling import ALGORITHMS
from flashsim.errors import FlashsimError
from flashsim.hw_profiles.commands import add_profile_args, profile_from_args
from flashsim.hw_profiles.loader import load_profile

FA2_SEQLENS = (512, 1024, 2048, 4096, 8192, 16384)
TRACE_EVENT_LIMIT = 300_000


def _add_run_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--sms",
        type=int,
        default=None,
        help="SMs to simulate (default: a sample of 8; the chip's count = whole-chip run)",
    )
    p.add_argument("--full", action="store_true", help="simulate every SM (slower, no sampling)")
    p.add_argument("--no-extrapolate", dest="extrapolate", action="store_false",
                   help="run every block and every V1 step (no periodic skip, no outer-step probes)")
    p.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")


def _add_jobs_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--jobs", type=int, default=None,
                   help="simulator processes (default: the CPUs, at most 8; 1 runs in this process)")


def _jobs(args) -> int | None:
    jobs = getattr(args, "jobs", None)
    if jobs is not None and jobs < 1:
        raise FlashsimError(f"--jobs must be at least 1, got {jobs}")
    return jobs


def _sms(args, profile) -> int | None:
    from .api import DEFAULT_SAMPLE_SMS

    if args.full:
        return None
    if args.sms is not None:
        if args.sms <= 0:
            raise FlashsimError(f"--sms must be positive, got {args.sms}")
        return args.sms
    return DEFAULT_SAMPLE_SMS


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "simulate",
        help="predict one attention kernel's time, bytes and bottleneck",
        description="Replay a schedule on a hardware profile, cycle by cycle.",
    )
    add_algo_arg(p)
    add_pass_arg(p)
    p.add_argument("--dq", choices=("atomic", "pass"), default="atomic",
                   help="v2-bwd: dQ added by fp32 atomics (default, as FA2) or computed in a second pass")
    add_problem_args(p)
    add_tiling_args(p)
    add_profile_args(p)
    _add_run_args(p)
    p.set_defaults(func=_cmd_simulate)

    p = subparsers.add_parser("compare", help="several algorithms and/or profiles side by side")
    p.add_argument(
        "--algos",
        nargs="+",
        choices=ALGORITHMS,
        default=list(forward_names()),
        metavar="ALGO",
        help="algorithms to compare (default: every forward schedule; --pass bwd maps them to their backward)",
    )
    p.add_argument("--hws", nargs="+", default=None, metavar="NAME|PATH", help="profiles to compare (default: --hw)")
    add_pass_arg(p)
    add_problem_args(p)
    add_profile_args(p)
    _add_run_args(p)
    p.add_argument("--out", default=None, help="directory for the bar chart (default ./flashsim-out)")
    _add_jobs_arg(p)
    p.set_defaults(func=_cmd_compare)

    p = subparsers.add_parser("sweep", help="a grid of problems with a progress bar, CSV/JSON and plots")
    p.add_argument(
        "--grid",
        choices=("fa2",),
        default="fa2",
        help="fa2: seqlen 512..16k, batch 16k/seqlen, d64 x 32 heads and d128 x 16 heads, causal off/on",
    )
    p.add_argument("--algos", nargs="+", choices=ALGORITHMS, default=["v2", "v3"], metavar="ALGO")
    p.add_argument("--seqlens", nargs="+", type=int, default=list(FA2_SEQLENS), metavar="N")
    p.add_argument("--headdims", nargs="+", type=int, default=[64, 128], metavar="D")
    p.add_argument("--causal", choices=("off", "on", "both"), default="both")
    add_pass_arg(p)
    add_profile_args(p)
    _add_run_args(p)
    p.add_argument("--csv", default=None, help="write the rows as CSV here")
    p.add_argument("--out", default=None, help="directory for the plot (default ./flashsim-out)")
    _add_jobs_arg(p)
    p.set_defaults(func=_cmd_sweep)

    p = subparsers.add_parser("trace", help="timeline of one run as Chrome trace / Perfetto JSON")
    add_algo_arg(p)
    add_pass_arg(p, ("fwd", "bwd"))
    add_problem_args(p, seqlen=1024, batch=1, heads=4)
    add_tiling_args(p)
    add_profile_args(p)
    p.add_argument("--sms", type=int, default=2, help="SMs to simulate and record (default 2)")
    p.add_argument("--out", default="trace.json", help="trace file to write (default trace.json)")
    p.add_argument(
        "--max-events",
        type=int,
        default=TRACE_EVENT_LIMIT,
        help=f"refuse runs that would record more intervals (default {TRACE_EVENT_LIMIT})",
    )
    p.set_defaults(func=_cmd_trace, full=False, json=False)

    p = subparsers.add_parser("tour", help="the five schedules on one realistic problem: start here")
    add_profile_args(p)
    p.add_argument("--out", default=None, help="directory for the plot (default ./flashsim-out)")
    p.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    _add_jobs_arg(p)
    p.set_defaults(func=_cmd_tour)


def _print_json(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj, indent=2) + "\n")


def _console():
    from rich.console import Console

    return Console()


def _cmd_simulate(args) -> int:
    from .passes import pass_algos, simulate_pass
    from .report import detail_table

    profile = profile_from_args(args)
    problem = problem_from_args(args)
    algos = pass_algos(args.algo, args.pass_)
    tiling = None
    if len(algos) == 1:
        tiling = tiling_from_args(args, algos[0], problem, profile)
    elif tiling_overridden(args):
        raise FlashsimError("tile options apply to one pass: use them with --pass fwd or --pass bwd")
    result = simulate_pass(args.algo, problem, profile, args.pass_, tiling, sms=_sms(args, profile),
                           extrapolate=args.extrapolate, options={"dq": args.dq})
    if args.json:
        _print_json(result.as_dict())
    else:
        _console().print(detail_table(result))
    return 0


def _profiles(args) -> list:
    if args.hws:
        return [load_profile(name, args.hw_set) for name in args.hws]
    return [profile_from_args(args)]


def _run_many(jobs: list[tuple[str, Problem, Any]], sms_of, quiet: bool, label: str, extrapolate: bool = True,
              workers: int | None = None) -> list:
    """Simulate each (algo, problem, profile) with a progress bar on stderr; skips what a profile can't run.
    Runs are independent and deterministic, so they go to `workers` processes (default: the CPUs, at most 8)
    and come back in job order."""
    from concurrent.futures import ProcessPoolExecutor, as_completed

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    tasks = [(algo, problem, profile, sms_of(profile), extrapolate) for algo, problem, profile in jobs]
    workers = min(len(tasks), workers or min(8, os.cpu_count() or 1))
    outcomes: list = [None] * len(tasks)
    progress = Progress(
        TextColumn(label),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.description}"),
        console=Console(stderr=True),
        transient=True,
        disable=quiet and not sys.stderr.isatty(),
    )
    if workers <= 1:
        with progress:
            bar = progress.add_task("", total=len(tasks))
            for i, task in enumerate(tasks):
                progress.update(bar, description=f"{task[0]} {task[1].describe()}")
                outcomes[i] = _simulate_task(task)
                progress.advance(bar)
    else:
        # every task is submitted (so every worker forked) before the progress bar starts its thread
        pool = ProcessPoolExecutor(max_workers=workers)
        try:
            futures = {pool.submit(_simulate_task, task): i for i, task in enumerate(tasks)}
            with progress:
                bar = progress.add_task(f"{workers} processes", total=len(tasks))
                for future in as_completed(futures):
                    outcomes[futures[future]] = future.result()
                    progress.advance(bar)
        finally:
            pool.shutdown(cancel_futures=True)
    results = [out for out in outcomes if not isinstance(out, dict)]
    skipped = [out for out in outcomes if isinstance(out, dict)]
    return results, skipped


def _simulate_task(task: tuple):
    """One run (in a worker process or here): its SimResult, or a dict saying why it was skipped."""
    from .api import simulate

    algo, problem, profile, sms, extrapolate = task
    try:
        return simulate(algo, problem, profile, sms=sms, extrapolate=extrapolate)
    except FlashsimError as exc:
        return {"algo": algo, "hw": profile.name, "problem": problem.as_dict(), "reason": str(exc)}


def _cmd_compare(args) -> int:
    from .passes import combine_runs, pass_jobs
    from .report import bar_chart, out_path, results_table

    profiles = _profiles(args)
    algos, refused = pass_jobs(args.algos, args.pass_)
    jobs = []
    for profile in profiles:
        for algo in algos:
            jobs.append((algo, problem_from_args(args, algo), profile))
    results, skipped = _run_many(jobs, lambda prof: _sms(args, prof), args.json, "compare", args.extrapolate,
                                 _jobs(args)) if jobs else ([], [])
    results = combine_runs(results, args.pass_)
    skipped += [{"algo": a, "hw": "-", "reason": why} for a, why in refused]
    if not results:
        raise FlashsimError("nothing could be simulated: " + "; ".join(s["reason"] for s in skipped))
    plot = bar_chart(results, out_path(args.out, "compare.png"), f"simulated {_pass_words(args.pass_)} throughput")
    if args.json:
        _print_json({"results": [r.as_dict() for r in results], "skipped": skipped, "plot": str(plot)})
        return 0
    console = _console()
    console.print(results_table(results, "flashsim compare"))
    for s in skipped:
        console.print(f"[yellow]skipped {s['algo']} on {s['hw']}: {s['reason']}[/yellow]")
    console.print(f"bar chart: {plot}")
    return 0


def fa2_grid(seqlens, headdims, causal: str, algos) -> list[tuple[str, Problem]]:
    """The FA2/FA3 papers' benchmark grid: batch = 16k / seqlen, hidden 2048 (heads = 2048 / d)."""
    modes = {"off": (False,), "on": (True,), "both": (False, True)}[causal]
    out = []
    for d in headdims:
        if 2048 % d:
            raise FlashsimError(f"head dim {d} does not divide the grid's hidden size 2048")
        for c in modes:
            for n in seqlens:
                if n <= 0:
                    raise FlashsimError(f"sequence lengths must be positive, got {n}")
                for algo in algos:
                    dtype = catalog.get(algo).default_dtype
                    out.append((algo, Problem(max(1, 16384 // n), 2048 // d, n, d, causal=c, dtype=dtype)))
    return out


def _cmd_sweep(args) -> int:
    from .passes import combine_runs, pass_jobs
    from .report import out_path, sweep_plot

    profile = profile_from_args(args)
    algos, refused = pass_jobs(args.algos, args.pass_)
    jobs = [(algo, prob, profile) for algo, prob in fa2_grid(args.seqlens, args.headdims, args.causal, algos)]
    results, skipped = _run_many(jobs, lambda prof: _sms(args, prof), args.json, "sweep", args.extrapolate,
                                 _jobs(args)) if jobs else ([], [])
    results = combine_runs(results, args.pass_)
    skipped += [{"algo": a, "hw": profile.name, "reason": why} for a, why in refused]
    shown = [r.algo for r in results]
    args.algos = list(dict.fromkeys(shown)) or args.algos
    rows = [
        {
            "algo": r.algo,
            "hw": r.hw,
            "batch": r.problem.batch,
            "heads": r.problem.heads,
            "seqlen": r.problem.seqlen_q,
            "headdim": r.problem.headdim,
            "causal": r.problem.causal,
            "time_s": r.time_s,
            "tflops": r.tflops,
            "hbm_read": r.bytes["hbm_read"],
            "bound_by": r.bound_by,
            "sim_wall_s": r.sim["wall_s"],
        }
        for r in results
    ]
    plot = sweep_plot(rows, out_path(args.out, "sweep.png"),
                      f"simulated {_pass_words(args.pass_)} TFLOP/s on {profile.name}")
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["algo"])
            writer.writeheader()
            writer.writerows(rows)
    if args.json:
        _print_json({"hw": profile.name, "rows": rows, "skipped": skipped, "plot": str(plot)})
        return 0
    from rich.table import Table

    table = Table(title=f"flashsim sweep on {profile.name} (simulated TFLOP/s)", title_justify="left")
    for col in ("headdim", "causal", "seqlen", *args.algos):
        table.add_column(col, justify="right")
    keys = sorted({(r["headdim"], r["causal"], r["seqlen"]) for r in rows})
    for d, c, n in keys:
        cells = [
            next(
                (
                    f"{r['tflops']:.0f}"
                    for r in rows
                    if (r["headdim"], r["causal"], r["seqlen"], r["algo"]) == (d, c, n, a)
                ),
                "-",
            )
            for a in args.algos
        ]
        table.add_row(str(d), "yes" if c else "no", str(n), *cells)
    console = _console()
    console.print(table)
    console.print(f"plot: {plot}" + (f"; CSV: {args.csv}" if args.csv else ""))
    return 0


def _estimated_intervals(problem: Problem, tiling, sms: int, profile) -> float:
    """Rough count of timeline intervals a traced run records (about four per K/V block per role)."""
    blocks = problem.batch * problem.heads * (problem.seqlen_q / tiling.block_m) * (problem.seqlen_k / tiling.block_n)
    return 6 * blocks * min(1.0, sms / profile.sm_count) * (tiling.block_m / 64 if tiling.warps > 8 else 1)


def _pass_words(pass_: str) -> str:
    return {"fwd": "forward", "bwd": "backward", "fwd+bwd": "forward + backward"}[pass_]


def _cmd_trace(args) -> int:
    from .api import check_features, simulate
    from .passes import pass_algos

    args.algo = pass_algos(args.algo, args.pass_)[0]
    profile = profile_from_args(args)
    problem = problem_from_args(args)
    check_features(args.algo, problem, profile)
    tiling = tiling_from_args(args, args.algo, problem, profile)
    if args.sms <= 0:
        raise FlashsimError(f"--sms must be positive, got {args.sms}")
    estimate = _estimated_intervals(problem, tiling, args.sms, profile)
    if estimate > args.max_events:
        raise FlashsimError(
            f"the trace would hold ~{estimate:,.0f} intervals (limit {args.max_events:,}): use a "
            "smaller --seqlen/--batch/--heads, fewer --sms, or raise --max-events"
        )
    trace: list = []
    result = simulate(args.algo, problem, profile, tiling, sms=args.sms, trace=trace)
    write_chrome_trace(trace, profile.sm_clock_hz, args.out, result)
    _console().print(
        f"wrote {len(trace):,} intervals to {args.out} (open in ui.perfetto.dev or chrome://tracing); "
        f"{result.algo}: {result.time_s * 1e3:.3f} ms simulated"
    )
    return 0


def write_chrome_trace(trace: list, clock_hz: float, path: str, result) -> None:
    """Chrome trace events: one thread per track (SM slot and role, or an SM's copy engine)."""
    tracks: dict[str, int] = {}
    events = []
    to_us = 1e6 / clock_hz
    for track, name, start, end in trace:
        tid = tracks.setdefault(track, len(tracks) + 1)
        events.append(
            {
                "name": name,
                "ph": "X",
                "pid": 1,
                "tid": tid,
                "ts": start * to_us,
                "dur": (end - start) * to_us,
                "cat": name.split()[0],
            }
        )
    for track, tid in tracks.items():
        events.append({"name": "thread_name", "ph": "M", "pid": 1, "tid": tid, "args": {"name": track}})
    events.append({"name": "process_name", "ph": "M", "pid": 1, "args": {"name": f"{result.algo} on {result.hw}"}})
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump({"traceEvents": events, "displayTimeUnit": "ns", "metadata": result.as_dict()}, f)
    import os

    os.replace(tmp, path)


TOUR_PROBLEM = {"batch": 4, "heads": 16, "seqlen_q": 4096, "headdim": 128}


def _cmd_tour(args) -> int:
    from .api import DEFAULT_SAMPLE_SMS
    from .report import bar_chart, out_path, results_table

    profile = profile_from_args(args)
    jobs = []
    for algo in forward_names():
        dtype = catalog.get(algo).default_dtype
        jobs.append((algo, Problem(**TOUR_PROBLEM, dtype=dtype), profile))
    results, skipped = _run_many(jobs, lambda prof: DEFAULT_SAMPLE_SMS, args.json, "tour", workers=_jobs(args))
    if not results:
        raise FlashsimError("nothing could be simulated: " + "; ".join(s["reason"] for s in skipped))
    plot = bar_chart(results, out_path(args.out, "tour.png"), f"{results[0].problem.describe()} on {profile.name}")
    if args.json:
        _print_json({"results": [r.as_dict() for r in results], "skipped": skipped, "plot": str(plot)})
        return 0
    console = _console()
    console.print(results_table(results, f"flashsim tour: forward attention on {profile.name}"))
    for s in skipped:
        console.print(f"[yellow]skipped {s['algo']}: {s['reason']}[/yellow]")
    by = {r.algo: r for r in results}
    if "standard" in by and "v2" in by:
        console.print(
            f"- FlashAttention-2 moves {by['standard'].bytes['hbm_read'] / max(1, by['v2'].bytes['hbm_read']):.0f}x "
            f"fewer HBM bytes than standard attention and runs {by['standard'].time_s / by['v2'].time_s:.1f}x "
            "faster."
        )
    if "v3" in by and "v2" in by:
        console.print(
            f"- FlashAttention-3 (wgmma, TMA, warp specialisation) is {by['v2'].time_s / by['v3'].time_s:.2f}x "
            f"faster than V2 here; V2 is bound by {by['v2'].bound_by}, V3 by {by['v3'].bound_by}."
        )
    console.print(
        f"bar chart: {plot}\nnext: flashsim simulate --algo v3, flashsim trace --algo v3, flashsim io, "
        "flashsim explain --algo v2"
    )
    return 0
