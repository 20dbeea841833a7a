"""Instructions a simulation executes, counted by valgrind's callgrind: a change's cost that the machine's
speed does not move (wall times on a shared 2-core machine swing 10-40% from run to run, and machines of one
kind differ by a factor of several from day to day).

    python3 -m flashsim.experiments.instruction_count [--only NAME ...] [--against TREE | --against-source]
        [--jobs N] [--out FILE]

Each case is one `simulate()` in a process of its own under callgrind (about 50 times slower than without it),
and the count is the whole process's: Python's start and the imports (about 0.6 G instructions, from bytecode
that a run without callgrind writes first) are in it, the same for both trees. --against TREE counts another
checkout of flashsim the same way, --against-source this one from its Python source (FLASHSIM_PURE_PYTHON=1),
and each case says whether the two answered alike (cycles, events and bytes). A count repeats within 0.4% (the
order Python's hashing gives sets moves it).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from datetime import date
from pathlib import Path

from .bench_simulator import _compiled, _tree_env

# (name, algo, hw, problem): the FA2-grid point, and two of the grid's whole-chip points (small enough for
# callgrind: a few minutes each)
CASES = [
    ("point", "v2", "h100", dict(batch=1, heads=16, seqlen_q=16384, headdim=128)),
    ("v3-whole-chip", "v3", "h100", dict(batch=32, heads=16, seqlen_q=512, headdim=128)),
    ("v2-whole-chip", "v2", "h100", dict(batch=8, heads=16, seqlen_q=512, headdim=128)),
]

SIMULATE = """
import json, sys
from flashsim.algorithms.problem import Problem
from flashsim.hw_profiles.loader import load_profile
from flashsim.simulator.api import simulate
algo, hw, problem = json.loads(sys.argv[1])
r = simulate(algo, Problem(**problem), load_profile(hw))
print(json.dumps({"cycles": r.cycles, "events": r.sim["events"], "bytes": r.bytes}))
"""

COLLECTED = re.compile(r"Collected\s*:\s*([0-9]+)")


def collected(stderr: str) -> int | None:
    """The instruction count callgrind reports at the end of its run (None if it reports none)."""
    found = COLLECTED.findall(stderr)
    return int(found[-1]) if found else None


def count(case: tuple, env: dict | None, valgrind: str) -> dict:
    """One case under callgrind: its instructions and its answer. Both trees import from bytecode: a run
    without callgrind first writes it under a cache prefix of its own (compiling the modules' source would
    count too, about 0.2 G on the point, for whichever tree lacks its bytecode)."""
    _, algo, hw, problem = case
    with tempfile.TemporaryDirectory(prefix="flashsim-callgrind-") as tmp:
        env = {k: v for k, v in (env or os.environ).items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = f"{tmp}/pycache"
        args = [sys.executable, "-c", SIMULATE, json.dumps([algo, hw, problem])]
        subprocess.run(args, capture_output=True, env=env)
        done = subprocess.run([valgrind, "--tool=callgrind", "--dump-instr=no", f"--callgrind-out-file={tmp}/out",
                               *args], capture_output=True, text=True, env=env)
    instructions = collected(done.stderr)
    if done.returncode != 0 or instructions is None:
        return {"failed": done.stderr.strip().splitlines()[-3:]}
    return {"instructions": instructions, "answer": json.loads(done.stdout)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="+", choices=[c[0] for c in CASES], help="count only these cases")
    ap.add_argument("--against", metavar="TREE", help="also count this checkout of flashsim")
    ap.add_argument("--against-source", action="store_true",
                    help="also count this flashsim run from its Python source (no compiled modules)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes at once")
    ap.add_argument("--out", help="write the counts here as JSON")
    args = ap.parse_args(argv)
    if args.against and args.against_source:
        ap.error("--against and --against-source: give one of them")
    if args.jobs < 1:
        ap.error(f"--jobs must be at least 1, got {args.jobs}")
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        ap.error("valgrind is not installed here (its callgrind tool counts the instructions)")
    cases = [c for c in CASES if not args.only or c[0] in args.only]
    with contextlib.ExitStack() as stack:
        other = _tree_env(args.against, stack, ap) if args.against else None
        if args.against_source:
            other = {**os.environ, "FLASHSIM_PURE_PYTHON": "1"}
        runs = [(c, None) for c in cases] + ([(c, other) for c in cases] if other is not None else [])
        with ThreadPoolExecutor(args.jobs) as pool:
            done = list(pool.map(lambda run: count(run[0], run[1], valgrind), runs))
    out = {}
    for k, case in enumerate(cases):
        row = {"algo": case[1], "hw": case[2], "problem": case[3], **done[k]}
        if other is not None:
            theirs = done[len(cases) + k]
            row["against"] = theirs
            if "instructions" in row and "instructions" in theirs:
                row["ratio"] = round(row["instructions"] / theirs["instructions"], 4)
                row["same_answer"] = row["answer"] == theirs["answer"]
        out[case[0]] = row
        print(case[0], row.get("instructions", "failed"),
              *(("against", row["against"].get("instructions", "failed"), row.get("ratio"),
                 "same answer" if row.get("same_answer") else "other answer") if other is not None else ()))
    if args.out:
        provenance = {"date": date.today().isoformat(), "python": sys.version.split()[0], "compiled": _compiled(),
                      **({"against": str(Path(args.against).resolve())} if args.against else {}),
                      **({"against": "this flashsim from its Python source"} if args.against_source else {}),
                      "command": "python3 -m flashsim.experiments.instruction_count "
                      + " ".join(argv if argv is not None else sys.argv[1:])}
        Path(args.out).write_text(json.dumps({"provenance": provenance, **out}, indent=1) + "\n")
    return 0 if all("instructions" in d for d in done) else 1


if __name__ == "__main__":
    sys.exit(main())
