"""Twin SMs: how many of a run's simulated SMs do exactly the same thing, op for op and cycle for cycle.

    python3 -m flashsim.experiments.twin_sms [--only NAME ...] [--jobs N] [--out FILE]

In a launch of equal blocks dealt in lockstep, SMs whose blocks read the same K/V tiles at the same cycles wait for
the same fetches and share every unit alike, so their timelines are one timeline. A simulation that ran one SM per
such class (a fold), with its requests to the shared units standing for all its twins', would simulate that much
less. This measures the classes, it builds no fold: each case runs once with a trace (every op's start and end
on its track, the loop skip off as in any traced run), the trace is cut at each twentieth of the run, and SMs are
twins up to a cut when every op they ended by then started and ended at the same cycles. `fold_work_share` is the
mean over the twentieths of (classes at the cut that ends it) / SMs: the share of the SMs' work a fold that
splits a class where its twins part would still simulate (an upper bound: a class counts as parted for its whole
twentieth).
"""

from __future__ import annotations

import re
import sys
from bisect import bisect_right
from collections import defaultdict

from .case_runs import only_flag, parse, run_cases, run_child, write_rows

CUTS = 20


def _grid(points: list[tuple]) -> list[tuple]:
    """FA2-grid points (algo, d, causal, N) as cases: batch 16k / N, hidden 2048 (heads 2048 / d), on the H100."""
    return [(f"grid {algo} d{d} {'causal' if causal else 'full'} N={n}", algo, "h100",
             dict(batch=16384 // n, heads=2048 // d, seqlen_q=n, headdim=d, causal=causal))
            for algo, d, causal, n in points]


# (name, algo, hw, problem): the FA2-grid point (a sample of 8 SMs), the grid's points that run on the whole chip
# and its costliest sampled ones (experiments/results/simulator-grid-cost.json), and two sampled causal runs
CASES = [
    ("point", "v2", "h100", dict(batch=1, heads=16, seqlen_q=16384, headdim=128)),
    *_grid([("v2", 64, False, 512), ("v2", 128, False, 512), ("v2", 128, False, 2048),
            ("v2", 64, True, 512), ("v2", 128, True, 512), ("v2", 64, True, 1024), ("v2", 128, True, 1024),
            ("v3", 64, False, 512), ("v3", 128, False, 512), ("v3", 64, False, 1024), ("v3", 128, False, 1024),
            ("v3", 64, True, 512), ("v3", 128, True, 512), ("v3", 64, True, 1024), ("v3", 128, True, 1024),
            ("v3", 128, True, 2048)]),
    # the sixteen that cost most of the others, in their default runs (some run on the whole chip now)
    *_grid([("v3", 64, True, 16384), ("v3", 64, False, 16384), ("v3", 128, True, 8192), ("v3", 64, True, 4096),
            ("v3", 64, True, 8192), ("v3", 64, False, 8192), ("v3", 128, True, 4096), ("v2", 64, True, 4096),
            ("v3", 64, True, 2048), ("v3", 64, False, 2048), ("v2", 64, True, 16384), ("v2", 128, True, 16384),
            ("v2", 128, True, 2048), ("v3", 64, False, 4096), ("v2", 64, True, 8192), ("v2", 128, True, 8192)]),
    ("causal GQA v2 2 x 32/8 x 8k (sampled)", "v2", "h200",
     dict(batch=2, heads=32, kv_heads=8, seqlen_q=8192, headdim=128, causal=True)),
    ("causal v3 1 x 8 x 16k (sampled)", "v3", "h100", dict(batch=1, heads=8, seqlen_q=16384, headdim=128, causal=True)),
]

_SM = re.compile(r"SM(\d+)(.*)")


def classes(trace: list, cuts: int = CUTS) -> dict:
    """Twin classes of a trace's SMs ((track, name, start, end) per op; tracks "SM<i>..."): their count at the end
    of each of `cuts` equal parts of the run, the sizes of the classes that stay twins to its end, and the fold's
    share of the work (see the module's note)."""
    by_sm: dict[int, list] = defaultdict(list)
    for track, name, start, end in trace:
        m = _SM.match(track)
        if m:
            by_sm[int(m.group(1))].append((end, start, m.group(2), name))
    if not by_sm:
        return {"sms": 0, "classes_at_cuts": [], "class_sizes": [], "fold_work_share": None}
    for ops in by_sm.values():
        ops.sort()
    ends = {sm: [op[0] for op in ops] for sm, ops in by_sm.items()}
    last = max(e[-1] for e in ends.values())
    counts, sizes = [], []
    for k in range(1, cuts + 1):
        cut = last * k / cuts
        groups: dict[tuple, int] = defaultdict(int)
        for sm, ops in by_sm.items():
            groups[tuple(ops[: bisect_right(ends[sm], cut)])] += 1
        counts.append(len(groups))
        sizes = sorted(groups.values(), reverse=True)
    return {"sms": len(by_sm), "classes_at_cuts": counts, "class_sizes": sizes,
            "fold_work_share": round(sum(counts) / (cuts * len(by_sm)), 3)}


# One case in a process of its own: the traced run and its classes, as one JSON line.
CHILD = """
import json, sys, time
from flashsim.algorithms.problem import Problem
from flashsim.hw_profiles.loader import load_profile
from flashsim.simulator.api import simulate
from flashsim.experiments.twin_sms import classes
algo, hw, problem = json.loads(sys.argv[1])
trace = []
start = time.perf_counter()
r = simulate(algo, Problem(**problem), load_profile(hw), trace=trace)
wall = time.perf_counter() - start
print(json.dumps({"cycles": r.cycles, "events": r.sim["events"], "ops_traced": len(trace),
                  "sample": (r.sim.get("sample") or {}).get("describe", "whole chip"), "wall_s": round(wall, 2),
                  **classes(trace)}))
"""


def measure(case: tuple) -> dict:
    name, algo, hw, problem = case
    return run_child(CHILD, [algo, hw, problem], {"case": name, "algo": algo, "hw": hw, "problem": problem})


def main(argv: list[str] | None = None) -> int:
    args = parse(__doc__, [c[0] for c in CASES], "write the classes as JSON", argv)
    cases = [c for c in CASES if not args.only or c[0] in args.only]

    def line(row: dict) -> str:
        at = row["classes_at_cuts"]
        return (f"{row['sms']:4d} SMs  classes at 25/50/100%: {at[4]:3d} {at[9]:3d} {at[-1]:3d}  "
                f"fold work share {row['fold_work_share']:.3f}")

    rows = run_cases(cases, measure, args.jobs, line, width=42)
    if args.out:
        write_rows(args.out, f"python3 -m flashsim.experiments.twin_sms{only_flag(args.only)} --out FILE", rows)
    return 0 if all("failed" not in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
