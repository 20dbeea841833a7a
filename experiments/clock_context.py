"""How much of a validation set's error is the SM clock its kernels happened to run at.

The profiles run each kernel at one clock under load: 1.814 GHz for mma.sync kernels, 1.583 GHz for wgmma
kernels on the H200. A short kernel runs at whatever clock the work before it left. That is about 1.96 GHz
after idling and 1.72 after a stretch of HBM streaming (experiments/results/h200/session31/busy-protocol/).
Within a validation sweep the clocks range from 1.42 to 1.98 GHz. `flashsim validate` now records each
timing's clock (`sm_clock_ghz`: a clock64-over-%globaltimer probe just before and just after the profiled
calls). This predicts every such row again with the profile's clocks set to the one measured (every
`sm_clock_*` key, so whichever the kernel's class takes). It then sets the error at that clock beside the
error of the set's committed report.

The clock is a condition of each measurement, not a parameter fitted to it. The report's numbers stay the
headline; this says how much of their error the clock explains.

    python3 -m flashsim.experiments.clock_context MEASURED.jsonl REPORT.json [--max-wall S] [--jobs N] [--out F]

MEASURED: a set's measurements with clocks; REPORT: that set's committed comparison (its predictions, and
each simulation's wall time for --max-wall, which leaves out rows that took longer). Writes F (JSON) and F
with .md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from . import validate_store as store
from .prediction_inputs import job_args, rows_from, simulate_job

CLOCK_KEYS = ("sm_clock_hz", "sm_clock_mma_sync_load_hz", "sm_clock_wgmma_load_hz", "sm_clock_light_tensor_load_hz")


def clocks_of(records: list[dict]) -> dict[tuple[str, str], float]:
    """(impl, config_id) -> the mean of its latest timing's clock probes, GHz."""
    out = {}
    for rec in store.latest(records, "time").values():
        if rec.get("sm_clock_ghz") and rec.get("kernel_time_s"):
            out[rec["impl"], rec["config_id"]] = statistics.fmean(rec["sm_clock_ghz"])
    return out


def _err(p: float, m: float) -> float:
    return (p - m) / m * 100


def summary(rows: list[dict]) -> dict:
    by: dict[str, dict] = {}
    for impl in sorted({r["impl"] for r in rows}):
        sel = [r for r in rows if r["impl"] == impl]
        as_is = [abs(r["err_pct"]) for r in sel]
        at = [abs(r["err_at_clock_pct"]) for r in sel]
        by[impl] = {"rows": len(sel), "mape_pct": statistics.fmean(as_is), "max_pct": max(as_is),
                    "mape_at_clock_pct": statistics.fmean(at), "max_at_clock_pct": max(at),
                    "clock_ghz_median": statistics.median(r["clock_ghz"] for r in sel)}
    return by


def markdown(result: dict) -> str:
    lines = [f"# Errors at the measured clock: {result['measured']}", "",
             f"{result['note']}", "",
             "| implementation | rows | median clock, GHz | MAPE / max as reported | at the measured clock |",
             "|---|---|---|---|---|"]
    for impl, s in result["summary"].items():
        lines.append(f"| {impl} | {s['rows']} | {s['clock_ghz_median']:.3f} | {s['mape_pct']:.1f} / {s['max_pct']:.1f} "
                     f"| {s['mape_at_clock_pct']:.1f} / {s['max_at_clock_pct']:.1f} |")
    lines += ["", "Rows whose error is over 15% either way:", "",
              "| implementation | configuration | clock, GHz | measured us | error as reported | at the clock |",
              "|---|---|---|---|---|---|"]
    for r in sorted(result["rows"], key=lambda r: r["err_pct"]):
        if abs(r["err_pct"]) > 15 or abs(r["err_at_clock_pct"]) > 15:
            lines.append(f"| {r['impl']} | {r['config_id']} | {r['clock_ghz']:.3f} | {r['measured_s'] * 1e6:.1f} "
                         f"| {r['err_pct']:+.1f}% | {r['err_at_clock_pct']:+.1f}% |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m flashsim.experiments.clock_context", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("measured")
    ap.add_argument("report")
    ap.add_argument("--max-wall", type=float, default=30.0)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    records = store.load(Path(args.measured))
    clocks = clocks_of(records)
    report = {(r["impl"], r["config_id"]): r for r in json.loads(Path(args.report).read_text())["rows"]}
    todo = []
    for row in rows_from(records):
        key = (row["impl"], row["config_id"])
        old = report.get(key)
        if key not in clocks or not old or not (old.get("predicted") or {}).get("kernel_time_s"):
            continue
        if (old.get("sim") or {}).get("wall_s", 0) > args.max_wall:
            continue
        todo.append(row)
    jobs, _ = job_args(todo, "h200", [], True)
    clocked = []
    for row, job in zip(todo, jobs, strict=True):
        hz = clocks[row["impl"], row["config_id"]] * 1e9
        clocked.append((*job[:4], list(job[4]) + [f"{k}={hz:.6g}" for k in CLOCK_KEYS], *job[5:]))
    with ProcessPoolExecutor(args.jobs) as pool:
        results = list(pool.map(simulate_job, clocked))
    rows = []
    for row, res in zip(todo, results, strict=True):
        key = (row["impl"], row["config_id"])
        if "predicted" not in res:
            continue
        m = row["measured"]["kernel_time_s"]
        p = report[key]["predicted"]["kernel_time_s"]
        rows.append({"impl": row["impl"], "config_id": row["config_id"], "clock_ghz": clocks[key], "measured_s": m,
                     "predicted_s": p, "predicted_at_clock_s": res["predicted"]["kernel_time_s"],
                     "err_pct": _err(p, m), "err_at_clock_pct": _err(res["predicted"]["kernel_time_s"], m)})
    result = {"measured": args.measured, "report": args.report, "max_wall_s": args.max_wall,
              "note": (f"{len(rows)} rows (the report's simulations of at most {args.max_wall:g} s); the errors are "
                       "against these measurements, the predictions the report's and again at each row's clock"),
              "summary": summary(rows), "rows": rows}
    out = Path(args.out)
    out.write_text(json.dumps(result, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
