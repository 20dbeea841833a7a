"""Would a skip of whole waves within a tolerance reach the FA2 grid's whole-chip points? Each point runs on the
whole chip with the shipped model; its launch's round marks (the cycle at which each further block per SM was
done: what the periodic skip watches) are recorded, and a wave skip is played on them afterwards: once the last
K waves took the same cycles within TOL, the waves left are charged at their mean. The table gives how much of
the launch such a skip would have watched, and how far its end would be from the plain run's.

    python3 -m flashsim.experiments.wave_drift [--hw h100] [--out FILE] [--waves 3] [--tol 0.001 0.005]

Measured only: no such skip is built. Launches of carried tiles (v3) and causal v2 (blocks of unequal work)
have no round marks and are not asked about.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from datetime import date
from pathlib import Path

from flashsim.algorithms.problem import Problem
from flashsim.hw_profiles.loader import load_profile

# v2's whole-chip points of the FA2 grid (non-causal N = 512-2,048; at N = 512 d64 and d128 alike)
POINTS = ((32, 32, 512, 64), (16, 16, 1024, 128), (8, 16, 2048, 128), (8, 32, 2048, 64))


def waves(times: list[int], slots: int) -> list[int]:
    """The round marks, one per wave (`slots` rounds of one block per SM): the start, then each wave's end."""
    return [times[0], *times[slots::slots]]


def wave_skip(marks: list[int], k: int, tol: float) -> dict:
    """Play a wave skip on a launch's wave marks: after the first wave (which fills the pipeline), the first
    mark where the last `k` waves agree within `tol` of their mean stops the watch, and the waves left are
    charged at that mean. Returns where it stopped, the share of the launch watched and the end's error."""
    gaps = [b - a for a, b in zip(marks[1:], marks[2:], strict=False)]
    for i in range(k, len(gaps)):  # a stop before the last wave leaves something out
        last = gaps[i - k : i]
        mean = sum(last) / k
        if mean > 0 and max(abs(g - mean) for g in last) <= tol * mean:
            stop = i + 1  # the mark that closes the k waves
            end = marks[stop] + mean * (len(marks) - 1 - stop)
            return {"stop_wave": stop, "watched": marks[stop] / marks[-1], "end_error": end / marks[-1] - 1}
    return {"stop_wave": None, "watched": 1.0, "end_error": 0.0}


def measure(hw: str, k: int, tols: list[float]) -> list[dict]:
    import flashsim.simulator.launch as launch
    from flashsim.simulator.api import simulate

    seen: list = []
    plan = launch.skip_plan

    def watching(heads, step, slots, times, queued, block_of=lambda n: n):
        seen.append((slots, list(times)))
        return plan(heads, step, slots, times, queued, block_of)

    launch.skip_plan = watching  # the launch looks its planner up at each round: the marks pass through here
    rows = []
    try:
        for b, h, n, d in POINTS:
            seen.clear()
            t = time.process_time()
            r = simulate("v2", Problem(b, h, n, d), load_profile(hw), sms=None)
            slots, times = max(seen, key=lambda s: len(s[1]))
            marks = waves(times, slots)
            rows.append({"point": f"{hw} v2 B={b} H={h} N={n} d={d}", "cpu_s": round(time.process_time() - t, 2),
                         "cycles": r.cycles, "events": r.sim["events"], "periodic_skips": r.sim.get("periodic_skips"),
                         "wave_cycles": [y - x for x, y in zip(marks, marks[1:], strict=False)],
                         "skips": {str(tol): wave_skip(marks, k, tol) for tol in tols}})
    finally:
        launch.skip_plan = plan
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hw", default="h100")
    ap.add_argument("--waves", type=int, default=3, help="waves that must agree before the skip (default 3)")
    ap.add_argument("--tol", type=float, nargs="+", default=[0.001, 0.005])
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "simulator-wave-drift.json"))
    args = ap.parse_args(argv)
    rows = measure(args.hw, args.waves, args.tol)
    for r in rows:
        skips = "; ".join(f"tol {t}: watched {s['watched']:.0%}, end {s['end_error']:+.2%}"
                          for t, s in r["skips"].items())
        print(f"{r['point']}: {len(r['wave_cycles'])} waves, {r['cpu_s']} s; {skips}")
    from .validate_compare import simulation_fingerprint

    Path(args.out).write_text(json.dumps({
        "provenance": {"date": date.today().isoformat(), "python": platform.python_version(),
                       "simulation_fingerprint": simulation_fingerprint(),
                       "command": "python3 -m flashsim.experiments.wave_drift "
                       + " ".join(argv if argv is not None else sys.argv[1:])},
        "waves": args.waves, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
