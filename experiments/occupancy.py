"""What a second thread block on the SM costs an mma.sync attention kernel: measured, and in the model.

    python3 -m flashsim.experiments.occupancy DIR [--no-model] [--json OUT]

DIR holds experiments/h200_occupancy.sh's Nsight Compute details pages, ncu-IMPL-dD-bB[-hH]-details.txt: our v2
and SDPA's flash kernel (FA2) at N = 4224, non-causal, bf16, 4 heads (or H), batch 1 (33 x 4 = 132 blocks of 128
rows, one per SM) and batch 2 (two per SM, the kernels' occupancy). Each block runs the same K/V loop in both,
so the batch-2 time over the batch-1 time is what sharing the SM with a second block costs: 2.0 if the blocks
took turns, 1.0 if the second block's work hid wholly under the first's. For each run: the kernel's duration and elapsed
cycles (L2 flushed, as Nsight Compute runs it), the model's GPU busy time for the same problem under the
default rules and under the instruction-issue model (`issue_model = 1`, `ldsm_model = 1`; docs/MODEL.md,
Instruction issue), and the two ratios. Per-region views of the same runs:
`python3 -m flashsim.experiments.ncu_regions DETAILS SASS` (the source pages beside them).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

NAME = re.compile(r"ncu-(?P<impl>.+)-d(?P<d>\d+)-b(?P<b>\d+)(?:-h(?P<h>\d+))?-details\.txt$")
SEQLEN, HEADS = 4224, 4  # heads unless the file name says (-hH)
# the model variants compared: name -> --set overrides
VARIANTS = {"default": [], "issue model": ["issue_model=1", "ldsm_model=1"]}
# how the validation simulates each implementation (experiments/validate_impls.py): algorithm and tiling
# how busy the SM was, per run (read_details)
BUSY = ("tensor_active_pct", "issue_busy_pct", "warps_per_scheduler")
SIMULATED_AS = {"v2": ("v2", None), "sdpa-flash": ("v2", {"exp2": "exp2f", "launch": "fa2"})}


def read_details(path: Path) -> dict:
    """Duration (s), elapsed cycles, SM clock (Hz) of one Nsight Compute details page, and how busy the SM was:
    the tensor pipe's and the schedulers' issue slots' active shares (%) and the warps alive per scheduler (with
    two blocks of four warps alive throughout, 2)."""
    text = path.read_text()

    def first(label: str, unit: str) -> float:
        m = re.search(rf"^\s*{label}\s+{unit}\s+([\d,.]+)", text, re.M)
        if m is None:
            raise ValueError(f"{path.name}: no '{label}' ({unit}) line")
        return float(m.group(1).replace(",", ""))

    scale = {"us": 1e-6, "ms": 1e-3, "ns": 1e-9}
    m = re.search(r"^\s*Duration\s+(us|ms|ns)\s+([\d,.]+)", text, re.M)
    if m is None:
        raise ValueError(f"{path.name}: no 'Duration' line")
    return {"duration_s": float(m.group(2).replace(",", "")) * scale[m.group(1)],
            "elapsed_cycles": int(first("Elapsed Cycles", "cycle")), "sm_hz": first("SM Frequency", "Ghz") * 1e9,
            "tensor_active_pct": first("SM: Pipe Tensor Cycles Active", "%"),
            "issue_busy_pct": first("Issue Slots Busy", "%"),
            "warps_per_scheduler": first("Active Warps Per Scheduler", "warp")}


def measured(folder: Path) -> dict:
    """(impl, head dim, batch) -> read_details and the heads, for every details page in the folder."""
    runs = {}
    for path in sorted(folder.glob("ncu-*-details.txt")):
        m = NAME.search(path.name)
        if m:
            runs[m["impl"], int(m["d"]), int(m["b"])] = {**read_details(path), "heads": int(m["h"] or HEADS)}
    return runs


def _job(impl: str, d: int, batch: int, heads: int, overrides: list) -> tuple:
    algo, tiling = SIMULATED_AS[impl]
    problem = {"batch": batch, "heads": heads, "seqlen_q": SEQLEN, "seqlen_k": SEQLEN, "headdim": d,
               "causal": False, "dtype": "bf16"}
    return algo, problem, tiling, "h200", overrides, {}, True


def modelled(runs: dict, jobs: int = 2) -> dict:
    """(variant, impl, head dim, batch) -> the model's GPU busy seconds for each run (the validation's call)."""
    from concurrent.futures import ProcessPoolExecutor

    from .prediction_inputs import simulate_job as _simulate

    todo = [(v, k) for v in VARIANTS for k in sorted(runs)]
    with ProcessPoolExecutor(jobs) as pool:
        results = list(pool.map(_simulate, [_job(*k, runs[k]["heads"], VARIANTS[v]) for v, k in todo]))
    out = {}
    for (v, k), r in zip(todo, results, strict=True):
        if "predicted" not in r:
            raise RuntimeError(f"the model failed on {k}: {r}")
        out[(v, *k)] = r["predicted"]["kernel_time_s"]
    return out


def table(runs: dict, model: dict | None) -> dict:
    """Per kernel and head dim: each batch's measured and modelled times and the batch-2 / batch-1 ratios."""
    rows = []
    for impl, d in sorted({(i, d) for i, d, _ in runs}):
        if (impl, d, 1) not in runs or (impl, d, 2) not in runs:
            continue
        one, two = runs[impl, d, 1], runs[impl, d, 2]
        row = {"impl": impl, "headdim": d, "heads": one["heads"], "measured_s": [one["duration_s"], two["duration_s"]],
               "elapsed_cycles": [one["elapsed_cycles"], two["elapsed_cycles"]],
               **{k: [one[k], two[k]] for k in BUSY},
               "measured_ratio": two["duration_s"] / one["duration_s"]}
        if model:
            for v in VARIANTS:
                t1, t2 = model[(v, impl, d, 1)], model[(v, impl, d, 2)]
                row[v] = {"modelled_s": [t1, t2], "ratio": t2 / t1,
                          "error": [t1 / one["duration_s"] - 1, t2 / two["duration_s"] - 1]}
        rows.append(row)
    return {"seqlen": SEQLEN, "variants": VARIANTS, "rows": rows}


def markdown(doc: dict) -> str:
    variants = [v for v in doc["variants"] if doc["rows"] and v in doc["rows"][0]]
    head = ["kernel", "one block per SM (us)", "two (us)", "measured ratio"]
    for v in variants:
        head += [f"{v}: one / two (error)", f"{v} ratio"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for r in doc["rows"]:
        cells = [f"{r['impl']} d{r['headdim']}", f"{1e6 * r['measured_s'][0]:.1f}", f"{1e6 * r['measured_s'][1]:.1f}",
                 f"{r['measured_ratio']:.2f}"]
        for v in variants:
            m = r[v]
            cells += [f"{1e6 * m['modelled_s'][0]:.1f} ({100 * m['error'][0]:+.0f}%) / "
                      f"{1e6 * m['modelled_s'][1]:.1f} ({100 * m['error'][1]:+.0f}%)", f"{m['ratio']:.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "| kernel | tensor pipe active, one / two blocks | issue slots busy | warps alive per scheduler |",
              "| --- | --- | --- | --- |"]
    for r in doc["rows"]:
        tensor, issue = r["tensor_active_pct"], r["issue_busy_pct"]
        lines.append(f"| {r['impl']} d{r['headdim']} | {tensor[0]:.1f}% / {tensor[1]:.1f}% "
                     f"| {issue[0]:.1f}% / {issue[1]:.1f}% "
                     f"| {r['warps_per_scheduler'][0]:.2f} / {r['warps_per_scheduler'][1]:.2f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--no-model", action="store_true", help="the measurements only")
    ap.add_argument("--json", type=Path, help="write the table as JSON here too")
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args(argv)
    if not args.folder.is_dir():
        print(f"occupancy: no such folder: {args.folder}", file=sys.stderr)
        return 2
    try:
        runs = measured(args.folder)
    except ValueError as e:
        print(f"occupancy: {e}", file=sys.stderr)
        return 2
    if not runs:
        print(f"occupancy: no ncu-IMPL-dD-bB-details.txt in {args.folder}", file=sys.stderr)
        return 2
    model = None if args.no_model else modelled(runs, args.jobs)
    doc = table(runs, model)
    print(markdown(doc))
    if args.json:
        args.json.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
