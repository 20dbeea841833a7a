"""How fast the simulator answers: whole `flashsim` processes, timed (wall and user CPU), and what they answer.

    python3 -m flashsim.experiments.bench_simulator [--out FILE] [--repeats 3] [--only point grid ...]
        [--plain] [--jobs N]

Each case runs `repeats` times as its own process (medians reported; the large ones once). --plain adds each
case's plain run (`--no-extrapolate`: every op simulated, the sample of SMs kept) and the relative
difference of cycles and bytes. --jobs runs that many cases at once (a machine with spare cores); the
sweep always runs on 2 worker processes, as on the 2-core machine the targets are set for. The flashsim
timed is the one `python3 -m flashsim.cli` imports (PYTHONPATH picks another).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import date
from pathlib import Path

# (name, arguments, target seconds of process wall, repeats: None = --repeats)
CASES = [
    ("point", "simulate --hw h100 --algo v2 --batch 1 --heads 16 --seqlen 16384 --headdim 128", 0.5, None),
    ("grid", "sweep --hw h100 --grid fa2 --algos v2 v3 --jobs 2 --no-cache", 10.0, 1),
    ("v3-causal-32k", "simulate --hw h200 --algo v3 --batch 4 --heads 32 --seqlen 32768 --headdim 128 --causal",
     10.0, 1),
    ("v2-32k-b16", "simulate --hw h100 --algo v2 --batch 16 --heads 32 --seqlen 32768 --headdim 128", 10.0, 1),
    ("v3-causal-128k", "simulate --hw h100 --algo v3 --batch 1 --heads 8 --seqlen 131072 --headdim 128 --causal",
     10.0, 1),
    ("v2-gqa-causal-64k", "simulate --hw h200 --algo v2 --batch 2 --heads 64 --kv-heads 8 --seqlen 65536 "
     "--headdim 128 --causal", 10.0, 1),
]
# Large problems pass the default work limit (simulate --max-steps); the limit is lifted for all of them.
NO_LIMIT = ["--max-steps", "0"]


def _run(args: list[str], timeout: float) -> dict:
    """One flashsim process: wall and user CPU seconds (its own and its workers'), and its JSON."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, "-m", "flashsim.cli", *args, "--json"], capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"timed_out_s": timeout}
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = {"wall_s": round(wall, 3), "user_s": round(after.ru_utime - before.ru_utime, 3)}
    if done.returncode:
        return {**out, "error": done.stderr.strip().splitlines()[-1:]}
    return {**out, "result": json.loads(done.stdout)}


def _answer(result: dict) -> dict:
    """What a run answers, to compare runs by: cycles and bytes per simulate run (each row of a sweep)."""
    rows = result.get("rows")
    if rows is not None:
        return {f"{r['algo']} B{r['batch']} H{r['heads']} N{r['seqlen']} d{r['headdim']}"
                f"{' causal' if r['causal'] else ''}": {"time_s": r["time_s"], "hbm_read": r["hbm_read"]} for r in rows}
    return {"cycles": result["cycles"], "bytes": result["bytes"], "sim": result["sim"]}


def _differences(fast: dict, slow: dict) -> dict:
    """Relative differences of a run's answer from its plain run's: cycles and each byte count (a sweep: the
    largest over its rows of time and HBM bytes)."""
    if "rows" in fast:
        a, b = _answer(fast), _answer(slow)
        return {key: max(abs(a[row][key] - b[row][key]) / b[row][key] for row in b if b[row][key])
                for key in ("time_s", "hbm_read")}
    return {"cycles": (fast["cycles"] - slow["cycles"]) / slow["cycles"],
            **{k: (fast["bytes"][k] - v) / v if v else float(fast["bytes"][k] != v) for k, v in slow["bytes"].items()}}


def _case(name: str, command: str, target: float, repeats: int, plain: bool, timeout: float) -> dict:
    args = command.split()
    if args[0] == "simulate":
        args += NO_LIMIT
    runs = [_run(args, timeout) for _ in range(repeats)]
    ok = [r for r in runs if "result" in r]
    out = {"command": "flashsim " + command, "target_wall_s": target,
           "wall_s": [r.get("wall_s") for r in runs], "user_s": [r.get("user_s") for r in runs]}
    if ok:
        out["median_wall_s"] = statistics.median(r["wall_s"] for r in ok)
        out["median_user_s"] = statistics.median(r["user_s"] for r in ok)
        out["answer"] = _answer(ok[0]["result"])
    else:
        out["failed"] = runs[0]
    if plain and ok:
        base = _run([*args, "--no-extrapolate"], timeout)
        out["plain"] = {k: base[k] for k in base if k != "result"}
        if "result" in base:
            out["plain"]["answer"] = _answer(base["result"])
            out["plain"]["rel_diff"] = _differences(ok[0]["result"], base["result"])
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "simulator-speed.json"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--only", nargs="+", choices=[c[0] for c in CASES], help="run only these cases")
    ap.add_argument("--plain", action="store_true", help="also run each simulate case with --no-extrapolate")
    ap.add_argument("--jobs", type=int, default=1, help="cases run at once")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds a process may take")
    args = ap.parse_args(argv)
    cases = [c for c in CASES if not args.only or c[0] in args.only]
    with ThreadPoolExecutor(args.jobs) as pool:
        done = list(pool.map(lambda c: _case(c[0], c[1], c[2], c[3] or args.repeats, args.plain, args.timeout),
                             cases))
    result = {
        "provenance": {"date": date.today().isoformat(), "python": platform.python_version(),
                       "machine": platform.machine(), "cpus": os.cpu_count(), "load_avg": os.getloadavg(),
                       "jobs": args.jobs, "command": "python3 -m flashsim.experiments.bench_simulator "
                       + " ".join(argv if argv is not None else sys.argv[1:])},
        **{c[0]: d for c, d in zip(cases, done, strict=True)},
    }
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    for c, d in zip(cases, done, strict=True):
        print(c[0], d.get("median_wall_s"), d.get("median_user_s"), d.get("plain", {}).get("rel_diff"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
