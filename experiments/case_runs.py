"""What the experiments that run named cases, each in a process of its own, share: their command line (--only,
--jobs, --out), a case run in a child process, and the rows written with their provenance."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor


def parse(doc: str, names: list[str], out_help: str, argv: list[str] | None, extra=None) -> argparse.Namespace:
    """--only NAME ..., --jobs N and --out FILE (and what `extra(parser)` adds), checked before any case runs."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--only", nargs="+", metavar="NAME", help=f"these cases only, of: {', '.join(names)}")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes at once")
    ap.add_argument("--out", help=out_help)
    if extra is not None:
        extra(ap)
    args = ap.parse_args(argv)
    if args.jobs < 1:
        ap.error(f"--jobs must be at least 1, got {args.jobs}")
    unknown = sorted(set(args.only or ()) - set(names))
    if unknown:
        ap.error(f"no such case: {', '.join(unknown)}")
    if args.out and not os.path.isdir(os.path.dirname(os.path.abspath(args.out))):
        ap.error(f"--out {args.out}: no such folder")  # said now, not after minutes of runs
    return args


def run_child(code: str, payload, row: dict) -> dict:
    """`row` with what the child (`code`, given `payload` as JSON in argv[1]) printed last as a JSON line, or with
    the last line of its error as `failed`."""
    done = subprocess.run([sys.executable, "-c", code, json.dumps(payload)], capture_output=True, text=True)
    if done.returncode != 0:
        return {**row, "failed": done.stderr.strip().splitlines()[-1:]}
    return {**row, **json.loads(done.stdout.strip().splitlines()[-1])}


def run_cases(cases: list[tuple], measure, jobs: int, line, width: int = 44) -> list[dict]:
    """Each case measured (`jobs` at once, each in its child process) and printed: the case's name, then
    line(row), or why it failed."""
    with ThreadPoolExecutor(jobs) as pool:
        rows = list(pool.map(measure, cases))
    for row in rows:
        what = f"failed: {' '.join(row['failed'])}" if "failed" in row else line(row)
        print(f"{row['case']:{width}s} {what}", flush=True)
    return rows


def write_rows(path: str, command: str, rows: list, **extra) -> None:
    """The rows as JSON with the machine's provenance and the command that made them."""
    from .bench_simulator import machine_provenance

    with open(path, "w") as f:
        json.dump({"provenance": {**machine_provenance(), "command": command}, **extra, "rows": rows}, f, indent=1)
        f.write("\n")


def only_flag(only: list[str] | None) -> str:
    """--only as the command line gave it (empty without it)."""
    return " --only " + " ".join(repr(n) for n in only) if only else ""
