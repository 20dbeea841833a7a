"""Tables of the instruction-fetch sweeps (experiments/ifetch_probe.py --sweep pair / ahead) and what the two ways
of charging a fetch predict for the `ahead` kernels.

- *Streamed* (the model's fetch_model 1): the SM fetches a stretch's lines one after another while its warps run
  it, so a stretch takes max(its issue, its fetch), and fast code behind slow code finds its lines there.
- *At the warps' front*: the fetch brings a line only when the warps reach it, so each line takes max(its
  issue, its fetch) and fast code pays for every line it lacks, whatever ran before it.

The rates come from the same GPU's runs: a slow line's issue from the pair sweep's one-block chained loops
(code the SM keeps), a fast line's fetch from the straight sweep's 64 KiB of code run once by one block.

    python3 -m flashsim.experiments.ifetch_summary DIR     (DIR holds ifetch-pair.json, ifetch-straight.json and
                                                            maybe ifetch-ahead.json; writes DIR/summary.md)
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from .ifetch_probe import LINE_BYTES

FAST_ISSUE = 8.0  # cycles a line of eight independent FFMAs takes to issue (one warp per scheduler)


def _rows(path: Path) -> list[dict]:
    return json.loads(path.read_text())["rows"]


def rates(pair: list[dict], straight: list[dict]) -> tuple[float, float]:
    """(a chained line's issue cycles, a line's fetch cycles): one block per SM, 4 warps."""
    slow = statistics.median(r["cycles_per_line"] for r in pair if r["kind"] == "c" and r["mode"] == "single")
    fetch = next(r["cycles_per_line"] for r in straight
                 if r["lines"] == 512 and r["reps"] == 1 and r["blocks"] == 1 and r["warps"] == 4
                 and r["start"] == "warm")  # fmt: skip
    return slow, fetch


def predict_ahead(slow_lines: int, fast_lines: int, slow: float, fetch: float) -> tuple[float, float]:
    """(streamed, at the warps' front) cycles of `slow_lines` chained lines then `fast_lines` fast ones, none kept."""
    issue = slow_lines * slow + fast_lines * FAST_ISSUE
    streamed = max(issue, (slow_lines + fast_lines) * fetch)
    front = slow_lines * max(slow, fetch) + fast_lines * max(FAST_ISSUE, fetch)
    return streamed, front


def markdown(folder: Path) -> str:
    pair = _rows(folder / "ifetch-pair.json")
    ahead = _rows(folder / "ifetch-ahead.json") if (folder / "ifetch-ahead.json").is_file() else []
    straight = _rows(folder / "ifetch-straight.json")
    slow, fetch = rates(pair, straight)
    out = ["## Two blocks per SM (`--sweep pair`): cycles per line run, median block", "",
           "| kind | KiB a loop | one block per SM | two, same loop | two, different loops |", "|---|---|---|---|---|"]
    kinds = {"independent": "fast (8 cycles a line)", "c": "chained (~32)", "m": "mixed (8 fast, 8 chained)"}
    for kind, label in kinds.items():
        for lines in sorted({r["lines"] for r in pair}):
            by = {r["mode"]: r["cycles_per_line"] for r in pair if r["kind"] == kind and r["lines"] == lines}
            out.append(f"| {label} | {lines * LINE_BYTES // 1024} | {by['single']:.1f} | {by['same']:.1f} | "
                       f"{by['different']:.1f} |")
    out += ["", "## Loops of 2-128 KiB, one block, 4 warps, 16 passes (`--sweep straight`): cycles per line", "",
            "| KiB | cycles per line |", "|---|---|"]
    out += [f"| {r['lines'] * LINE_BYTES / 1024:g} | {r['cycles_per_line']:.1f} |" for r in straight
            if r["reps"] == 16 and r["blocks"] == 1 and r["warps"] == 4 and r["start"] == "warm"]
    if not ahead:
        return "\n".join(out) + "\n"
    out += ["", "## Slow code, then fast code the SM lacks (`--sweep ahead`): block cycles, one block, 4 warps",
            "", f"Rates of this GPU: a chained line {slow:.1f} cycles, a line fetched {fetch:.1f}, a fast line issued "
            f"{FAST_ISSUE:.0f}.", "", "| slow lines | fast lines | measured | streamed | error | at the warps' front | "
            "error |", "|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in ahead:
        if r["blocks"] != 1 or r["warps"] != 4 or not (r["slow_lines"] and r["fast_lines"]):
            continue  # run 236's kernels of one kind only: the compiler moved their work past the timer
        streamed, front = predict_ahead(r["slow_lines"], r["fast_lines"], slow, fetch)
        m = r["block_cycles_median"]
        out.append(f"| {r['slow_lines']} | {r['fast_lines']} | {m:.0f} | {streamed:.0f} | "
                   f"{100 * (streamed / m - 1):+.1f}% | {front:.0f} | {100 * (front / m - 1):+.1f}% |")
    return "\n".join(out) + "\n"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    args = ap.parse_args(argv)
    text = markdown(args.folder)
    (args.folder / "summary.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
