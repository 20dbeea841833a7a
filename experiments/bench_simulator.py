"""How fast the simulator answers: one point of the FA2 grid as a whole process, and the whole grid.

    python3 -m flashsim.experiments.bench_simulator [--out experiments/results/simulator-speed.json]

Targets: one point (H100, v2, batch 1, 16 heads, seqlen 16384, head dim 128) under 2 s of process wall time;
`flashsim sweep --grid fa2 --algos v2 v3` under 60 s.
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

POINT = ["simulate", "--hw", "h100", "--algo", "v2", "--batch", "1", "--heads", "16", "--seqlen", "16384",
         "--headdim", "128", "--json"]
GRID = ["sweep", "--hw", "h100", "--grid", "fa2", "--algos", "v2", "v3", "--json"]


def _flashsim(args: list[str]) -> tuple[float, dict]:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "cli", *args], capture_output=True, text=True, check=True,
                          cwd=Path(__file__).resolve().parents[1])
    return time.perf_counter() - start, json.loads(done.stdout)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "simulator-speed.json"))
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    point = [_flashsim(POINT) for _ in range(args.repeats)]
    grid_s, grid = _flashsim(GRID)
    result = {
        "provenance": {"date": date.today().isoformat(), "python": platform.python_version(),
                       "machine": platform.machine(), "cpus": os.cpu_count(), "command":
                       "python3 -m flashsim.experiments.bench_simulator"},
        "point": {"command": "flashsim " + " ".join(POINT), "wall_s": [round(w, 3) for w, _ in point],
                  "median_wall_s": round(statistics.median(w for w, _ in point), 3),
                  "sim_wall_s": point[0][1]["sim"]["wall_s"], "target_s": 2.0},
        "grid": {"command": "flashsim " + " ".join(GRID), "wall_s": round(grid_s, 2), "points": len(grid["rows"]),
                 "target_s": 60.0},
    }
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "provenance"}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
