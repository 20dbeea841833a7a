"""`flashsim simulate | compare | sweep | trace | tour`."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from flashsim.algorithms import catalog
from flashsim.algorithms.backward import forward_names
from flashsim.algorithms.cli_args import (
    add_algo_arg,
    add_pass_arg,
    add_problem_args,
    add_splits_arg,
    add_switch_args,
    add_tiling_args,
    options_from_args,
    problem_from_args,
    takes_switches,
    tiling_from_args,
    tiling_overridden,
)
from flashsim.algorithms.problem import Problem
from flashsim.algorithms.tiling import ALGORITHMS
from flashsim.console import make_console
from flashsim.errors import FlashsimError
from flashsim.hw_profiles.commands import add_profile_args, clock_overrides, overridden, profile_from_args
from flashsim.hw_profiles.loader import load_profile

from .limits import MAX_SIMULATED_STEPS
from .runner import run_many
from .sdpa_launch import BACKENDS

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
    p.add_argument("--max-events", type=int, default=None, metavar="N",
                   help="stop a run that schedules N simulated events (exit status 2; default: no limit)")


def _add_dask_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dask", default=None, metavar="ADDRESS",
                   help="run on the workers of the Dask scheduler at ADDRESS (e.g. tcp://host:8786), not here")


def _max_events(args) -> int | None:
    if args.max_events is not None and args.max_events < 1:
        raise FlashsimError(f"--max-events must be at least 1, got {args.max_events}")
    return args.max_events


def _add_cache_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-cache", dest="cache", action="store_false",
                   help="run every point again instead of answering those run before from the result cache "
                   "($FLASHSIM_CACHE_DIR, else ~/.cache/flashsim/results)")


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
        if not 0 < args.sms <= profile.sm_count:
            raise FlashsimError(
                f"--sms must be between 1 and {profile.name}'s {profile.sm_count} SMs (--full runs them all), "
                f"got {args.sms}"
            )
        return args.sms
    return min(DEFAULT_SAMPLE_SMS, profile.sm_count)


def _cmd_cache(args) -> int:
    from . import result_cache

    if args.action == "clear":
        files, nbytes = result_cache.clear()
        out = {"dir": str(result_cache.cache_dir()), "removed": files, "bytes": nbytes}
        text = f"removed {files} kept runs ({nbytes / 1e6:.1f} MB) from {out['dir']}"
    else:
        paths = result_cache.entries()
        nbytes = sum(p.stat().st_size for p in paths)
        out = {"dir": str(result_cache.cache_dir()), "runs": len(paths), "bytes": nbytes}
        text = (f"{len(paths)} kept runs ({nbytes / 1e6:.1f} MB) in {out['dir']}; `flashsim cache clear` empties it, "
                "`--no-cache` on sweep, compare and tour runs every point again")
    if args.json:
        _print_json(out)
    else:
        _console().print(text, soft_wrap=True, markup=False)
    return 0


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
    add_switch_args(p)
    _add_run_args(p)
    p.add_argument("--no-drift-skip", dest="drift_skip", action="store_false",
                   help="leave out loop stretches only where the machine repeats them exactly (no drift skip)")
    p.add_argument("--fold", action="store_true",
                   help="run a sample's twin SMs, whose every op takes the same cycles, as one: 3-6x faster where it "
                   "applies, the same answer on most problems measured, not all (docs/SPEED.md, the fold)")
    p.add_argument("--flushed-l2", action="store_true",
                   help="start from the full, partly dirty L2 that a flush leaves, as the profiler's runs and the "
                   "validation reports do (default: an empty L2)")
    p.add_argument("--max-steps", type=int, default=MAX_SIMULATED_STEPS,
                   help="refuse runs that would interpret more tile steps, one Q block meeting one K/V block "
                   f"(default {MAX_SIMULATED_STEPS:,}, about five minutes; 0: no limit)")
    p.add_argument("--sdpa", choices=BACKENDS, default=None,
                   help="predict PyTorch SDPA's backend instead, as validation does: flash (FA2's kernel: the v2 "
                   "schedule on FA2's tiles, split rule and exponential) or cudnn (cuDNN's Hopper kernel: the v3 "
                   "schedule on its tiles and compiled head dims, plus the memset each call launches); it "
                   "picks the schedule and the tiles itself")
    p.set_defaults(func=_cmd_simulate, algo=None)  # no --algo: v2, or the schedule --sdpa runs

    p = subparsers.add_parser("compare", help="several algorithms and/or profiles side by side")
    p.add_argument(
        "--algos",
        nargs="+",
        choices=ALGORITHMS,
        default=None,
        metavar="ALGO",
        help="algorithms to compare (default: every forward schedule that takes the problem's query length; "
        "--pass bwd maps them to their backward)",
    )
    p.add_argument("--hws", nargs="+", default=None, metavar="NAME|PATH", help="profiles to compare (default: --hw)")
    p.add_argument("--sdpa", nargs="+", choices=BACKENDS, default=[], metavar="BACKEND",
                   help="add PyTorch SDPA's backends (flash, cudnn) as validation predicts them, beside the "
                   "algorithms (forward only)")
    add_pass_arg(p)
    add_problem_args(p)
    add_splits_arg(p)
    add_profile_args(p)
    add_switch_args(p)
    _add_run_args(p)
    p.add_argument("--out", default=None, help="directory for the bar chart (default ./flashsim-out)")
    _add_jobs_arg(p)
    _add_cache_arg(p)
    _add_dask_arg(p)
    p.set_defaults(func=_cmd_compare)

    p = subparsers.add_parser(
        "sweep",
        help="a grid of problems with a progress bar, CSV/JSON and plots",
        description="Simulate every (algorithm, head dim, causal, sequence length) of a benchmark grid on one "
        "profile; print a TFLOP/s table and plot TFLOP/s against sequence length with the profile's "
        "tensor-core peak.",
    )
    p.add_argument(
        "--grid",
        choices=("fa2",),
        default="fa2",
        help="fa2 (the FlashAttention-2/3 papers' grid): seqlen 512..16k, batch 16k/seqlen, heads 2048/d "
        "(d64 x 32 heads, d128 x 16 heads), causal off and on",
    )
    p.add_argument("--algos", nargs="+", choices=ALGORITHMS, default=["v2", "v3"], metavar="ALGO",
                   help=f"algorithms to sweep, of {', '.join(ALGORITHMS)} (default: v2 v3)")
    p.add_argument("--sdpa", nargs="+", choices=BACKENDS, default=[], metavar="BACKEND",
                   help="add PyTorch SDPA's backends (flash, cudnn) as validation predicts them (forward only)")
    p.add_argument("--seqlens", nargs="+", type=int, default=list(FA2_SEQLENS), metavar="N",
                   help=f"sequence lengths (default: {' '.join(map(str, FA2_SEQLENS))})")
    p.add_argument("--headdims", nargs="+", type=int, default=[64, 128], metavar="D",
                   help="head dimensions (default: 64 128)")
    p.add_argument("--batch", "-b", type=int, default=None,
                   help="batch size for every point (default: the grid's, 16384 / seqlen)")
    p.add_argument("--heads", type=int, default=None,
                   help="query heads for every point (default: the grid's, 2048 / head dim)")
    p.add_argument("--causal", choices=("off", "on", "both"), default="both",
                   help="causal mask: off, on, or both as separate panels (default both)")
    add_pass_arg(p)
    add_profile_args(p)
    _add_run_args(p)
    p.add_argument("--csv", default=None, help="write the rows as CSV here")
    p.add_argument("--out", default=None, help="directory for the plot (default ./flashsim-out)")
    _add_jobs_arg(p)
    _add_cache_arg(p)
    _add_dask_arg(p)
    p.set_defaults(func=_cmd_sweep)

    p = subparsers.add_parser("trace", help="timeline of one run as Chrome trace / Perfetto JSON")
    add_algo_arg(p)
    add_pass_arg(p, ("fwd", "bwd"))
    add_problem_args(p, seqlen=1024, batch=1, heads=4)
    add_tiling_args(p)
    add_profile_args(p)
    add_switch_args(p)
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
    _add_cache_arg(p)
    p.set_defaults(func=_cmd_tour)

    p = subparsers.add_parser(
        "cache",
        help="the result cache of sweep, compare and tour: how much it holds, or empty it",
        description="Runs that sweep, compare and tour made are kept ($FLASHSIM_CACHE_DIR, else "
        "~/.cache/flashsim/results) and answer at once when asked again; a changed model or profile never "
        "answers from an old run.",
    )
    p.add_argument("action", nargs="?", choices=("info", "clear"), default="info")
    p.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    p.set_defaults(func=_cmd_cache)


def _print_json(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj, indent=2) + "\n")


def _console():
    return make_console()


def _print_result_json(result, profile) -> None:
    """One run as `simulate --json` prints it: the result, how the hot modules ran (`build`) and the profile's
    overridden parameters."""
    from flashsim.compiled import describe

    _print_json({**result.as_dict(), "build": describe(),
                 **({"hw_overrides": overridden(profile)} if overridden(profile) else {})})


def _cmd_simulate(args) -> int:
    from .progress import RunProgress
    from .runner import pass_algos, simulate_pass

    profile = profile_from_args(args)
    if args.sdpa:
        return _simulate_sdpa(args, profile)
    args.algo = args.algo or "v2"
    problem = problem_from_args(args)
    algos = pass_algos(args.algo, args.pass_)
    tiling = None
    if len(algos) == 1:
        tiling = tiling_from_args(args, algos[0], problem, profile)
    elif tiling_overridden(args):
        raise FlashsimError("tile options apply to one pass: use them with --pass fwd or --pass bwd")
    if args.max_steps < 0:
        raise FlashsimError(f"--max-steps must be 0 (no limit) or positive, got {args.max_steps}")
    label = f"{args.algo}{'' if args.pass_ == 'fwd' else ' ' + args.pass_} {problem.describe()}"
    options = {**options_from_args(args, args.algo), "dq": args.dq}
    with RunProgress(label, enabled=not args.json) as progress:
        result = simulate_pass(args.algo, problem, profile, args.pass_, tiling, sms=_sms(args, profile),
                               extrapolate=args.extrapolate, options=options, drift_skip=args.drift_skip,
                               fold=args.fold, flushed_l2=args.flushed_l2, max_steps=args.max_steps or None,
                               max_events=_max_events(args), progress=progress)
    if args.json:
        _print_result_json(result, profile)
    else:
        from .report import detail_table  # the table's module only where a table is printed

        _console().print(detail_table(result, overridden(profile)))
    return 0


def _simulate_sdpa(args, profile) -> int:
    """simulate --sdpa: the backend's kernel under its own launch rule, and its call's other GPU work."""
    from flashsim.algorithms.cli_args import switched_off
    from flashsim.algorithms.tiling import Tiling

    from .progress import RunProgress
    from .runner import simulate_pass
    from .sdpa_launch import launch_note, sdpa_run, with_call_work

    if args.pass_ != "fwd":
        raise FlashsimError("--sdpa predicts the forward call (its backward kernels are not modelled as launched)")
    if tiling_overridden(args) or switched_off(args):
        raise FlashsimError("--sdpa runs the backend's own tiles and build: leave out the tile and ablation options")
    args.algo = args.algo or ("v2" if args.sdpa == "flash" else "v3")
    problem = problem_from_args(args)
    algo, run_problem, tiling, launch = sdpa_run(args.sdpa, problem, profile)
    if args.algo != algo:
        raise FlashsimError(f"--sdpa {args.sdpa} runs the {algo} schedule, not --algo {args.algo}: leave out --algo")
    if args.max_steps < 0:
        raise FlashsimError(f"--max-steps must be 0 (no limit) or positive, got {args.max_steps}")
    label = f"SDPA {args.sdpa} ({algo}) {problem.describe()}"
    with RunProgress(label, enabled=not args.json) as progress:
        result = simulate_pass(algo, run_problem, profile, "fwd", Tiling(**tiling), sms=_sms(args, profile),
                               extrapolate=args.extrapolate, drift_skip=args.drift_skip, fold=args.fold,
                               flushed_l2=args.flushed_l2, max_steps=args.max_steps or None,
                               max_events=_max_events(args), progress=progress)
    result = with_call_work(result, problem, launch, profile)
    if args.json:
        _print_result_json(result, profile)
    else:
        from .report import detail_table

        console = _console()
        console.print(detail_table(result, overridden(profile)))
        call = result.sim["sdpa"]["call"]
        order = " in the kernel's own loop (GEMMs waited at once)" if tiling.get("pipeline") == "serial" else ""
        console.print(f"SDPA {args.sdpa}: the {algo} schedule on the kernel's tiles{order}"
                      + (f" at head dim {launch['kernel_headdim']} (the kernel it is compiled for)"
                         if launch["kernel_headdim"] != problem.headdim else "")
                      + launch_note(launch)
                      + ("; its call also launches " + ", ".join(f"{k.removesuffix('_s')} {v * 1e6:.2f} us"
                                                                   for k, v in call.items()) if call else ""),
                      soft_wrap=True, markup=False)
    return 0


def _profiles(args) -> list:
    if args.hws:
        return [load_profile(name, list(args.hw_set) + clock_overrides(args.clock)) for name in args.hws]
    return [profile_from_args(args)]


def _report_skipped(skipped: list[dict], quiet: bool, console=None) -> None:
    """Say which runs were skipped and why: on stdout with the tables, on stderr under --json."""
    from rich.markup import escape

    for s in skipped:
        line = f"skipped {s['algo']} on {s['hw']}: {s['reason']}"
        if quiet:
            sys.stderr.write(line + "\n")
        else:
            console.print(f"[yellow]{escape(line)}[/yellow]")


def _cmd_compare(args) -> int:
    from .report import bar_chart, out_path, problem_title, results_table
    from .runner import combine_runs, pass_jobs

    profiles = _profiles(args)
    refused: list[tuple[str, str]] = []
    jobs = []
    # with switches and no --algos, the algorithms that take them; a named one that does not is refused
    algos = args.algos or [a for a in forward_names() if takes_switches(a, args)]
    for profile in profiles:
        for fwd in algos:
            problem = problem_from_args(args, fwd)
            if not (args.algos or catalog.get(fwd).takes(problem)):
                continue
            switches = options_from_args(args, fwd)
            pass_algos_, why = pass_jobs([fwd], args.pass_)
            refused += why
            for algo in pass_algos_:
                # a backward takes the switches its record has (none of V3's ablation switches today)
                opts = {k: v for k, v in switches.items() if k in catalog.get(algo).options}
                jobs.append((algo, problem_from_args(args, algo), profile, args.splits, opts))
        for backend in args.sdpa:
            if args.pass_ != "fwd":
                raise FlashsimError("--sdpa compares forward calls: use it with --pass fwd")
            algo = "v2" if backend == "flash" else "v3"
            jobs.append((algo, problem_from_args(args, algo), profile, None, {"sdpa": backend}))
    results, skipped = run_many(jobs, lambda prof: _sms(args, prof), args.json, "compare", args.extrapolate,
                                _jobs(args), args.dask, _max_events(args), args.cache) if jobs else ([], [])
    results = combine_runs(results, args.pass_)
    skipped += [{"algo": a, "hw": "-", "reason": why} for a, why in dict(refused).items()]
    if not results:
        raise FlashsimError("nothing could be simulated: " + "; ".join(sorted({s["reason"] for s in skipped})))
    title = (f"simulated {_pass_words(args.pass_)} throughput: "
             + problem_title((algo, prob) for algo, prob, *_ in jobs))
    plot = bar_chart(results, out_path(args.out, "compare.png"), title, skipped)
    if args.json:
        _report_skipped(skipped, quiet=True)
        _print_json({"results": [r.as_dict() for r in results], "skipped": skipped, "plot": str(plot)})
        return 0
    console = _console()
    console.print(results_table(results, "flashsim compare"))
    _report_skipped(skipped, quiet=False, console=console)
    console.print(f"bar chart: {plot}" + (" (skipped runs are marked in it)" if skipped else ""))
    return 0


def fa2_grid(seqlens, headdims, causal: str, algos, batch: int | None = None,
             heads: int | None = None) -> list[tuple[str, Problem]]:
    """The FA2/FA3 papers' benchmark grid: batch = 16k / seqlen, hidden 2048 (heads = 2048 / d), unless
    `batch` or `heads` fix them for every point."""
    modes = {"off": (False,), "on": (True,), "both": (False, True)}[causal]
    out = []
    for d in headdims:
        if heads is None and d > 0 and 2048 % d:
            raise FlashsimError(f"head dim {d} does not divide the grid's hidden size 2048; give --heads")
        for c in modes:
            for n in seqlens:
                if n <= 0:
                    raise FlashsimError(f"sequence lengths must be positive, got {n}")
                for algo in algos:
                    dtype = catalog.get(algo).default_dtype
                    b = max(1, 16384 // n) if batch is None else batch
                    h = 2048 // d if heads is None else heads
                    out.append((algo, Problem(b, h, n, d, causal=c, dtype=dtype)))
    return out


def _cmd_sweep(args) -> int:
    from .report import check_writable, out_path, sweep_plot, write_atomically
    from .runner import combine_runs, pass_jobs

    profile = profile_from_args(args)
    algos, refused = pass_jobs(args.algos, args.pass_)
    grid = fa2_grid(args.seqlens, args.headdims, args.causal, algos, args.batch, args.heads)
    if args.csv:
        check_writable(args.csv)
    jobs = [(algo, prob, profile) for algo, prob in grid]
    if args.sdpa and args.pass_ != "fwd":
        raise FlashsimError("--sdpa sweeps forward calls: use it with --pass fwd")
    for backend in args.sdpa:  # each backend's call on the same grid (the schedule it runs picks the dtype)
        algo = "v2" if backend == "flash" else "v3"
        jobs += [(algo, prob, profile, None, {"sdpa": backend})
                 for _, prob in fa2_grid(args.seqlens, args.headdims, args.causal, [algo], args.batch, args.heads)]
    results, skipped = run_many(jobs, lambda prof: _sms(args, prof), args.json, "sweep", args.extrapolate,
                                _jobs(args), args.dask, _max_events(args), args.cache) if jobs else ([], [])
    results = combine_runs(results, args.pass_)
    skipped += [{"algo": a, "hw": profile.name, "reason": why} for a, why in refused]
    if not results:
        raise FlashsimError("nothing could be simulated: " + "; ".join(sorted({s["reason"] for s in skipped})))
    args.algos = list(dict.fromkeys(r.algo for r in results))
    rows = [
        {
            "algo": r.algo,
            "hw": r.hw,
            "batch": r.problem.batch,
            "heads": r.problem.heads,
            "seqlen": r.problem.seqlen_q,
            "headdim": r.problem.headdim,
            "causal": r.problem.causal,
            "dtype": r.problem.dtype,
            "time_s": r.time_s,
            "tflops": r.tflops,
            "hbm_read": r.bytes["hbm_read"],
            "bound_by": r.bound_by,
            "sim_wall_s": r.sim["wall_s"],  # a run answered from the result cache: the wall of the run kept
            "from_cache": bool(r.sim.get("from_cache")),
        }
        for r in results
    ]
    shape = f"batch {args.batch}" if args.batch else "batch 16k/N"
    shape += f", {args.heads} heads" if args.heads else ", heads 2048/d"
    plot = sweep_plot(rows, out_path(args.out, "sweep.png"),
                      f"simulated {_pass_words(args.pass_)} TFLOP/s on {profile.name} ({shape})", profile)
    if args.csv:
        import csv  # only where a table is written

        def write_rows(f) -> None:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)

        write_atomically(args.csv, write_rows, newline="")
    if args.json:
        _report_skipped(skipped, quiet=True)
        _print_json({"hw": profile.name, "rows": rows, "skipped": skipped, "plot": str(plot)})
        return 0
    from rich.table import Table

    table = Table()
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
    console.print(f"flashsim sweep on {profile.name}: simulated TFLOP/s ({shape})")
    console.print(table)
    _report_skipped(skipped, quiet=False, console=console)
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
    from .report import check_writable
    from .runner import pass_algos

    args.algo = pass_algos(args.algo, args.pass_)[0]
    profile = profile_from_args(args)
    problem = problem_from_args(args)
    options = options_from_args(args, args.algo)
    check_features(args.algo, problem, profile)
    tiling = tiling_from_args(args, args.algo, problem, profile)
    sms = _sms(args, profile)
    check_writable(args.out)
    estimate = _estimated_intervals(problem, tiling, sms, profile)
    if estimate > args.max_events:
        raise FlashsimError(
            f"the trace would hold ~{estimate:,.0f} intervals (limit {args.max_events:,}): use a "
            "smaller --seqlen/--batch/--heads, fewer --sms, or raise --max-events"
        )
    trace: list = []
    result = simulate(args.algo, problem, profile, tiling, sms=sms, trace=trace, options=options)
    # the run's clock, which power management sets by the kernel's load (mma.sync, wgmma), not the base clock
    clock = result.kernels[0]["clock_hz"] if result.kernels else profile.sm_clock_hz
    write_chrome_trace(trace, clock, args.out, result)
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
    from .report import write_atomically

    doc = {"traceEvents": events, "displayTimeUnit": "ns", "metadata": result.as_dict()}
    write_atomically(path, lambda f: json.dump(doc, f))


TOUR_PROBLEM = {"batch": 4, "heads": 16, "seqlen_q": 4096, "headdim": 128}


def _cmd_tour(args) -> int:
    from .api import DEFAULT_SAMPLE_SMS
    from .report import bar_chart, out_path, problem_title, results_table

    profile = profile_from_args(args)
    jobs = []
    for algo in forward_names():
        dtype = catalog.get(algo).default_dtype
        if catalog.get(algo).takes(Problem(**TOUR_PROBLEM, dtype=dtype)):
            jobs.append((algo, Problem(**TOUR_PROBLEM, dtype=dtype), profile))
    results, skipped = run_many(jobs, lambda prof: min(DEFAULT_SAMPLE_SMS, prof.sm_count), args.json, "tour",
                                workers=_jobs(args), cache=args.cache)
    if not results:
        raise FlashsimError("nothing could be simulated: " + "; ".join(sorted({s["reason"] for s in skipped})))
    title = f"{problem_title((algo, prob) for algo, prob, _ in jobs)} on {profile.name}"
    plot = bar_chart(results, out_path(args.out, "tour.png"), title, skipped)
    if args.json:
        _report_skipped(skipped, quiet=True)
        _print_json({"results": [r.as_dict() for r in results], "skipped": skipped, "plot": str(plot)})
        return 0
    console = _console()
    console.print(results_table(results, f"flashsim tour: forward attention on {profile.name}"))
    _report_skipped(skipped, quiet=False, console=console)
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
