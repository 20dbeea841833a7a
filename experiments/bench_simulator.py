"""How fast the simulator answers: whole `flashsim` processes, timed (wall and user CPU), and what they answer.

    python3 -m flashsim.experiments.bench_simulator [--out FILE] [--repeats 3] [--only point grid ...]
        [--plain] [--jobs N] [--against TREE | --against-source]

Each case runs `repeats` times as its own process (medians reported; the large ones once). --plain adds each
case's plain run (`--no-extrapolate`: every op simulated, the sample of SMs kept) and the relative
difference of cycles and bytes. --jobs runs that many cases at once (a machine with spare cores); the
sweep always runs on 2 worker processes, as on the 2-core machine the targets are set for. The flashsim
timed is the one `python3 -m flashsim.cli` imports (PYTHONPATH picks another). --against TREE times another
checkout of flashsim (a directory holding its sources) in the same way, each of its runs right after the same
case's run of this one, and says whether both answer alike: machines of one kind differ by a third in speed,
so a change's cost is measured side by side. --against-source does the same with this flashsim run from its
Python source (FLASHSIM_PURE_PYTHON=1), against its compiled modules (setup.py). The provenance names the
modules that ran compiled (`compiled`) and records how long an empty 10M-iteration Python loop takes on the
machine (`loop_s`), to set rounds measured on different machines beside each other.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
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


def _run(args: list[str], timeout: float, env: dict | None = None) -> dict:
    """One flashsim process: wall and user CPU seconds (its own and its workers'), and its JSON. `env`: the
    process's environment (another tree's PYTHONPATH)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, "-m", "flashsim.cli", *args, "--json"], capture_output=True,
                              text=True, timeout=timeout, env=env)
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


def _same(a: dict, b: dict) -> bool:
    """Whether two answers agree in what the model computes (a run's wall seconds and other bookkeeping of its
    `sim` aside)."""
    return {k: v for k, v in a.items() if k != "sim"} == {k: v for k, v in b.items() if k != "sim"}


def _differences(fast: dict, slow: dict) -> dict:
    """Relative differences of a run's answer from its plain run's: cycles and each byte count (a sweep: the
    largest over its rows of time and HBM bytes)."""
    if "rows" in fast:
        a, b = _answer(fast), _answer(slow)
        return {key: max(abs(a[row][key] - b[row][key]) / b[row][key] for row in b if b[row][key])
                for key in ("time_s", "hbm_read")}
    return {"cycles": (fast["cycles"] - slow["cycles"]) / slow["cycles"],
            **{k: (fast["bytes"][k] - v) / v if v else float(fast["bytes"][k] != v) for k, v in slow["bytes"].items()}}


def _timings(runs: list[dict]) -> dict:
    """The runs' wall and user seconds, and their medians over those that answered."""
    ok = [r for r in runs if "result" in r]
    out = {"wall_s": [r.get("wall_s") for r in runs], "user_s": [r.get("user_s") for r in runs]}
    if ok:
        out["median_wall_s"] = statistics.median(r["wall_s"] for r in ok)
        out["median_user_s"] = statistics.median(r["user_s"] for r in ok)
    return out


def _case(name: str, command: str, target: float, repeats: int, plain: bool, timeout: float,
          against: dict | None = None) -> dict:
    args = command.split()
    if args[0] == "simulate":
        args += NO_LIMIT
    runs, other = [], []
    for _ in range(repeats):  # with --against, the two trees' runs alternate
        runs.append(_run(args, timeout))
        if against is not None:
            other.append(_run(args, timeout, against))
    ok = [r for r in runs if "result" in r]
    out = {"command": "flashsim " + command, "target_wall_s": target, **_timings(runs)}
    if ok:
        out["answer"] = _answer(ok[0]["result"])
    else:
        out["failed"] = runs[0]
    if against is not None:
        theirs = [r for r in other if "result" in r]
        out["against"] = _timings(other)
        if ok and theirs:
            out["against"]["same_answer"] = _same(_answer(theirs[0]["result"]), out["answer"])
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
    ap.add_argument("--against", metavar="TREE", help="also time this checkout of flashsim, run for run")
    ap.add_argument("--against-source", action="store_true",
                    help="also time this flashsim run from its Python source (no compiled modules), run for run")
    args = ap.parse_args(argv)
    if args.against and args.against_source:
        ap.error("--against and --against-source: give one of them")
    if args.repeats < 1:
        ap.error(f"--repeats must be at least 1, got {args.repeats}")
    cases = [c for c in CASES if not args.only or c[0] in args.only]
    with contextlib.ExitStack() as stack:
        against = _tree_env(args.against, stack, ap) if args.against else None
        if args.against_source:
            against = {**os.environ, "FLASHSIM_PURE_PYTHON": "1"}
        loop_s = _loop_seconds()
        with ThreadPoolExecutor(args.jobs) as pool:
            done = list(pool.map(lambda c: _case(c[0], c[1], c[2], c[3] or args.repeats, args.plain, args.timeout,
                                                 against), cases))
    result = {
        "provenance": {**machine_provenance(loop_s),
                       **({"against": str(Path(args.against).resolve())} if args.against else {}),
                       **({"against": "this flashsim from its Python source"} if args.against_source else {}),
                       "jobs": args.jobs, "command": "python3 -m flashsim.experiments.bench_simulator "
                       + " ".join(argv if argv is not None else sys.argv[1:])},
        **{c[0]: d for c, d in zip(cases, done, strict=True)},
    }
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    for c, d in zip(cases, done, strict=True):
        theirs = d.get("against")
        print(c[0], d.get("median_wall_s"), d.get("median_user_s"), d.get("plain", {}).get("rel_diff"),
              *(("against", theirs.get("median_wall_s"), theirs.get("median_user_s"),
                 "same answer" if theirs.get("same_answer") else "other answer") if theirs else ()))
    return 0


def _tree_env(tree: str, stack: contextlib.ExitStack, ap) -> dict:
    """The environment that makes `python3 -m flashsim.cli` import the flashsim in `tree`: a folder holding a
    `flashsim` link to it, first on PYTHONPATH."""
    root = Path(tree).resolve()
    if not (root / "cli.py").is_file() or not (root / "simulator").is_dir():
        ap.error(f"--against {tree}: not a flashsim checkout (no cli.py and simulator/ in it)")
    site = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="flashsim-against-")))
    (site / "flashsim").symlink_to(root)
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))}


def machine_provenance(loop_s: float | None = None) -> dict:
    """What a timing of the simulator ran on: the date, Python, the machine, its load, its speed at plain Python
    (loop_s, measured now unless given) and which modules ran compiled."""
    return {"date": date.today().isoformat(), "python": platform.python_version(), "machine": platform.machine(),
            "cpus": os.cpu_count(), "load_avg": os.getloadavg(),
            "loop_s": _loop_seconds() if loop_s is None else loop_s, "compiled": _compiled()}


def _compiled() -> dict:
    """Which of the timed flashsim's modules run compiled (flashsim.compiled.status) in a process of its own."""
    probe = "import json, flashsim.simulator.api, flashsim.compiled as c; print(json.dumps(c.status()))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    try:
        return json.loads(done.stdout)
    except ValueError:
        return {}


def _loop_seconds(repeats: int = 3) -> float:
    """The machine's speed at plain Python: the fastest of a few empty 10M-iteration loops, in seconds."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(10_000_000):
            pass
        best = min(best, time.perf_counter() - start)
    return round(best, 3)


if __name__ == "__main__":
    sys.exit(main())
