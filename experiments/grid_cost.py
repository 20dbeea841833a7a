"""Where the FA2 grid's simulation time goes: each point of `flashsim sweep --grid fa2` run alone, in this
process, one after another, with its CPU seconds, events, ops and the shortcuts it took.

    python3 -m flashsim.experiments.grid_cost [--hw h100] [--algos v2 v3] [--out FILE] [--only-slow S]

Each point runs as the sweep runs it (the default sample of SMs, shortcuts on); the CPU seconds are this
process's (time.process_time) around the one simulate call, so they leave out the sweep's start-up and
worker processes. The table is sorted by cost, and the JSON keeps every point with the simulator's own
report of what it left out (sim.*).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

from flashsim.hw_profiles.loader import load_profile
from flashsim.simulator.api import DEFAULT_SAMPLE_SMS
from flashsim.simulator.commands import FA2_SEQLENS, fa2_grid
from flashsim.simulator.runner import simulate_task


def _shortcuts(sim: dict) -> str:
    """The shortcuts a run took, in a few words."""
    out = []
    if sim.get("sample"):
        out.append(f"sample {sim['sample']['heads']}/{sim['sample']['of_heads']} heads on {sim['sms_simulated']} SMs")
    else:
        out.append(f"whole chip ({sim['sms_simulated']} SMs)")
    if sim.get("periodic_skips"):
        out.append(f"periodic x{sim['periodic_skips']}")
    if sim.get("carried_skips"):
        out.append(f"carried x{sim['carried_skips']}")
    if sim.get("unit_skip", {}).get("skips"):
        out.append(f"unit x{sim['unit_skip']['skips']} ({sim['unit_skip']['units_left_out']} heads)")
    loop = sim.get("loop_skip") or {}
    if loop.get("skips"):
        out.append(f"loop x{loop['skips']} ({loop['ops_left_out']} ops)")
    if sim.get("blocks_extrapolated"):
        out.append(f"{sim['blocks_extrapolated']} blocks left out")
    return ", ".join(out)


def point_name(algo: str, problem) -> str:
    causal = "causal" if problem.causal else "full"
    return f"{algo} d{problem.headdim} {causal} N={problem.seqlen_q} B={problem.batch} H={problem.heads}"


def point_cost(algo: str, problem, profile) -> dict:
    start_cpu, start = time.process_time(), time.perf_counter()
    result = simulate_task((algo, problem, profile, DEFAULT_SAMPLE_SMS, True, None, None, None))
    cpu, wall = time.process_time() - start_cpu, time.perf_counter() - start
    point = point_name(algo, problem)
    if isinstance(result, dict):
        return {"point": point, "skipped": result["reason"]}
    sim = result.sim
    return {
        "point": point,
        "cpu_s": round(cpu, 3),
        "wall_s": round(wall, 3),
        "events": sim["events"],
        "ops": sim["ops"],
        "cycles": result.cycles,
        "bytes": result.bytes,
        "shortcuts": _shortcuts(sim),
        "sim": sim,
    }


def kind(point: dict) -> str:
    """Which of the grid's costs a point is: whole-chip runs (grids of little work), V3's d64 tiles (no loop
    skip: simulator/loopskip.py), other causal samples, the rest."""
    if not point["sim"].get("sample"):
        return "whole chip"
    if point["point"].startswith("v3 d64"):
        return "sampled v3 d64"
    return "sampled causal" if " causal " in point["point"] else "sampled, not causal"


def by_kind(points: list[dict]) -> dict:
    """CPU seconds, events and points of each kind."""
    out: dict = {}
    for p in points:
        if "cpu_s" in p:
            k = out.setdefault(kind(p), {"points": 0, "cpu_s": 0.0, "events": 0})
            k["points"] += 1
            k["cpu_s"] = round(k["cpu_s"] + p["cpu_s"], 3)
            k["events"] += p["events"]
    return out


def _version() -> str:
    here = Path(__file__).resolve().parent.parent
    try:
        return subprocess.run(
            ["git", "-C", str(here), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hw", default="h100")
    ap.add_argument("--algos", nargs="+", default=["v2", "v3"])
    ap.add_argument("--out", default=None, help="write the points as JSON here")
    ap.add_argument("--match", nargs="+", default=None, help="only the points whose name holds one of these")
    ap.add_argument("--repeats", type=int, default=1, help="runs of each point (its CPU seconds: the median)")
    args = ap.parse_args(argv)
    profile = load_profile(args.hw)
    grid = fa2_grid(FA2_SEQLENS, [64, 128], "both", args.algos)
    load_before = os.getloadavg()
    points = []
    for algo, problem in grid:
        if args.match and not any(m in point_name(algo, problem) for m in args.match):
            continue
        runs = [point_cost(algo, problem, profile) for _ in range(args.repeats)]
        p = runs[0]
        if "cpu_s" in p and args.repeats > 1:
            p["cpu_s_runs"] = [r["cpu_s"] for r in runs]
            p["cpu_s"] = statistics.median(p["cpu_s_runs"])
        points.append(p)
        print(
            f"{p['point']:42s} {p.get('cpu_s', '-'):>7} s {p.get('events', '-'):>9} events  "
            f"{p.get('shortcuts', p.get('skipped'))}",
            flush=True,
        )
    ran = [p for p in points if "cpu_s" in p]
    total = sum(p["cpu_s"] for p in ran)
    print(f"total {total:.1f} s CPU over {len(ran)} points")
    if args.out:
        out = {
            "provenance": {
                "date": date.today().isoformat(),
                "version": _version(),
                "python": platform.python_version(),
                "cpus": os.cpu_count(),
                "load_avg_before": load_before,
                "load_avg_after": os.getloadavg(),
                "command": "python3 -m flashsim.experiments.grid_cost "
                + " ".join(argv if argv is not None else sys.argv[1:]),
            },
            "total_cpu_s": round(total, 2),
            "by_kind": by_kind(ran),
            "points": sorted(points, key=lambda p: -p.get("cpu_s", 0)),
        }
        Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
