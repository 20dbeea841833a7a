"""Predictions for the short-problem measurements of v3's two-Q-buffer kernel (results/h200/causal1k).

Every row of causal1k.json whose kernel takes its tiles from the grid's counter ("... pingpong-q2 counted",
"... pingpong-q2s3 counted": two or three K/V stages) is simulated with the tiles it ran, and its busy-time
TFLOP/s compared with the simulated kernel time's. Needs no GPU.

    python -m flashsim.experiments.causal1k_compare [--out DIR]   (writes DIR/causal1k-predicted.{json,md})
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from flashsim.algorithms import Problem, Tiling
from flashsim.hw_profiles import load_profile
from flashsim.simulator import simulate

RESULTS = Path(__file__).parent / "results" / "h200" / "causal1k"
COUNTED = re.compile(r"(\d+)x(\d+) pingpong-q2(s3)? counted")


def rows() -> list[dict]:
    return json.loads((RESULTS / "causal1k.json").read_text())["rows"]


def predict(row: dict, profile) -> dict | None:
    """The row with its prediction, or None for a kernel that does not take tiles from the counter."""
    match = COUNTED.fullmatch(row["variant"])
    if match is None:
        return None
    bm, bn = int(match[1]), int(match[2])
    tiling = Tiling(bm, bn, 4 * (bm // 64 + 1), 3 if match[3] else 2)
    problem = Problem(row["batch"], row["heads"], row["seqlen"], row["d"], causal=row["causal"], dtype="bf16")
    result = simulate("v3", problem, profile, tiling)
    tflops = problem.flops() / result.kernel_time_s / 1e12
    return {**row, "predicted_tflops": round(tflops, 1), "error": round(row["TFLOP/s"] / tflops - 1, 4)}


def table(out: list[dict]) -> str:
    lines = ["| d | causal | seqlen | variant | measured TFLOP/s | predicted | error (time) % |",
             "|---|---|---|---|---|---|---|"]
    for r in out:
        lines.append(f"| {r['d']} | {'yes' if r['causal'] else 'no'} | {r['seqlen']} | {r['variant']} | "
                     f"{r['TFLOP/s']} | {r['predicted_tflops']} | {100 * r['error']:+.1f} |")
    mape = 100 * sum(abs(r["error"]) for r in out) / len(out)
    bias = 100 * sum(r["error"] for r in out) / len(out)
    return "\n".join(lines) + f"\n\n{len(out)} points: MAPE {mape:.1f}%, bias {bias:+.1f}% (positive: predicted slow)\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    profile = load_profile("h200")
    out = [r for r in (predict(row, profile) for row in rows()) if r is not None]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "causal1k-predicted.json").write_text(json.dumps(out, indent=1) + "\n")
    (args.out / "causal1k-predicted.md").write_text(table(out))
    print(table(out))


if __name__ == "__main__":
    main()
