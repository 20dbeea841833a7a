"""Sampled default runs against --full on the FA2 grid (h100, h200: v2 and v3; a100: v2).

    python -c "from flashsim.experiments.sampling_exactness import measure; measure('full.jsonl', True)"
    python -c "from flashsim.experiments.sampling_exactness import measure; measure('default.jsonl', False)"
    python -m flashsim.experiments.sampling_exactness full.jsonl default.jsonl [before.jsonl] > sampling-exactness.json

Each input holds one JSON object a line, {"key", "cycles", "tflops", "sms_simulated", "cpu_s"} (and the
default runs' "sample": simulator/sampling.py's choice and check), written by `measure` (one process, so the
imports are paid once); the output pairs them by key with their difference, and sums them up per kind of
sample (representative or not) and per profile. `before`: default runs of an earlier sample selection, whose
differences from the same --full runs are listed beside.
"""

from __future__ import annotations

import json
import sys
import time

from flashsim.algorithms.problem import Problem

SEQLENS = (512, 1024, 2048, 4096, 8192, 16384)
PROFILES = (("h100", ("v2", "v3")), ("h200", ("v2", "v3")), ("a100", ("v2",)))


def grid() -> list[tuple[str, str, Problem]]:
    return [(hw, algo, Problem(16384 // n, 2048 // d, n, d, causal=causal))
            for hw, algos in PROFILES for algo in algos for d in (64, 128) for causal in (False, True)
            for n in SEQLENS]


def command(hw: str, algo: str, p: Problem, full: bool) -> str:
    return (f"flashsim simulate --hw {hw} --algo {algo} -b {p.batch} --heads {p.heads} -n {p.seqlen_q} "
            f"-d {p.headdim}{' --causal' if p.causal else ''}{' --full' if full else ''} --json")


def measure(out_path: str, full: bool) -> None:
    """Run every grid point (the default sample, or the whole chip) and append one line per point."""
    from flashsim.hw_profiles import load_profile
    from flashsim.simulator import simulate

    with open(out_path, "a") as out:
        for hw, algo, p in grid():
            t0 = time.process_time()
            r = simulate(algo, p, load_profile(hw), sms=None) if full else simulate(algo, p, load_profile(hw))
            out.write(json.dumps({"key": f"{hw} {algo} {p.describe()}", "cycles": r.cycles, "tflops": r.tflops,
                                  "sms_simulated": r.sim["sms_simulated"], "cpu_s": time.process_time() - t0,
                                  **({"sample": r.sim["sample"]} if "sample" in r.sim else {})}) + "\n")
            out.flush()


def load(path: str) -> dict:
    with open(path) as f:
        return {r["key"]: r for r in map(json.loads, f)}


def _worst(rows: list, name) -> dict:
    worst: dict = {}
    for r in rows:
        k = name(r)
        if k not in worst or abs(r["difference"]) > abs(worst[k]["difference"]):
            worst[k] = {"key": r["key"], "difference": r["difference"]}
    return worst


def _kind(row: dict) -> str:
    sample = row["default"].get("sample")
    if sample is None:
        return "whole chip"
    return "representative" if sample["representative"] else "not representative"


def table(full_path: str, default_path: str, before_path: str | None = None) -> dict:
    full, default = load(full_path), load(default_path)
    before = load(before_path) if before_path else {}
    rows = []
    for hw, algo, p in grid():
        k = f"{hw} {algo} {p.describe()}"
        row = {"key": k, "full": full[k], "default": default[k],
               "difference": default[k]["cycles"] / full[k]["cycles"] - 1,
               "commands": [command(hw, algo, p, False), command(hw, algo, p, True)]}
        if k in before:
            row["before"] = {**before[k], "difference": before[k]["cycles"] / full[k]["cycles"] - 1}
        rows.append(row)
    kinds = {}
    for kind in sorted({_kind(r) for r in rows}):
        of = [r for r in rows if _kind(r) == kind]
        kinds[kind] = {"points": len(of), "within_2pct": sum(abs(r["difference"]) <= 0.02 for r in of),
                       "worst": max((abs(r["difference"]) for r in of), default=0.0)}
    summary = {"points": len(rows), "within_2pct": sum(abs(r["difference"]) <= 0.02 for r in rows),
               "default_cpu_s": sum(r["default"]["cpu_s"] for r in rows),
               "full_cpu_s": sum(r["full"]["cpu_s"] for r in rows),
               "worst": _worst(rows, lambda r: " ".join(r["key"].split()[:2])), "by_sample": kinds}
    if before:
        was = [{"key": r["key"], "difference": r["before"]["difference"]} for r in rows if "before" in r]
        summary["before"] = {"points": len(was), "within_2pct": sum(abs(r["difference"]) <= 0.02 for r in was),
                             "default_cpu_s": sum(r["before"]["cpu_s"] for r in rows if "before" in r),
                             "worst": _worst(was, lambda r: " ".join(r["key"].split()[:2]))}
    return {"summary": summary, "rows": rows}


if __name__ == "__main__":
    json.dump(table(*sys.argv[1:4]), sys.stdout, indent=1)
    sys.stdout.write("\n")
