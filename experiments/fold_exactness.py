"""The fold (--fold) against the run of every twin: equal cycles and bytes, and what the fold saves.

    python3 -m flashsim.experiments.fold_exactness [--only NAME ...] [--jobs N] [--out FILE]
    python3 -m flashsim.experiments.fold_exactness --reports HW ... [--jobs N] [--out FILE]

A sample whose SMs are twins may run them as one (simulator/gpu.py, Gpu.fold; simulator/api.py, _twins). Each
case here runs twice in one process, with the fold and without, and the row says whether the fold took the
sample, whether the answers are equal (cycles and every byte counter; the units' busy shares to rounding,
UTILIZATION_TOL), and each run's simulation wall time. The cases are the FA2 grid's points that run sampled
(both algorithms, both head sizes, every length, without the causal mask: causal blocks differ and never fold)
on the H100 and the H200, the validation's L2 start (flushed), a GQA launch and FP8, and the loop skip left off
(the plain event-by-event run). --reports takes instead every non-causal simulation of the profiles' validation
reports (their own tiles, L2 starts and unit swaps) that the fold takes.
"""

from __future__ import annotations

import json
import sys
import time

from .case_runs import only_flag, parse, run_cases, run_child, write_rows

FA2_SEQLENS = (512, 1024, 2048, 4096, 8192, 16384)


def _grid(hw: str) -> list[tuple]:
    """The FA2 grid's non-causal points on `hw` (batch 16k / N, hidden 2048)."""
    return [(f"{hw} {algo} d{d} N={n}", algo, hw, dict(batch=16384 // n, heads=2048 // d, seqlen_q=n, headdim=d), {})
            for algo in ("v2", "v3") for d in (64, 128) for n in FA2_SEQLENS]


# (name, algo, hw, problem, simulate's options)
CASES = [
    *_grid("h100"),
    *_grid("h200"),
    ("h200 v2 GQA 2 x 32/8 x 16k d128 flushed", "v2", "h200",
     dict(batch=2, heads=32, kv_heads=8, seqlen_q=16384, headdim=128), {"flushed_l2": True}),
    ("h100 v2 1 x 16 x 16k d128 flushed", "v2", "h100", dict(batch=1, heads=16, seqlen_q=16384, headdim=128),
     {"flushed_l2": True}),
    ("h100 v3 1 x 16 x 16k d128 flushed", "v3", "h100", dict(batch=1, heads=16, seqlen_q=16384, headdim=128),
     {"flushed_l2": True}),
    ("h200 v3-fp8 2 x 16 x 8k d128", "v3-fp8", "h200", dict(batch=2, heads=16, seqlen_q=8192, headdim=128,
                                                             dtype="fp8"), {}),
    ("h100 v2 1 x 16 x 16k d128 plain", "v2", "h100", dict(batch=1, heads=16, seqlen_q=16384, headdim=128),
     {"extrapolate": False}),
    ("h100 v3 2 x 16 x 8k d128 plain", "v3", "h100", dict(batch=2, heads=16, seqlen_q=8192, headdim=128),
     {"extrapolate": False}),
]


# The units' busy shares sum the simulated SMs' busy cycles: eight SMs' sums and one SM's differ in the last bits.
UTILIZATION_TOL = 1e-12


def answers(result) -> dict:
    """What a run answers: its cycles, its byte counters and the units' busy shares."""
    return {"cycles": result.cycles, "bytes": result.bytes, "utilization": result.utilization}


def same_answers(a: dict, b: dict) -> bool:
    """Equal cycles and bytes, and busy shares equal to rounding (UTILIZATION_TOL)."""
    same_units = a["utilization"].keys() == b["utilization"].keys()
    return (a["cycles"] == b["cycles"] and a["bytes"] == b["bytes"] and same_units
            and all(abs(a["utilization"][k] - b["utilization"][k]) <= UTILIZATION_TOL for k in a["utilization"]))


# One case in a process of its own: the folded run and the run of every twin, as one JSON line.
CHILD = """
import json, sys, time
from flashsim.algorithms.problem import Problem
from flashsim.hw_profiles.loader import load_profile
from flashsim.simulator.api import simulate
from flashsim.experiments.fold_exactness import answers
algo, hw, problem, options = json.loads(sys.argv[1])
row = {}
for fold in (True, False):
    start = time.perf_counter()
    r = simulate(algo, Problem(**problem), load_profile(hw), fold=fold, **options)
    row["fold" if fold else "each"] = {**answers(r), "wall_s": round(time.perf_counter() - start, 3),
                                       "events": r.sim["events"]}
    if fold:
        row["twins"] = r.sim.get("fold", {}).get("twins", 1)
        row["sample"] = (r.sim.get("sample") or {}).get("describe", "whole chip")
print(json.dumps(row))
"""


def measure(case: tuple) -> dict:
    name, algo, hw, problem, options = case
    row = run_child(CHILD, [algo, hw, problem, options],
                    {"case": name, "algo": algo, "hw": hw, "problem": problem, "options": options})
    if "failed" in row:
        return row
    fold, each = row["fold"], row["each"]
    worst = max((abs(fold["utilization"][k] - each["utilization"].get(k, 0.0)) for k in fold["utilization"]),
                default=0.0)
    return {**row, "equal": same_answers(fold, each), "utilization_off": worst}


class _NoTwins(Exception):
    """A run the fold does not take: stopped before its launch runs."""


def report_job(job: tuple) -> dict | None:
    """A validation report's simulation (prediction_inputs.simulate_job's job) with the fold and without it,
    where the fold takes it; None where it does not (found before anything runs)."""
    import flashsim.simulator as simulator
    from flashsim.simulator.gpu import Gpu

    from .prediction_inputs import simulate_job

    plain_simulate, plain_run = simulator.simulate, Gpu.run_kernel

    def only_folded(gpu, *args, **kwargs):
        if gpu.fold == 1:
            raise _NoTwins
        return plain_run(gpu, *args, **kwargs)

    row = {}
    try:
        for fold in (True, False):
            got = {}

            def simulate(*args, fold=fold, got=got, **kwargs):
                got["result"] = plain_simulate(*args, fold=fold, **kwargs)
                return got["result"]

            simulator.simulate = simulate
            Gpu.run_kernel = only_folded if fold else plain_run
            start = time.perf_counter()
            try:
                simulate_job(job)
            except _NoTwins:
                return None
            if "result" not in got:
                return None  # the simulation failed (or was refused): the report says why
            r = got["result"]
            row["fold" if fold else "each"] = {**answers(r), "wall_s": round(time.perf_counter() - start, 3),
                                               "events": r.sim["events"]}
            if fold:
                row["twins"] = r.sim.get("fold", {}).get("twins", 1)
    finally:
        simulator.simulate, Gpu.run_kernel = plain_simulate, plain_run
    return {"job": job, **row, "equal": same_answers(row["fold"], row["each"])}


def report_jobs(hws: list[str]) -> list[tuple]:
    """Every validation set's simulations on these profiles (the jobs `flashsim validate` runs), once each."""
    from pathlib import Path

    from . import validate_store as store
    from .prediction_inputs import job_args, rows_from
    from .validate_sets import SETS

    unique: dict[str, tuple] = {}
    for hw in hws:
        out = Path(__file__).resolve().parent / "results" / hw
        for data_set in SETS:
            measured = out / data_set.measured
            if not measured.is_file():
                continue
            rows = [r for r in rows_from(store.load(measured)) if r["measured"]]
            jobs, byte_jobs = job_args(rows, hw, [], True)
            for job in [*jobs, *byte_jobs.values()]:
                if not job[1].get("causal"):
                    unique[json.dumps(job, sort_keys=True)] = job
    return list(unique.values())


def main(argv: list[str] | None = None) -> int:
    def reports_flag(ap) -> None:
        ap.add_argument("--reports", nargs="+", metavar="HW",
                        help="instead: the profiles' validation reports' non-causal simulations that the fold takes")

    args = parse(__doc__, [c[0] for c in CASES], "write the rows as JSON", argv, reports_flag)
    if args.reports:
        return _reports(args)
    cases = [c for c in CASES if not args.only or c[0] in args.only]

    def line(row: dict) -> str:
        took = "no twins" if row["twins"] == 1 else f"{row['twins']} twins as one"
        return (f"{took:16s} {'equal' if row['equal'] else 'DIFFERENT':9s} "
                f"{row['fold']['wall_s']:7.2f} s against {row['each']['wall_s']:7.2f} s")

    rows = run_cases(cases, measure, args.jobs, line)
    if args.out:
        write_rows(args.out, f"python3 -m flashsim.experiments.fold_exactness{only_flag(args.only)} --out FILE", rows)
    failed = any("failed" in r for r in rows)
    return 1 if failed or not all(r.get("equal", True) for r in rows) else 0



def _reports(args) -> int:
    """--reports: the reports' simulations that fold, each with the fold and with --no-fold."""
    from concurrent.futures import ProcessPoolExecutor

    jobs = report_jobs(args.reports)
    with ProcessPoolExecutor(args.jobs) as pool:
        rows = [r for r in pool.map(report_job, jobs) if r is not None]
    for row in rows:
        algo, problem = row["job"][0], row["job"][1]
        print(f"{row['job'][3]} {algo:6s} {json.dumps(problem, sort_keys=True)[:90]:90s} "
              f"{'equal' if row['equal'] else 'DIFFERENT'} {row['fold']['wall_s']:.2f} s against "
              f"{row['each']['wall_s']:.2f} s", flush=True)
    print(f"{len(rows)} of {len(jobs)} non-causal simulations fold; {sum(r['equal'] for r in rows)} answer alike")
    if args.out:
        write_rows(args.out, "python3 -m flashsim.experiments.fold_exactness --reports " + " ".join(args.reports)
                   + " --out FILE", rows, simulations=len(jobs))
    return 0 if all(r["equal"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
