"""Shortcuts against the plain run: each problem simulated with its shortcuts (the default) and with
`extrapolate=False` (every op of every sampled block interpreted, the same sample of SMs), compared cycle
for cycle and byte for byte; the exit status is 0 when all are within BOUND (0.5%).

    python3 -m flashsim.experiments.shortcut_exactness [--out FILE] [--only NAME ...] [--large]
        [--plain-from FILE ...]

--plain-from takes the plain runs' answers from an earlier output (the shortcuts do not change them), so a
large problem's plain run of minutes is taken once; only from an output of the same model (its fingerprint,
recorded in each output's provenance): a model change moves the plain answers too.

The problems are the shortcut tests' (tests/test_shortcuts.py), on the default sample; --large adds the
speed targets' large problems whose plain run takes under 10 minutes of CPU (minutes each; the causal GQA
v2 problem at 64k is left out: its plain run takes longer).
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
from flashsim.errors import FlashsimError
from flashsim.hw_profiles import load_profile
from flashsim.simulator import simulate

from . import accuracy

# Largest relative difference from the plain run accepted, in cycles and in every byte count: shortcuts
# taken within a tolerance (the unit skip, the evicting loop skip) may differ by up to this much.
BOUND = 5e-3

# (name, algo, problem, profile)
CASES = [
    ("v2 fa2-point", "v2", Problem(1, 16, 16384, 128), "h100"),
    ("v2 d64", "v2", Problem(2, 16, 8192, 64), "h100"),
    ("v2 a100", "v2", Problem(4, 16, 4096, 128), "a100"),
    ("v2 gqa causal", "v2", Problem(2, 32, 8192, 128, kv_heads=8, causal=True), "h200"),
    ("v3 8k", "v3", Problem(1, 16, 8192, 128), "h100"),
    ("v3 16k", "v3", Problem(1, 16, 16384, 128), "h100"),
    ("v3 d64", "v3", Problem(2, 16, 8192, 64), "h100"),
    ("v3 d256", "v3", Problem(1, 16, 8192, 256), "h200"),
    ("v3 b4 4k", "v3", Problem(4, 16, 4096, 128), "h200"),
    ("v3 causal 8k", "v3", Problem(1, 16, 8192, 128, causal=True), "h200"),
    ("v3 causal 16k", "v3", Problem(1, 16, 16384, 128, causal=True), "h100"),
    ("v3 gqa causal", "v3", Problem(2, 32, 8192, 128, kv_heads=8, causal=True), "h200"),
    ("v3-fp8 8k", "v3-fp8", Problem(1, 16, 8192, 128, dtype="fp8"), "h100"),
    # the unit skip's (tests/test_shortcut_tolerance.py)
    ("v3 causal 8k b4 units", "v3", Problem(4, 32, 8192, 128, causal=True), "h200"),
    ("v2 b4 16k units", "v2", Problem(4, 16, 16384, 128), "h100"),
]

# The speed targets' large problems (simulator-speed.json) with a plain run of minutes.
LARGE_CASES = [
    ("v3 causal 32k b4", "v3", Problem(4, 32, 32768, 128, causal=True), "h200"),
    ("v3 causal 128k", "v3", Problem(1, 8, 131072, 128, causal=True), "h100"),
    ("v2 b16 32k", "v2", Problem(16, 32, 32768, 128), "h100"),
]


def plain_run(algo: str, problem: Problem, hw: str) -> dict:
    """The plain run's answer: every op of every sampled block interpreted."""
    start = time.process_time()
    plain = simulate(algo, problem, load_profile(hw), extrapolate=False, max_steps=None)
    return {"cycles": plain.cycles, "bytes": plain.bytes, "ops": plain.sim["ops"],
            "cpu_s": round(time.process_time() - start, 3)}


def compare(algo: str, problem: Problem, hw: str, plain: dict | None = None) -> dict:
    """The run with its shortcuts against the plain run (`plain`: its answer from an earlier run, which the
    shortcuts do not change)."""
    start = time.process_time()
    fast = simulate(algo, problem, load_profile(hw), max_steps=None)
    cpu = time.process_time() - start
    plain = plain or plain_run(algo, problem, hw)
    diffs = {k: (fast.bytes[k] - v) / v if v else float(fast.bytes[k] != v) for k, v in plain["bytes"].items()}
    return {
        "algo": algo, "hw": hw, "problem": problem.as_dict(),
        "cycles": fast.cycles, "plain_cycles": plain["cycles"],
        "rel_diff_cycles": (fast.cycles - plain["cycles"]) / plain["cycles"],
        "bytes_equal": fast.bytes == plain["bytes"],
        "bytes_diff": {k: fast.bytes[k] - v for k, v in plain["bytes"].items() if fast.bytes[k] != v},
        "worst_rel_diff_bytes": max(abs(d) for d in diffs.values()),
        "bytes": fast.bytes, "plain_bytes": plain["bytes"],
        "ops": fast.sim["ops"], "plain_ops": plain["ops"],
        "blocks_extrapolated": fast.sim["blocks_extrapolated"], "loop_skip": fast.sim["loop_skip"],
        "unit_skip": fast.sim.get("unit_skip"),
        "cpu_s": round(cpu, 3), "plain_cpu_s": plain["cpu_s"],
    }


def within(row: dict) -> bool:
    return abs(row["rel_diff_cycles"]) <= BOUND and row["worst_rel_diff_bytes"] <= BOUND


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "shortcut-exactness.json"))
    ap.add_argument("--only", nargs="+", choices=[c[0] for c in CASES + LARGE_CASES],
                    help="compare only these problems")
    ap.add_argument("--large", action="store_true", help="add the large problems (minutes each)")
    ap.add_argument("--plain-from", nargs="+", default=[], metavar="FILE",
                    help="take the plain runs' answers from earlier outputs of this command or plain-runs files "
                    "(rows of the same problem), taken with this model")
    args = ap.parse_args(argv)
    from .validate_compare import simulation_fingerprint

    fingerprint = simulation_fingerprint()
    try:
        known = _plain_answers(args.plain_from, fingerprint)
    except FlashsimError as exc:
        print(f"shortcut_exactness: {exc}", file=sys.stderr)
        return 2
    rows = []
    for name, algo, problem, hw in CASES + (LARGE_CASES if args.large or args.only else []):
        if args.only and name not in args.only:
            continue
        key = (name, algo, hw, json.dumps(problem.as_dict(), sort_keys=True))
        row = {"name": name, **compare(algo, problem, hw, known.get(key)), "plain_reused": key in known}
        rows.append(row)
        print(f"{name}: {row['cycles']:,} vs {row['plain_cycles']:,} cycles ({row['rel_diff_cycles']:+.4%}), "
              f"bytes {'equal' if row['bytes_equal'] else row['bytes_diff']}, "
              f"{row['ops']:,} of {row['plain_ops']:,} ops", flush=True)
    out = {"provenance": {"date": date.today().isoformat(), "python": platform.python_version(),
                          "simulation_fingerprint": fingerprint,
                          "command": "python3 -m flashsim.experiments.shortcut_exactness "
                          + " ".join(argv if argv is not None else sys.argv[1:])},
           "rows": rows}
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    return 0 if all(within(r) for r in rows) else 1


def _plain_answers(paths: list[str], fingerprint: str) -> dict:
    """(name, algo, hw, problem) -> the plain run's answer, from earlier outputs of this command taken with the
    model whose fingerprint is `fingerprint`; FlashsimError for a file that is unreadable or of another model."""
    out = {}
    for path in paths:
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise FlashsimError(f"cannot read --plain-from {path}: {exc}") from None
        taken = accuracy.stamp(data.get("provenance", {}))
        if taken != fingerprint:
            which = f"model {taken}" if taken else "an unrecorded model"
            raise FlashsimError(f"--plain-from {path} holds plain runs of {which}, not of this one ({fingerprint}): "
                                "take them again (leave out --plain-from)")
        for row in data["rows"]:
            if "plain_bytes" in row:
                key = (row["name"], row["algo"], row["hw"], json.dumps(row["problem"], sort_keys=True))
                out[key] = {"cycles": row["plain_cycles"], "bytes": row["plain_bytes"], "ops": row["plain_ops"],
                            "cpu_s": row["plain_cpu_s"]}
    return out


if __name__ == "__main__":
    sys.exit(main())
