"""`flashsim calibrate`, `flashsim validate` and `flashsim accuracy`.

Light at import time (the CLI imports every command module): cupy, torch, matplotlib and the simulator are
imported by the commands when they run.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

from flashsim.errors import FlashsimError


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "calibrate",
        help="measure the simulator's hardware parameters on this GPU (microbenchmarks)",
        description="Run the microbenchmarks of kernels/microbench on the local GPU and write a profile TOML of "
        "the measured parameters (each with benchmark, GPU and date) plus the raw numbers as JSON.",
    )
    p.add_argument("--out-dir", default="experiments/results/h200", help="where calibration.toml/.json go")
    p.add_argument("--only", metavar="NAMES", help="comma-separated benchmarks (default: all)")
    p.add_argument("--quick", action="store_true", help="smaller sizes and fewer repeats (a smoke test)")
    p.add_argument("--reps", type=int, default=20, help="timed repeats per bandwidth measurement (median)")
    p.add_argument("--json", action="store_true", help="print the measured parameters as JSON")
    p.add_argument(
        "--from-json", metavar="PATH", help="no GPU: write the TOML again from the raw numbers of a calibration.json"
    )
    p.set_defaults(func=_calibrate)

    p = subparsers.add_parser(
        "validate",
        help="time real attention kernels on this GPU and compare with the simulator",
        description="Sweep configurations (the FA2 benchmark grid plus ragged shapes, or a held-out test set) "
        "over our kernels and PyTorch SDPA's flash, cuDNN and math backends; time them, measure bytes with ncu "
        "for a subset, and compare with simulator predictions. Measurements are appended as they finish (the "
        "test set's to their own file); a rerun resumes. The comparison reports the development and test sets "
        "apart.",
    )
    p.add_argument("--out-dir", default=None,
                   help="where the validation files go (default experiments/results/h200; with --published "
                   "experiments/results)")
    p.add_argument("--published", action="store_true",
                   help="no GPU: compare the h100 and a100 profiles with the FA2 and FA3 papers' published TFLOP/s "
                   "(each point cited) and write published.json/.md/.png")
    p.add_argument("--grid", default=None,
                   help="configurations: fa2 (FA2 grid + ragged: the development set; the default), test (the "
                   "held-out test set, timed only, into testset-measured.jsonl), test-decode (decoding steps "
                   "against a dense or paged K/V cache), test-bwd (the backward kernels alone), dev-llm (LLM-shaped "
                   "development set), dev-tiles (per-tile development set), dev-d256 (head-dim-256 development "
                   "set) or smoke; with --compare-only, the one set to compare (default: every set with "
                   "measurements)")  # fmt: skip
    p.add_argument("--impls", metavar="NAMES",
                   help="comma-separated implementations (default: the grid's: fa2 every forward one; test "
                   "v2,v3,sdpa-flash,sdpa-cudnn; test-decode decode and SDPA's flash, cuDNN and efficient; "
                   "test-bwd v2 and those three)")  # fmt: skip
    p.add_argument("--seqlens", metavar="N,...", help="keep only these sequence lengths")
    p.add_argument("--headdims", metavar="D,...", help="keep only these head dims (e.g. to time again what a kernel "
                   "change touched)")
    p.add_argument("--max-minutes", type=float, default=8.0, help="time limit of the measuring (timing + ncu)")
    p.add_argument("--min-reps", type=int, default=10, help="timed calls per measurement, at least")
    p.add_argument("--max-reps", type=int, default=30, help="timed calls per measurement, at most")
    p.add_argument("--budget-s", type=float, default=0.5, help="seconds of timed calls per measurement past --min-reps")
    p.add_argument("--no-ncu", action="store_true", help="skip the Nsight Compute byte counts")
    p.add_argument("--ncu-seqlens", default="2048,8192", help="non-causal grid configurations ncu measures")
    p.add_argument("--ncu-sample", type=int, default=0, metavar="N",
                   help="byte counts for N configurations drawn from the grid (half causal; fixed seed), "
                        "also for the timed-only test sets")
    p.add_argument("--retry-failed", action="store_true", help="measure again what failed before")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--measure-only", action="store_true", help="measure, leave the comparison for later")
    mode.add_argument("--compare-only", action="store_true", help="no GPU: predict and report from the measurements")
    p.add_argument("--hw", default="h200", metavar="NAME|PATH", help="profile for predictions, e.g. a calibration.toml")
    p.add_argument(
        "--set", dest="hw_set", action="append", default=[], metavar="KEY=VALUE", help="override a profile parameter"
    )
    p.add_argument("--jobs", type=int, default=0, help="simulator processes (default: CPUs, at most 8)")
    p.add_argument("--journal-only", action="store_true",
                   help="with --compare-only: run the simulations into each set's prediction journal "
                        "(.<set>-predictions.jsonl beside its measurements) and write no report; a later "
                        "--compare-only writes the reports from the journals (a set split over machines); "
                        "without --grid every set's simulations share one pool of processes, longest first")
    p.add_argument("--share", choices=("light", "heavy"), default="",
                   help="with --journal-only: only the simulations that took at most (light) or more than "
                        "(heavy) --heavy-above seconds for the set's last report; light ones, and those it lacks, "
                        "suit a machine of many CPUs whose commands are limited in time")
    p.add_argument("--heavy-above", type=float, default=300.0, metavar="S",
                   help="seconds of the last report's simulation that make one heavy (default 300)")
    p.add_argument("--empty-l2", action="store_true",
                   help="predict each call from an empty L2, not the full, partly dirty one the flush before it leaves")
    p.add_argument("--o-store", choices=("tma", "fragments"), default="",
                   help="simulate our v3 kernels' O store in this form (default: theirs, from the accumulator "
                        "fragments; tma: FA3's, the schedule's default; docs/MODEL.md)")
    p.set_defaults(func=_validate)

    p = subparsers.add_parser(
        "accuracy",
        help="the simulator's accuracy from the committed validation results",
        description="MAPE, max error and bias of the simulator per implementation and quantity, read from "
        "validation.json (made by `flashsim validate`), and the path of the predicted-vs-measured plot; the "
        "held-out test set's testset.json beside it the same way, and both sets' GPU busy time side by side.",
    )
    p.add_argument("--file", default=None,
                   help="a validation.json (default: the H200 results that ship with flashsim)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    p.set_defaults(func=_accuracy)


def _calibrate(args: argparse.Namespace) -> int:
    from .calibrate import main

    return main(args)


def _accuracy(args: argparse.Namespace) -> int:
    from .accuracy import main

    return main(args)


def _csv_ints(text: str | None, what: str) -> list[int] | None:
    if not text:
        return None
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise FlashsimError(f"{what} expects comma-separated integers, got {text!r}") from None


def _validate(args: argparse.Namespace) -> int:
    if args.published:
        from .published import main

        if args.hw != "h200" or args.hw_set:
            raise FlashsimError("--published compares the shipped h100 and a100 profiles: it takes no --hw or --set")
        if args.jobs < 0:
            raise FlashsimError(f"--jobs must be at least 1, got {args.jobs}")
        return main(Path(args.out_dir or "experiments/results"), args.jobs or min(8, os.cpu_count() or 1))
    from . import validate as v
    from .calibrate_gpu import argv_tail, command_line

    out_dir = Path(args.out_dir or "experiments/results/h200")
    grid = args.grid or "fa2"
    if grid not in v.GRIDS:
        raise FlashsimError(f"unknown grid {grid!r}; choose one of {', '.join(v.GRIDS)}")
    measured = out_dir / v.measured_name(grid)
    default_impls = v.DEFAULT_IMPLS.get(grid, list(v.IMPLS))
    impls = [s.strip() for s in args.impls.split(",") if s.strip()] if args.impls else default_impls
    for name in impls:
        if name not in v.IMPLS:
            raise FlashsimError(f"unknown implementation {name!r}; choose from {', '.join(v.IMPLS)}")
    if args.ncu_sample < 0:
        raise FlashsimError(f"--ncu-sample must be at least 0, got {args.ncu_sample}")
    if args.max_minutes <= 0 or args.budget_s < 0 or args.min_reps < 1 or args.max_reps < args.min_reps:
        raise FlashsimError("need --max-minutes > 0, --budget-s >= 0 and 1 <= --min-reps <= --max-reps")
    if (args.journal_only or args.share) and not args.compare_only:
        raise FlashsimError("--journal-only and --share go with --compare-only (they predict, they do not measure)")
    if args.share and not args.journal_only:
        raise FlashsimError("--share runs part of a set's simulations: give --journal-only with it")
    if args.heavy_above <= 0:
        raise FlashsimError(f"--heavy-above must be positive, got {args.heavy_above}")
    if not args.compare_only:
        configs = v.GRIDS[grid]()
        seqlens = _csv_ints(args.seqlens, "--seqlens")
        if seqlens:
            configs = [c for c in configs if c.seqlen_q in seqlens]
        headdims = _csv_ints(args.headdims, "--headdims")
        if headdims:
            configs = [c for c in configs if c.headdim in headdims]
        deadline = time.monotonic() + args.max_minutes * 60
        opts = v.SweepOptions(impls, configs, out_dir, args.max_minutes, args.min_reps, args.max_reps,
                              args.budget_s, args.retry_failed, measured.name)  # fmt: skip
        v.measure(opts, deadline=deadline)
        if args.ncu_sample and not args.no_ncu:
            v.measure_bytes(opts, [], deadline, sample=v.byte_sample(configs, args.ncu_sample))
        elif not args.no_ncu and grid not in v.TIMED_ONLY:  # the test sets are timed only
            v.measure_bytes(opts, _csv_ints(args.ncu_seqlens, "--ncu-seqlens") or [], deadline)
        print(f"measurements in {measured}")
        if args.measure_only:
            return 0
    try:
        import flashsim.simulator  # noqa: F401
    except ImportError as exc:
        raise FlashsimError(
            f"the simulator cannot be imported here ({exc}); run `flashsim validate --compare-only` where it can"
        ) from None
    from .accuracy import render_one, render_sets
    from .validate_compare import compare
    from .validate_sets import DEV, SETS

    command = command_line(["validate", *argv_tail()[1:]])
    # a comparison named by --grid is that set's alone; measuring compares what it measured and the rest
    sets = [s for s in SETS if s.measured == measured.name] if args.compare_only and args.grid else list(SETS)
    if args.compare_only and args.grid and not measured.is_file():
        raise FlashsimError(f"no measurements in {measured}; run `flashsim validate --grid {grid}` on a GPU first")
    if args.journal_only and not args.grid:  # every set's simulations in one pool
        from .validate_compare import journal_sets

        if not any((out_dir / s.measured).is_file() for s in sets):
            raise FlashsimError(f"no measurements in {out_dir}; run `flashsim validate` on a GPU first")
        journal_sets(out_dir, sets, args.hw, args.hw_set, args.jobs, flushed_l2=not args.empty_l2,
                     o_store=args.o_store, share=args.share, heavy_above_s=args.heavy_above)
        print("validate: a comparison without --journal-only writes each report from its journal")
        return 0
    reports = {s.name: compare(out_dir, out_dir / s.measured, args.hw, args.hw_set, args.jobs, command, data_set=s,
                               flushed_l2=not args.empty_l2, o_store=args.o_store, journal_only=args.journal_only,
                               share=args.share, heavy_above_s=args.heavy_above)
               for s in sets if (out_dir / s.measured).is_file()}  # fmt: skip
    if not reports:
        raise FlashsimError(f"no measurements in {out_dir}; run `flashsim validate` on a GPU first")
    if args.journal_only:
        return 0
    if "dev" in reports or "test" in reports:
        render_sets(reports.get("dev"), out_dir / DEV.report, reports.get("test"))
    for s in SETS[2:]:  # the decode, backward and LLM-shaped development sets, each under its title
        if s.name in reports:
            render_one(reports[s.name], out_dir / s.report)
    return 0
