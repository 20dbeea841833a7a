"""The compiler's bookkeeping in the mma.sync forward kernels, by stretch, from Nsight Compute's executed counts.

The instruction lowering (simulator/instructions.py) counts what the tile ops do: the softmax's arithmetic,
the GEMMs' HMMA and ldmatrix, barriers. What it leaves out, the compiler's bookkeeping (integer address
arithmetic and register moves, cp.async and its commits, branches, predicate and uniform-datapath
instructions, local-memory spills), is 12-29% of what the loops issue. This counts it per warp in the three
stretches of a block's code, from the per-SASS-instruction executed counts of `ncu --page source --csv
--print-source sass` (the -sass.txt files of experiments/h200_fa2_sass.sh, h200_d256.sh, ...):

  - loop: one pass of the hot K/V loop (the instructions executed at least half as often as the most
    executed one, over that count, as `fa2_mix` takes it);
  - prologue: the rest before the loop's first instruction, per warp (the first instruction of the kernel
    runs once per warp: its count is the warps launched); FA2's peeled first K/V step is here;
  - epilogue: the rest after it, and the loop's own rarely taken branches, per warp.

    python3 -m flashsim.experiments.bookkeeping FILE... [--json]

`algorithms/schedules/forward_code.py` BOOKKEEPING holds the numbers for the development shapes' non-causal
runs (the mask's instructions are lowered, so a causal run's are the same less those); a test re-derives them
from the committed files.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .fa2_mix import HOT, SASS_FILE, executed, tile
from .sass_counts import CLASSES

# the classes the lowering counts none of
BOOKKEEPING_CLASSES = frozenset(
    {"int", "other", "uniform", "branch", "cp_async", "move", "special", "global", "sts", "pack"}
)


def stretches(path: Path) -> dict:
    """{"kernel", "tile", "impl", "headdim", "causal", "prologue", "loop", "epilogue"}: bookkeeping warp
    instructions per warp of each stretch (loop: per pass)."""
    name, instrs = executed(path)
    warps = instrs[0][2]
    top = max(count for _, _, count in instrs)
    first = next(i for i, (_, _, count) in enumerate(instrs) if count >= HOT * top)
    out = {"prologue": 0.0, "loop": 0.0, "epilogue": 0.0}
    for i, (op, _, count) in enumerate(instrs):
        if CLASSES.get(op, "other") not in BOOKKEEPING_CLASSES:
            continue
        if count >= HOT * top:
            out["loop"] += count / top
        else:
            out["prologue" if i < first else "epilogue"] += count / warps
    m = SASS_FILE.search(path.name)
    return {
        "kernel": name,
        "tile": list(tile(name)),
        "impl": m["impl"] if m else "",
        "headdim": int(m["d"]) if m else 0,
        "causal": bool(m and m["c"] == "1"),
        **{k: round(v, 1) for k, v in out.items()},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m flashsim.experiments.bookkeeping", description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="+", type=Path, help="ncu-IMPL-dD-nN-cC-sass.txt[.gz] files")
    ap.add_argument("--json", action="store_true", help="one JSON object per file")
    args = ap.parse_args(argv)
    for path in args.files:
        if not path.is_file():
            print(f"bookkeeping: no such file: {path}", file=sys.stderr)
            return 2
    for path in args.files:
        row = stretches(path)
        if args.json:
            print(json.dumps(row))
        else:
            bm, bn, w = row["tile"]
            print(
                f"{row['impl']:10s} d{row['headdim']:<3d} {bm}x{bn} w{w} {'causal' if row['causal'] else 'full  '} "
                f"prologue {row['prologue']:7.1f}  loop {row['loop']:6.1f}  epilogue {row['epilogue']:7.1f}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
