"""What Python's garbage collector costs a simulation, and whether pausing it would pay.

    python3 -m flashsim.experiments.gc_cost [--runs N] [--out FILE]

Each case runs `simulate()` in a process of its own, three ways:
- `as is`: the collector as Python sets it; the time spent in its passes is summed from gc.callbacks;
- `paused, collected after`: paused for each run and made to collect once it is done, as a sweep's worker
  would have to between runs (each case's runs back to back in one process);
- `never`: paused and never collected; the process's exit then frees what the collector would have.
Each way reports the process's wall time (its exit included), the time in the collector and the peak memory.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

CASES = [
    ("whole-chip v3 (the grid's kind)", "v3", "h100", dict(batch=32, heads=16, seqlen_q=512, headdim=128)),
    ("the FA2-grid point", "v2", "h100", dict(batch=1, heads=16, seqlen_q=16384, headdim=128)),
]
WAYS = ("as is", "paused, collected after", "never")

# One process: `runs` simulations of one case the given way; prints a JSON line of what it measured.
CHILD = """
import gc, json, resource, sys, time
way, algo, hw, problem, runs = json.loads(sys.argv[1])
from flashsim.algorithms.problem import Problem
from flashsim.hw_profiles.loader import load_profile
from flashsim.simulator.api import simulate
spent = [0.0, 0.0]
def watch(phase, info):
    if phase == "start":
        spent[1] = time.perf_counter()
    else:
        spent[0] += time.perf_counter() - spent[1]
gc.callbacks.append(watch)
profile, problem = load_profile(hw), Problem(**problem)
start = time.perf_counter()
for _ in range(runs):
    if way != "as is":
        gc.disable()
    result = simulate(algo, problem, profile)
    if way == "paused, collected after":
        del result
        gc.collect()
        gc.enable()
print(json.dumps({"runs_s": time.perf_counter() - start, "collector_s": spent[0],
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def measure(way: str, algo: str, hw: str, problem: dict, runs: int) -> dict:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", CHILD, json.dumps([way, algo, hw, problem, runs])],
                          capture_output=True, text=True, check=True)
    out = json.loads(done.stdout.strip().splitlines()[-1])
    out["process_s"] = time.perf_counter() - start
    return {k: round(v, 3) for k, v in out.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="simulations per process (default 3)")
    ap.add_argument("--out", help="write the measurements as JSON")
    args = ap.parse_args(argv)
    if args.runs < 1:
        ap.error("--runs must be at least 1")
    if args.out and not os.path.isdir(os.path.dirname(os.path.abspath(args.out))):
        ap.error(f"--out {args.out}: no such folder")  # said now, not after minutes of runs
    rows = []
    for name, algo, hw, problem in CASES:
        for way in WAYS:
            row = {"case": name, "algo": algo, "hw": hw, "problem": problem, "way": way,
                   **measure(way, algo, hw, problem, args.runs)}
            rows.append(row)
            print(f"{name:34s} {way:24s} process {row['process_s']:7.2f} s  collector {row['collector_s']:6.2f} s  "
                  f"peak {row['peak_mb']:6.0f} MB", flush=True)
    if args.out:
        from .bench_simulator import machine_provenance

        provenance = {**machine_provenance(), "runs_per_process": args.runs,
                      "command": f"python3 -m flashsim.experiments.gc_cost --runs {args.runs} --out FILE"}
        with open(args.out, "w") as f:
            json.dump({"provenance": provenance, "rows": rows}, f, indent=1)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
