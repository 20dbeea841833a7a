"""The instructions v3-fp8's pre-pass issues beyond the lowering of its Quantize ops, from Nsight Compute.

    python3 -m flashsim.experiments.prepass_bookkeeping [CSV]

Reads the executed warp instructions of the pre-pass (`ncu ... --section InstructionStats --csv --page details`;
default: run 189's experiments/results/h200/session35/prepass-ncu/prepass-ncu.csv, whose four launches are
ncu_fp8.py's shapes in order) and, per head dim, solves the two shapes' totals for the instructions a warp
executes on a Q or K block and on a V block (the two paths of the kernel's code; the shapes mix them in
different proportions). Less the lowering's count (simulator/instructions.py), that is the schedule's
BOOKKEEPING (algorithms/schedules/v3_fp8.py). Prints the table as JSON.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

from flashsim.algorithms.ir import Quantize
from flashsim.algorithms.parts import cdiv
from flashsim.algorithms.problem import Problem
from flashsim.algorithms.schedules import v3_fp8
from flashsim.algorithms.tiling import resolve_tiling
from flashsim.errors import FlashsimError
from flashsim.hw_profiles.loader import load_profile
from flashsim.simulator.instructions import lower, total

CSV = Path(__file__).resolve().parent / "results/h200/session35/prepass-ncu/prepass-ncu.csv"
# ncu_fp8.py's arguments in run 189: (batch, heads, seqlen, head dim), in launch order
SHAPES = ((32, 16, 512, 128), (1, 16, 16384, 128), (32, 32, 512, 64), (1, 32, 16384, 64))


def executed(path: Path) -> list[float]:
    """The pre-pass launches' executed warp instructions, in launch order."""
    lines = path.read_text().splitlines()
    header = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if header is None:
        raise FlashsimError(f"{path}: no ncu CSV header")
    rows = [r for r in csv.DictReader(lines[header:]) if r.get("Metric Name") == "Executed Instructions"
            and "fp8_prepass" in r.get("Kernel Name", "")]
    if not rows:
        raise FlashsimError(f"{path}: no fp8_prepass launch with Executed Instructions")
    return [float(r["Metric Value"].replace(",", "")) for r in rows]


def blocks(b: int, h: int, n: int, d: int) -> tuple[int, int, int]:
    """(Q/K blocks, V blocks, chunks per thread) of the pre-pass on the default tiles for this shape."""
    p = Problem(batch=b, heads=h, seqlen_q=n, seqlen_k=n, headdim=d, dtype="fp8")
    t = resolve_tiling("v3-fp8", p, load_profile("h200"))
    q = b * h * cdiv(n, t.block_m)
    kv = b * h * cdiv(n, t.block_n)
    return q + kv, kv, v3_fp8.chunks_per_thread(t.block_m, t.block_n, d)


def table(path: Path = CSV) -> dict[tuple[int, int, str], float]:
    counts = executed(path)
    if len(counts) != len(SHAPES):
        raise FlashsimError(f"{path}: {len(counts)} pre-pass launches, expected {len(SHAPES)}")
    warps = v3_fp8.CLUSTER * v3_fp8.BLOCK_WARPS
    out = {}
    for d in sorted({s[3] for s in SHAPES}):
        pairs = [(blocks(*s), c / warps) for s, c in zip(SHAPES, counts, strict=True) if s[3] == d]
        ((qk1, v1, chunks), y1), ((qk2, v2, _), y2) = pairs
        det = qk1 * v2 - qk2 * v1
        per_qk, per_v = (y1 * v2 - y2 * v1) / det, (qk1 * y2 - qk2 * y1) / det
        for path, measured, seed in (("qk", per_qk, v3_fp8.HADAMARD_SEED), ("v", per_v, None)):
            lowered = total(lower(Quantize("x", "xq", "s", 16, d, warps, seed, chunks, 0.0)))
            out[(d, chunks, path)] = round(measured - lowered, 1)
    return out


def main(argv: list[str]) -> int:
    path = Path(argv[0]) if argv else CSV
    try:
        rows = table(path)
    except (OSError, FlashsimError) as e:
        print(f"prepass_bookkeeping: {e}", file=sys.stderr)
        return 2
    print(json.dumps({f"{d} {c} {k}": v for (d, c, k), v in rows.items()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
