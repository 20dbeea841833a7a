"""Where our backward kernel's warps wait, from Nsight Compute's source page (per-SASS-instruction stall samples).

    python3 -m flashsim.experiments.bwd_fid_stalls DIR

Reads DIR/ncu-ours-d{D}-n{N}-c{C}-sass.csv (`ncu -i REPORT --page source --csv --print-source sass`, as
experiments/h200_bwd_fid.sh writes them) with the kernel's duration from DIR/ncu-...-raw.csv, and prints per
profile: the share of the warps' stall samples before the loop over Q blocks, in it and after it (the
epilogue), the epilogue's time per block (its share x the duration / blocks per SM), and the instructions that
wait longest on the long scoreboard. Needs no GPU.
"""

from __future__ import annotations

import csv
import re
import sys
from pathlib import Path

SAMPLES = "Warp Stall Sampling (All Samples)"
SMS = 132
TOKENS, HIDDEN, BLOCK_N = 16384, 2048, 128


def _num(text: str) -> float:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def read_source(path: Path) -> list[dict]:
    rows = [r for r in csv.reader(path.open()) if r]
    header = next(r for r in rows if r[:2] == ["Address", "Source"])  # after a line naming the kernel
    start = rows.index(header) + 1
    return [dict(zip(header, r, strict=True)) for r in rows[start:] if len(r) == len(header)]


def loop_bounds(rows: list[dict]) -> tuple[int, int]:
    """(first, last) address of the longest backward branch's loop: the loop over Q blocks."""
    best = (0, 0)
    for r in rows:
        m = re.search(r"BRA (0x[0-9a-f]+)", r["Source"])
        if m and "@" in r["Source"]:
            at, target = int(r["Address"], 16), int(m.group(1), 16)
            if target < at and at - target > best[1] - best[0]:
                best = (target, at)
    return best


def duration_s(raw: Path) -> float:
    rows = [r for r in csv.reader(raw.open()) if r]
    header = next(r for r in rows if "gpu__time_duration.sum" in r)
    i = header.index("gpu__time_duration.sum")
    unit, value = rows[rows.index(header) + 1][i], rows[rows.index(header) + 2][i]
    return _num(value) * {"ns": 1e-9, "us": 1e-6, "usecond": 1e-6, "ms": 1e-3, "msecond": 1e-3}.get(unit, 1e-9)


def summarise(path: Path) -> str:
    d, n, c = map(int, re.search(r"-d(\d+)-n(\d+)-c(\d)", path.name).groups())
    rows = read_source(path)
    lo, hi = loop_bounds(rows)
    total = sum(_num(r[SAMPLES]) for r in rows)
    parts = {"prologue": 0.0, "loop": 0.0, "epilogue": 0.0}
    for r in rows:
        at = int(r["Address"], 16)
        parts["prologue" if at < lo else "loop" if at <= hi else "epilogue"] += _num(r[SAMPLES]) / total
    blocks = max(1, TOKENS // n) * (HIDDEN // d) * (n // BLOCK_N)
    raw = path.with_name(path.name.replace("-sass", "-raw"))
    seconds = duration_s(raw) if raw.exists() else 0.0
    per_block = parts["epilogue"] * seconds / (blocks / SMS)
    lines = [f"d{d} N {n} causal {c}: {blocks} blocks, {seconds * 1e6:.0f} us; samples "
             + ", ".join(f"{k} {100 * v:.1f}%" for k, v in parts.items())
             + f"; epilogue {per_block * 1e6:.2f} us a block"]
    waits = sorted(rows, key=lambda r: -_num(r.get("stall_long_sb", "0")))[:6]
    for r in waits:
        at = int(r["Address"], 16)
        where = "prologue" if at < lo else "loop" if at <= hi else "epilogue"
        lines.append(f"  {where:8s} +{at - lo:#07x} {r['Source'].strip()[:48]:48s} long scoreboard "
                     f"{100 * _num(r['stall_long_sb']) / total:.2f}%")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        sys.stderr.write("usage: bwd_fid_stalls DIR\n")
        return 2
    for path in sorted(Path(argv[0]).glob("ncu-ours-*-sass.csv")):
        print(summarise(path))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
