"""Executed instructions per class, per K/V tile and per warp, of SDPA's flash (FA2) kernel and our v2, from
Nsight Compute's per-SASS-instruction counts (`ncu --page source --csv --print-source sass`, the -sass.txt
files of experiments/h200_fa2_sass.sh).

Two views per kernel:
  - per tile: every executed instruction (prologue and epilogue included) over the warp-tiles the launch ran
    (warps per block x the K/V tiles each block visits);
  - per loop iteration: the instructions of the hottest loop (those executed at least half as often as the
    most executed one) over that count, i.e. one warp's pass through the unmasked K/V loop body.

    python3 -m flashsim.experiments.fa2_mix DIR --out fa2-mix.json   (DIR holds ncu-*-sass.txt[.gz])
"""

from __future__ import annotations

import argparse
import csv
import gzip
import io
import json
import re
import sys
from collections import Counter
from pathlib import Path

from .sass_counts import CLASSES

SASS_FILE = re.compile(r"ncu-(?P<impl>.+)-d(?P<d>\d+)-n(?P<n>\d+)-c(?P<c>[01])-sass\.txt(\.gz)?$")
_OPCODE = re.compile(r"(@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)")
_FA2_TRAITS = re.compile(r"Flash_fwd_kernel_traits<\(int\)(\d+), \(int\)(\d+), \(int\)(\d+), \(int\)(\d+)")
_FA2_BWD_TRAITS = re.compile(r"Flash_bwd_kernel_traits<(?:\(int\))?(\d+), (?:\(int\))?(\d+), (?:\(int\))?(\d+), "
                             r"(?:\(int\))?(\d+)")
_V2_TILE = re.compile(r"_(\d+)x(\d+)w(\d+)")
TOKENS, HIDDEN = 16384, 2048  # the FA2 grid: batch = 16k / N, heads = 2048 / d (experiments/validate.py)
HOT = 0.5  # an instruction executed at least this share of the most executed one is in the hot loop


def source_page(path: Path) -> tuple[str, list[str], list[list[str]]]:
    """The kernel's name, the column names and the per-SASS-instruction rows of Nsight Compute's source page
    (`--page source --csv --print-source sass`, gzipped or not)."""
    data = path.read_bytes()
    if path.suffix == ".gz":
        data = gzip.decompress(data)
    rows = list(csv.reader(io.StringIO(data.decode(), newline="")))
    header = rows[1]
    return rows[0][1], header, [row for row in rows[2:] if len(row) >= len(header)]


def executed(path: Path) -> tuple[str, list[tuple[str, bool, int]]]:
    """The kernel's name and its (opcode, predicated, warp instructions executed) per SASS instruction."""
    name, header, rows = source_page(path)
    src, count = header.index("Source"), header.index("Instructions Executed")
    out = []
    for row in rows:
        m = _OPCODE.match(row[src].strip())
        if m and m.group(2) != "NOP":
            out.append((m.group(2), bool(m.group(1)), int(row[count])))
    return name, out


def tile(name: str) -> tuple[int, int, int]:
    """(block_m, block_n, warps) from the kernel's name: FA2's traits <d, kBlockM, kBlockN, warps> or ours."""
    m = _FA2_TRAITS.search(name) or _FA2_BWD_TRAITS.search(name)
    if m:
        return int(m.group(2)), int(m.group(3)), int(m.group(4))
    m = _V2_TILE.search(name)
    if m:
        return int(m.group(1)), int(m.group(2)), int(m.group(3))
    raise ValueError(f"no tile in kernel name {name!r}")


def warp_tiles(n: int, d: int, causal: bool, bm: int, bn: int, warps: int) -> int:
    """Warp-tiles of the FA2 grid's launch at length n: each block visits its K/V tiles up to the diagonal."""
    blocks = n // bm
    per_head = sum(-(-min(n, (i + 1) * bm) // bn) if causal else n // bn for i in range(blocks))
    return (TOKENS // n) * (HIDDEN // d) * per_head * warps


def mix(path: Path) -> dict:
    m = SASS_FILE.search(path.name)
    if m is None:
        raise ValueError(f"{path.name}: not an ncu-IMPL-dD-nN-cC-sass.txt file")
    d, n, causal = int(m["d"]), int(m["n"]), m["c"] == "1"
    name, instrs = executed(path)
    bm, bn, warps = tile(name)
    tiles = warp_tiles(n, d, causal, bm, bn, warps)
    classes: Counter = Counter()
    for op, _, count in instrs:
        classes[CLASSES.get(op, "other")] += count
    top = max(count for _, _, count in instrs)
    loop: Counter = Counter()
    loop_ops: Counter = Counter()
    for op, predicated, count in instrs:
        if count >= HOT * top:
            loop[CLASSES.get(op, "other")] += count / top
            loop_ops[("@" if predicated else "") + op] += count / top
    return {
        "source": path.name,
        "impl": m["impl"],
        "headdim": d,
        "seqlen": n,
        "causal": causal,
        "kernel": name,
        "tile": [bm, bn, warps],
        "warp_tiles": tiles,
        "executed": sum(classes.values()),
        "per_tile": {k: round(v / tiles, 2) for k, v in sorted(classes.items())},
        "loop_iteration": {k: round(v, 2) for k, v in sorted(loop.items())},
        "loop_opcodes": {k: round(v, 2) for k, v in sorted(loop_ops.items(), key=lambda kv: -kv[1])},
    }


def table(rows: list[dict]) -> str:
    """Markdown: per-tile and loop-iteration counts per class, FA2 beside our v2 at each shape."""
    classes = sorted({c for r in rows for c in r["loop_iteration"]} | {c for r in rows for c in r["per_tile"]})
    head = (
        "| class | " + " | ".join(f"{r['impl']} d{r['headdim']}{' causal' if r['causal'] else ''}" for r in rows) + " |"
    )
    lines = [
        "Per warp and K/V tile (all executed instructions) / per loop iteration (the hot loop):",
        "",
        head,
        "|---" * (len(rows) + 1) + "|",
    ]
    for c in classes + ["total"]:
        cells = []
        for r in rows:
            tile_n = sum(r["per_tile"].values()) if c == "total" else r["per_tile"].get(c, 0)
            loop_n = sum(r["loop_iteration"].values()) if c == "total" else r["loop_iteration"].get(c, 0)
            cells.append(f"{tile_n:.0f} / {loop_n:.0f}")
        lines.append(f"| {c} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


_DETAIL = {
    "issue_busy": r"^\s+Issue Slots Busy\s+%\s+([\d.]+)",
    "cycles_per_issue": r"Warp Cycles Per Issued Instruction\s+cycle\s+([\d.]+)",
    "active_warps": r"^\s+Active Warps Per Scheduler\s+warp\s+([\d.]+)",
}
EXP2 = {"sdpa-flash": "exp2f", "v2": "approx"}  # the code form of each kernel's exponential (ir.EXP2_FORMS)


def ncu_details(path: Path) -> dict:
    """Issue-slot busy %, warp cycles per issued instruction and active warps per scheduler (ncu's details)."""
    text = path.read_text()
    return {k: float(re.search(rx, text, re.M).group(1)) for k, rx in _DETAIL.items()}


def lowered_block(d: int, bm: int, bn: int, warps: int, exp2: str) -> float:
    """Instructions per warp the model issues for one unmasked K/V block (its GEMMs, online softmax and barriers)."""
    from flashsim.algorithms.ir import Gemm, OnlineSoftmax, SyncThreads, Wait
    from flashsim.algorithms.mapping import Tiling
    from flashsim.algorithms.problem import Problem
    from flashsim.algorithms.schedules import v2
    from flashsim.simulator.instructions import lower, total

    schedule = v2.build(Problem(1, 1, 4 * max(bm, bn), d, dtype="bf16"), Tiling(bm, bn, warps, 2, exp2=exp2))
    program = list(schedule.kernels[0].roles[0].program((0, 0, 0)))
    opens = [i for i, op in enumerate(program) if isinstance(op, Wait) and op.barrier == "k"]
    block = program[opens[1] : opens[2]]
    return sum(total(lower(op)) for op in block if isinstance(op, (Gemm, OnlineSoftmax, SyncThreads)))


def issue_check(row: dict, details: dict, hw: str = "h200") -> dict:
    """ncu's issue numbers beside the model's at one row's shape: the time with the dependent stream (the
    default) and with the instruction-issue model, and the issue-slot busy share and warp cycles per issued
    instruction the latter implies (lowered instructions over the schedulers' cycles; the warps ncu saw
    resident per scheduler share them)."""
    from flashsim.algorithms.mapping import Tiling
    from flashsim.algorithms.problem import Problem
    from flashsim.hw_profiles import load_profile
    from flashsim.simulator import simulate

    d, n = row["headdim"], row["seqlen"]
    bm, bn, warps = row["tile"]
    exp2 = EXP2[row["impl"]]
    prob = Problem(TOKENS // n, HIDDEN // d, n, d, causal=row["causal"], dtype="bf16")
    out = {"ncu": details}
    for key, model in (("dependent_stream", 0), ("issue_model", 1)):
        profile = load_profile(hw, {"issue_model": model})
        res = simulate("v2", prob, profile, Tiling(bm, bn, warps, 2, exp2=exp2), flushed_l2=True).as_dict()
        out[key] = {"kernel_time_us": round(res["kernel_time_s"] * 1e6, 1)}
    per_tile = lowered_block(d, bm, bn, warps, exp2)
    cycles = res["cycles"] * profile.sub_partitions_per_sm * profile.sm_count
    busy = per_tile * row["warp_tiles"] / cycles
    out["issue_model"].update(
        lowered_per_tile=per_tile,
        issue_busy=round(100 * busy, 1),
        cycles_per_issue=round(details["active_warps"] / busy, 2),
    )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ncu_dir")
    ap.add_argument("--out", default="fa2-mix.json")
    ap.add_argument("--md", help="also write the markdown table here")
    ap.add_argument(
        "--simulate",
        action="store_true",
        help="add the model's times and issue numbers beside ncu's (-details.txt files)",
    )
    args = ap.parse_args(argv)
    paths = sorted(Path(args.ncu_dir).glob("ncu-*-sass.txt*"))
    if not paths:
        sys.stderr.write(f"fa2_mix: no ncu-*-sass.txt files in {args.ncu_dir}\n")
        return 2
    rows = sorted((mix(p) for p in paths), key=lambda r: (r["headdim"], r["causal"], r["impl"]))
    if args.simulate:
        for r in rows:
            stem = r["source"].split("-sass.txt")[0]
            r["issue_check"] = issue_check(r, ncu_details(Path(args.ncu_dir) / f"{stem}-details.txt"))
    Path(args.out).write_text(json.dumps(rows, indent=1) + "\n")
    if args.md:
        Path(args.md).write_text(table(rows))
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
