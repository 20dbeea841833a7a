"""Could a dispatch-replayed run stop simulating once its block costs are known? A causal launch dealt head
after head is timed by the dispatch replay (simulator/replay.py): the blocks the sample simulated give, by
least squares, a fixed cost, a cost per K/V step and a share for a neighbour on the SM, and a fluid replay of
the chip's launch with those costs gives the cycles. Only the fit reaches the answer, so a run could stop once
the fit has settled. This what-if runs causal GQA v2 (the speed target's shape at a smaller N) with the
shipped model, keeps the blocks it recorded, and replays the chip from part of them:

- the blocks done by a share of the run's simulated time (a run stopped then);
- each query head's blocks alone, and the heads up to each (a run stopped after whole heads).

It reports each window's fit, its replayed cycles against the replay from every block, and the share of the
run's blocks it holds.

    python3 -m flashsim.experiments.replay_window [--seqlen 8192 32768] [--out FILE]

Measured only: no such stop is built.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Sequence
from datetime import date
from pathlib import Path

from flashsim.algorithms.problem import Problem
from flashsim.hw_profiles.loader import load_profile

SHARES = (0.1, 0.2, 0.3, 0.5, 0.7, 0.9)
LONE = 0.01  # a block beside fewer others than a full SM's, on average, by more than this


def windows(records: Sequence[tuple]) -> list[tuple[str, list[tuple]]]:
    """(name, records) for each window: by share of the simulated time, then per head, then heads so far.
    A record is (cta, sm, start, end); a cta's first two fields are its (batch, head)."""
    end = max(r[3] for r in records)
    out = [(f"time <= {s:.0%}", [r for r in records if r[3] <= s * end]) for s in SHARES]
    heads: list = []
    for r in records:
        if r[0][:2] not in heads:
            heads.append(r[0][:2])
    for i, h in enumerate(heads):
        out.append((f"head {i} alone", [r for r in records if r[0][:2] == h]))
    for i in range(1, len(heads)):
        out.append((f"heads 0-{i}", [r for r in records if r[0][:2] in heads[: i + 1]]))
    return out


def replay_windows(records: Sequence[tuple], steps: Callable, chip: Sequence, chip_sms: int, slots: int) -> dict:
    """The replay from every record, and from each window's: its fit and its cycles against the full one's.
    Each block keeps the neighbours it had in the whole run (a stopped run would know which blocks were
    resident beside it), not only those in its window."""
    from flashsim.simulator import replay

    # the shipped fit and replay, unchanged (an edit to them would stale every report); only where a block's
    # neighbours are counted from is swapped, for the whole run's records instead of the window's
    others = dict(zip(records, replay._others(records), strict=True))
    own = replay._others
    replay._others = lambda part: [others[r] for r in part]
    try:
        full = replay.chip_cycles(records, steps, chip, chip_sms, slots)
        rows = []
        for name, part in windows(records):
            got = replay.chip_cycles(part, steps, chip, chip_sms, slots) if part else None
            # the fit tells a step's own cost from a neighbour's share only by blocks that ran beside fewer
            # others than a full SM holds: where every block had the same, the two terms are collinear
            fewer = sum(others[r] < slots - 1 - LONE for r in part)
            rows.append({"window": name, "blocks": len(part), "share_of_blocks": len(part) / len(records),
                         "blocks_beside_fewer": fewer,
                         "fit": None if got is None else {k: got[k] for k in ("fixed", "per_step", "share", "rms")},
                         "cycles_error": None if got is None or full is None else got["cycles"] / full["cycles"] - 1})
    finally:
        replay._others = own
    return {"full": full, "rows": rows}


def measure(seqlen: int) -> dict:
    import flashsim.simulator.api as api

    seen: dict = {}
    real = api.chip_cycles

    def keeping(records, steps, chip, chip_sms, slots):
        seen.update(records=list(records), steps=steps, chip=chip, chip_sms=chip_sms, slots=slots)
        return real(records, steps, chip, chip_sms, slots)

    problem = Problem(2, 64, seqlen, 128, kv_heads=8, causal=True)
    api.chip_cycles = keeping
    try:
        start = time.perf_counter()
        result = api.simulate("v2", problem, load_profile("h200"), max_steps=None)
        wall = time.perf_counter() - start
    finally:
        api.chip_cycles = real
    out = replay_windows(seen["records"], seen["steps"], seen["chip"], seen["chip_sms"], seen["slots"])
    replayed = result.sim["sample"].get("replay") or {}
    return {"problem": problem.describe(), "wall_s": round(wall, 2), "events": result.sim["events"],
            "sample": result.sim["sample"]["describe"], "unit_skip": result.sim.get("unit_skip"),
            "run_replay_cycles": replayed.get("cycles"), **out}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seqlen", type=int, nargs="+", default=[8192, 32768])
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "simulator-replay-window.json")
    args = ap.parse_args(argv)
    runs = []
    for n in args.seqlen:
        run = measure(n)
        runs.append(run)
        print(f"{run['problem']}: {run['events']:,} events, {run['wall_s']} s; {run['sample']}")
        for row in run["rows"]:
            err = "fit refused" if row["cycles_error"] is None else f"{row['cycles_error']:+.3%}"
            print(f"  {row['window']:<14} {row['blocks']:>5} blocks ({row['share_of_blocks']:.0%}), "
                  f"{row['blocks_beside_fewer']:>3} beside fewer: {err}")
    from .validate_compare import simulation_fingerprint

    given = sys.argv[1:] if argv is None else argv
    provenance = {"date": date.today().isoformat(), "python": platform.python_version(),
                  "simulation_fingerprint": simulation_fingerprint(),
                  "machine": f"{os.cpu_count()} CPUs, {platform.machine()}, {platform.system()}",
                  "command": " ".join(["python3 -m flashsim.experiments.replay_window", *given])}
    args.out.write_text(json.dumps({"provenance": provenance, "runs": runs}, indent=1, default=repr) + "\n")
    print(f"wrote {args.out.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
