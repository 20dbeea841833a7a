"""What a set of `simulate` runs answers, to check that a change for speed changed no answer.

    python3 -m flashsim.experiments.speed_answers [--out FILE]      # one JSON line per case
    python3 -m flashsim.experiments.speed_answers --compare A B     # cases whose answers differ (exit 1 if any)

The cases cover each algorithm, both passes, causal and GQA problems, sampled and whole-chip runs, the plain
run (`--no-extrapolate`) and the shortcuts (loop, periodic, carried and unit skips). An answer is a run's
cycles, every byte count, its events and ops, and the shortcuts it took; the wall time is kept beside it. The
flashsim run is the one `python3 -m` imports (PYTHONPATH picks another tree).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import time

CASES = (
    "--hw h100 --algo v2 --batch 1 --heads 16 --seqlen 16384 --headdim 128",
    "--hw h100 --algo v2 --batch 1 --heads 16 --seqlen 16384 --headdim 128 --no-extrapolate",
    "--hw h100 --algo v3 --batch 2 --heads 16 --seqlen 8192 --headdim 64",
    "--hw h100 --algo v3 --batch 2 --heads 16 --seqlen 4096 --headdim 128",
    "--hw h100 --algo v3 --batch 2 --heads 16 --seqlen 4096 --headdim 128 --causal",
    "--hw h200 --algo v2 --batch 1 --heads 16 --seqlen 4096 --headdim 64 --causal",
    "--hw h100 --algo v1 --batch 2 --heads 8 --seqlen 2048 --headdim 64",
    "--hw h100 --algo standard --batch 2 --heads 8 --seqlen 1024 --headdim 64",
    "--hw h100 --algo v2-bwd --batch 1 --heads 8 --seqlen 2048 --headdim 64 --pass bwd",
    "--hw h100 --algo v3-bwd --batch 1 --heads 8 --seqlen 2048 --headdim 128 --pass bwd",
    "--hw h100 --algo decode --batch 8 --heads 16 --seqlen 1 --seqlen-kv 8192 --headdim 128",
    "--hw h100 --algo v3-fp8 --batch 2 --heads 16 --seqlen 4096 --headdim 128",
    "--hw h100 --algo v2 --batch 32 --heads 32 --seqlen 512 --headdim 64",
    "--hw h100 --algo v3 --batch 4 --heads 32 --seqlen 2048 --headdim 96",
    "--hw h200 --algo v2 --batch 1 --heads 8 --kv-heads 2 --seqlen 8192 --headdim 128 --full",
)
SHORTCUTS = ("loop_skip", "periodic_skips", "carried_skips", "unit_skip", "blocks_extrapolated")


def answer(case: str) -> dict:
    """One case, run in this process as `flashsim simulate CASE --json`."""
    from flashsim.cli import main

    out = io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stdout(out):
        status = main(["simulate", *case.split(), "--json"])
    wall = round(time.perf_counter() - start, 3)
    if status:
        return {"case": case, "status": status, "wall_s": wall}
    result = json.loads(out.getvalue())
    sim = result["sim"]
    return {
        "case": case,
        "wall_s": wall,
        "answer": {
            "cycles": result["cycles"],
            "bytes": result["bytes"],
            "events": sim["events"],
            "ops": sim["ops"],
            **{key: sim[key] for key in SHORTCUTS if key in sim},
        },
    }


def _load(path: str) -> dict:
    with open(path) as f:
        return {row["case"]: row for row in map(json.loads, f) if "case" in row}


def differences(a_path: str, b_path: str) -> list[str]:
    """The cases of both files whose answers differ."""
    a, b = _load(a_path), _load(b_path)
    return [case for case in a if case in b and a[case].get("answer") != b[case].get("answer")]


def changed(a_path: str, b_path: str, case: str) -> list[str]:
    """What of a case's answer differs between the files (a shortcut newly taken changes events, ops and the
    shortcut counts; a prediction changed changes cycles or bytes)."""
    a, b = _load(a_path)[case].get("answer") or {}, _load(b_path)[case].get("answer") or {}
    return [key for key in dict.fromkeys([*a, *b]) if a.get(key) != b.get(key)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="write the JSON lines here (default: stdout)")
    ap.add_argument("--compare", nargs=2, metavar=("A", "B"), help="compare two files of answers")
    args = ap.parse_args(argv)
    if args.compare:
        differ = differences(*args.compare)
        print(f"{len(differ)} cases differ" + "".join(
            f"\n  {case}: {', '.join(changed(*args.compare, case))}" for case in differ))
        return 1 if differ else 0
    with open(args.out, "w") if args.out else contextlib.nullcontext(sys.stdout) as f:
        for case in CASES:
            f.write(json.dumps(answer(case)) + "\n")
            f.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
