"""Shortcuts against the plain run: each problem simulated with its shortcuts (the default) and with
`extrapolate=False` (every op of every sampled block interpreted, the same sample of SMs), compared cycle
for cycle and byte for byte.

    python3 -m flashsim.experiments.shortcut_exactness [--out FILE] [--only NAME ...] [--large]

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
from flashsim.hw_profiles import load_profile
from flashsim.simulator import simulate

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
]

# The speed targets' large problems (simulator-speed.json) with a plain run of minutes.
LARGE_CASES = [
    ("v3 causal 32k b4", "v3", Problem(4, 32, 32768, 128, causal=True), "h200"),
    ("v3 causal 128k", "v3", Problem(1, 8, 131072, 128, causal=True), "h100"),
    ("v2 b16 32k", "v2", Problem(16, 32, 32768, 128), "h100"),
]


def compare(algo: str, problem: Problem, hw: str) -> dict:
    profile = load_profile(hw)
    start = time.process_time()
    fast = simulate(algo, problem, profile, max_steps=None)
    mid = time.process_time()
    plain = simulate(algo, problem, profile, extrapolate=False, max_steps=None)
    end = time.process_time()
    return {
        "algo": algo, "hw": hw, "problem": problem.as_dict(),
        "cycles": fast.cycles, "plain_cycles": plain.cycles,
        "rel_diff_cycles": (fast.cycles - plain.cycles) / plain.cycles,
        "bytes_equal": fast.bytes == plain.bytes,
        "bytes_diff": {k: fast.bytes[k] - v for k, v in plain.bytes.items() if fast.bytes[k] != v},
        "ops": fast.sim["ops"], "plain_ops": plain.sim["ops"],
        "blocks_extrapolated": fast.sim["blocks_extrapolated"], "loop_skip": fast.sim["loop_skip"],
        "cpu_s": round(mid - start, 3), "plain_cpu_s": round(end - mid, 3),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "shortcut-exactness.json"))
    ap.add_argument("--only", nargs="+", choices=[c[0] for c in CASES + LARGE_CASES],
                    help="compare only these problems")
    ap.add_argument("--large", action="store_true", help="add the large problems (minutes each)")
    args = ap.parse_args(argv)
    rows = []
    for name, algo, problem, hw in CASES + (LARGE_CASES if args.large or args.only else []):
        if args.only and name not in args.only:
            continue
        row = {"name": name, **compare(algo, problem, hw)}
        rows.append(row)
        print(f"{name}: {row['cycles']:,} vs {row['plain_cycles']:,} cycles ({row['rel_diff_cycles']:+.4%}), "
              f"bytes {'equal' if row['bytes_equal'] else row['bytes_diff']}, "
              f"{row['ops']:,} of {row['plain_ops']:,} ops", flush=True)
    out = {"provenance": {"date": date.today().isoformat(), "python": platform.python_version(),
                          "command": "python3 -m flashsim.experiments.shortcut_exactness "
                          + " ".join(argv if argv is not None else sys.argv[1:])},
           "rows": rows}
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    return 0 if all(r["rel_diff_cycles"] == 0 and r["bytes_equal"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
