"""The v2-bwd schedule's predictions against the backward kernels timed on the development grid.

Reads a backward benchmark (experiments/bench_backward.py's JSON: our v2 backward and SDPA's flash backward
on the FA2 grid, GPU busy time), simulates every timed (implementation, shape) with the v2-bwd schedule at the
tiles the kernel ran (read from its kernel names), and writes <stem>.json (every row) and <stem>.md (the table
and the mean absolute percentage error per implementation). Needs no GPU.

    python3 -m flashsim.experiments.backward_dev_compare \
        experiments/results/h200/backward/backward.json experiments/results/h200/backward-dev-compare
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

IMPLS = ("ours", "sdpa-flash")
HW = "h200"
# Our kernels name their tiles ..._128x128w8s2_...; FA2's Flash_bwd_kernel_traits<d, kBlockM, kBlockN, warps,
# AtomLayoutMSdP, AtomLayoutNdKV, AtomLayoutMdQ, Is_V_in_regs, No_double_buffer, ...>.
OURS_TILES = re.compile(r"_(\d+)x(\d+)w(\d+)s(\d+)_bwd$")
FA2_TILES = re.compile(r"flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<\d+, (\d+), (\d+), "
                       r"(\d+), \d+, \d+, \d+, (true|false), (true|false)")


def ran_tiling(rec: dict) -> dict:
    """block_m, block_n, warps and stages of the backward kernel the record timed (and FA2's exponential)."""
    for name in rec["kernels"]:
        m = OURS_TILES.search(name)
        if m:
            bm, bn, w, s = map(int, m.groups())
            return {"block_m": bm, "block_n": bn, "warps": w, "stages": s}
        m = FA2_TILES.search(name)
        if m:
            bm, bn, w = map(int, m.groups()[:3])
            # FA2's code computes the exponential as exp2f (no fast math: a range test and two scalings each)
            return {"block_m": bm, "block_n": bn, "warps": w, "stages": 1 if m.group(5) == "true" else 2,
                    "exp2": "exp2f"}
    raise ValueError(f"no backward kernel with tiles among {rec['kernels']}")


def _predict(job: tuple) -> float:
    problem, tiling, overrides = job
    from flashsim.algorithms.problem import Problem
    from flashsim.algorithms.tiling import Tiling
    from flashsim.hw_profiles import load_profile
    from flashsim.simulator import simulate

    return simulate("v2-bwd", Problem(**problem), load_profile(HW, overrides), Tiling(**tiling)).kernel_time_s


def compare(records: list[dict], jobs: int = 2, overrides: tuple[str, ...] = ()) -> dict:
    rows = []
    for rec in records:
        if rec["impl"] not in IMPLS or rec.get("status") != "ok":
            continue
        problem = {"batch": rec["batch"], "heads": rec["heads"], "seqlen_q": rec["seqlen"], "headdim": rec["headdim"],
                   "causal": rec["causal"], "dtype": rec["dtype"]}
        rows.append({"impl": rec["impl"], "problem": problem, "tiling": ran_tiling(rec),
                     "measured_s": rec["kernel_time_s"]})
    # simulate each (problem, tiling) once
    keys = sorted({json.dumps([r["problem"], r["tiling"]], sort_keys=True) for r in rows})
    with ProcessPoolExecutor(jobs) as pool:
        predicted = dict(zip(keys, pool.map(_predict, [(*json.loads(k), list(overrides)) for k in keys]), strict=True))
    for r in rows:
        r["predicted_s"] = predicted[json.dumps([r["problem"], r["tiling"]], sort_keys=True)]
        r["error"] = r["predicted_s"] / r["measured_s"] - 1
    summary = {}
    for impl in IMPLS:
        errs = [r["error"] for r in rows if r["impl"] == impl]
        if errs:
            summary[impl] = {"n": len(errs), "mape": sum(map(abs, errs)) / len(errs), "bias": sum(errs) / len(errs),
                             "max_abs": max(map(abs, errs))}
    return {"hw": HW, "schedule": "v2-bwd", "quantity": "GPU busy time of the backward's kernels",
            "overrides": list(overrides), "summary": summary, "rows": rows}


COMMAND = "python3 -m flashsim.experiments.backward_dev_compare"


def markdown(result: dict, source: str) -> str:
    lines = [f"v2-bwd predictions ({result['hw']} profile) against the backward kernels' GPU busy time "
             f"({source}); error = predicted / measured - 1. Made by `{result['command']}`.", "",
             "| impl | n | MAPE | bias | max abs |", "| --- | --- | --- | --- | --- |"]
    for impl, s in result["summary"].items():
        lines.append(f"| {impl} | {s['n']} | {100 * s['mape']:.1f}% | {100 * s['bias']:+.1f}% "
                     f"| {100 * s['max_abs']:.1f}% |")
    lines += ["", "| impl | B | H | N | d | causal | tiles | measured ms | predicted ms | error |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in result["rows"]:
        p, t = r["problem"], r["tiling"]
        lines.append(f"| {r['impl']} | {p['batch']} | {p['heads']} | {p['seqlen_q']} | {p['headdim']} | "
                     f"{int(p['causal'])} | {t['block_m']}x{t['block_n']}w{t['warps']}s{t['stages']} | "
                     f"{1e3 * r['measured_s']:.3f} | {1e3 * r['predicted_s']:.3f} | {100 * r['error']:+.1f}% |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bench", type=Path, help="the backward benchmark's JSON")
    ap.add_argument("stem", type=Path, help="write STEM.json and STEM.md")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a profile override for every prediction (repeatable), as simulate --set")
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args(argv)
    source, stem = args.bench, args.stem
    if not source.is_file():
        print(f"backward_dev_compare: no benchmark file {source}", file=sys.stderr)
        return 2
    stem.parent.mkdir(parents=True, exist_ok=True)  # before the simulations, which take minutes
    result = compare(json.loads(source.read_text())["records"], args.jobs, tuple(args.set))
    result["source"] = str(source)
    result["command"] = f"{COMMAND} {source} {stem}" + "".join(f" --set {o}" for o in args.set)
    stem.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    stem.with_suffix(".md").write_text(markdown(result, source.name))
    for impl, s in result["summary"].items():
        print(f"{impl}: MAPE {100 * s['mape']:.1f}% bias {100 * s['bias']:+.1f}% max {100 * s['max_abs']:.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
