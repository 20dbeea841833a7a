"""Cycles or clock: the per-tile development set's long-K/V rows taken apart with Nsight Compute.

Each row's GPU busy time is cycles over clock. Nsight Compute (clocks left to power management) gives both for
one call; the simulator's prediction divides its cycles by the clock of the kernel's tensor instruction class.
This prints, per row, the two factors side by side, the clock the same kernel settles at when called back to
back (experiments/kernel_clocks.py --shapes long-kv), and the clock the power_hbm sweep
(kernels/microbench/power_hbm.cu) shows at the row's simulated tensor and HBM rates, so that an error can be
put on the cycles or on the clock:

    python3 -m flashsim.experiments.long_kv_clocks [--dir experiments/results/h200/session36] [--sweep FILE]
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent / "results" / "h200"
ROWS = {  # ncu file stem -> (implementation, development-set configuration)
    "v2-d128-k8192": ("v2", "b8-h132-n128-k8192-d128"), "v2-d64-k8192": ("v2", "b8-h132-n128-k8192-d64"),
    "v2-d128-k2048": ("v2", "b8-h132-n128-k2048-d128"), "fa2-d128-k8192": ("sdpa-flash", "b8-h132-n128-k8192-d128"),
    "fa2-d64-k8192": ("sdpa-flash", "b8-h132-n128-k8192-d64"), "v3-d128-k8192": ("v3", "b8-h132-n128-k8192-d128"),
    "v3-d64-k8192": ("v3", "b8-h132-n128-k8192-d64"), "v3-d64-k2048": ("v3", "b8-h132-n128-k2048-d64"),
    "cudnn-d128-k8192": ("sdpa-cudnn", "b8-h132-n128-k8192-d128"),
}
MODEL_CLOCK_HZ = {"v2": 1.814e9, "sdpa-flash": 1.814e9, "v3": 1.583e9, "sdpa-cudnn": 1.583e9}  # clock_model 0
TENSOR = {"v2": "mma_sync", "sdpa-flash": "mma_sync", "v3": "wgmma", "sdpa-cudnn": "wgmma"}


def ncu_metrics(path: Path) -> dict[str, float]:
    rows = list(csv.reader(path.open()))
    start = next(i for i, r in enumerate(rows) if r and r[0] == "ID")
    out = {}
    for name, value in zip(rows[start], rows[start + 2], strict=False):
        try:
            out[name] = float(value.replace(",", ""))
        except ValueError:
            continue
    return out


def sweep_clock(points: list[dict], kind: str, flops: float, hbm: float) -> float:
    """The clock the power_hbm sweep measured nearest (by inverse-distance weights over its unsaturated points of
    the same tensor instruction) to a tensor rate and an HBM read rate."""
    near = [p for p in points if p["tensor"] == kind and p["overrun"] <= 1.02 and p["tensor_per_period"] > 0
            and p.get("wait", "spin") == "spin"]
    x = np.array([[p["tensor_flops_per_clk_per_sm"] / 4096, p["hbm_read_bytes_per_s"] / 4.8e12] for p in near])
    d = np.hypot(*(x - [flops / 4096, hbm / 4.8e12]).T) + 1e-3
    w = 1 / d**2
    return float(np.sum(w * [p["clock_hz"] for p in near]) / np.sum(w))


def table(folder: Path, sweep_file: Path | None = None) -> list[str]:
    tiles = {(r["impl"], r["config_id"]): r for r in json.loads((ROOT / "devset-tiles.json").read_text())["rows"]}
    sustained = {(r["impl"], r["headdim"], r["seqlen_k"]): r
                 for r in json.loads((folder / "long-kv-ncu" / "clocks-long-kv.json").read_text())["rows"]}
    sweep_file = sweep_file or folder / "power-hbm" / "power-hbm.json"
    sweep = json.loads(sweep_file.read_text())["power_hbm"]["points"]
    lines = ["| row | measured busy ms | ncu ms | cycles: model / ncu | clock GHz: model / ncu / back to back / "
             "power_hbm at the row's rates | error % (busy) |", "|---|---|---|---|---|---|"]
    for stem, (impl, config) in ROWS.items():
        path = folder / "long-kv-ncu" / f"ncu-{stem}.csv"
        row = tiles.get((impl, config))
        if not path.is_file() or row is None:
            continue
        m = ncu_metrics(path)
        ncu_s, ncu_hz = m["gpu__time_duration.sum"] * 1e-9, m["sm__cycles_elapsed.avg.per_second"]
        ncu_cycles = m["sm__cycles_elapsed.max"]
        predicted, measured = row["predicted"]["kernel_time_s"], row["measured"]["kernel_time_s"]
        cycles = predicted * MODEL_CLOCK_HZ[impl]
        c = row["config"]
        flops = 4 * c["batch"] * c["heads"] * c["seqlen_q"] * c["seqlen_k"] * c["headdim"]
        hbm = (row["predicted"]["hbm_read"] + row["predicted"]["hbm_write"]) / ncu_s
        at = sweep_clock(sweep, TENSOR[impl], flops / (ncu_cycles * 132), hbm)
        back = sustained.get((impl, c["headdim"], c["seqlen_k"]), {}).get("smi_clock_mhz", float("nan")) / 1e3
        lines.append(
            f"| {impl} {config} | {measured * 1e3:.3f} | {ncu_s * 1e3:.3f} | {cycles / 1e6:.3f} M / "
            f"{ncu_cycles / 1e6:.3f} M ({100 * (cycles / ncu_cycles - 1):+.1f}%) | {MODEL_CLOCK_HZ[impl] / 1e9:.3f} / "
            f"{ncu_hz / 1e9:.3f} / {back:.3f} / {at / 1e9:.3f} | {100 * (predicted / measured - 1):+.1f} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default=str(ROOT / "session36"))
    ap.add_argument("--sweep", help="the power_hbm sweep to read (default: DIR/power-hbm/power-hbm.json)")
    args = ap.parse_args(argv)
    print("\n".join(table(Path(args.dir), Path(args.sweep) if args.sweep else None)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
