"""The stall summary of our backward kernel's Nsight Compute source pages (experiments/bwd_fid_stalls.py), on
the committed profiles: what docs/MODEL.md's two chained waits rest on."""

from __future__ import annotations

from pathlib import Path

from flashsim.experiments import bwd_fid_stalls as stalls

FID = Path(__file__).resolve().parents[1] / "experiments/results/h200/backward/fid"


def test_the_loop_is_the_longest_backward_branch():
    rows = [{"Address": "0x100", "Source": "@P0 BRA 0x80"}, {"Address": "0x900", "Source": "@!P1 BRA 0x200"},
            {"Address": "0x950", "Source": "BRA 0x100"}]  # unconditional: not a loop's branch
    assert stalls.loop_bounds(rows) == (0x200, 0x900)


def test_short_problems_spend_a_sixth_in_the_epilogue_and_long_ones_little():
    text = {p.name: stalls.summarise(p) for p in FID.glob("ncu-ours-*-sass.csv")}
    short, long = text["ncu-ours-d128-n512-c1-sass.csv"], text["ncu-ours-d128-n4096-c0-sass.csv"]
    share = {name: float(t.split("epilogue ")[1].split("%")[0]) for name, t in text.items()}
    assert share["ncu-ours-d128-n512-c1-sass.csv"] > 10 > 5 > share["ncu-ours-d128-n4096-c0-sass.csv"]
    # the same per block at N 512 and 4k: a fixed cost of each block, not of its steps
    per_block = [float(t.split("; epilogue ")[1].split(" us")[0]) for t in (short, long)]
    assert abs(per_block[0] - per_block[1]) < 1.0 and 4 < per_block[0] < 8
    # the loop's longest long-scoreboard waits are on the reused address registers of the dQ reductions
    assert "R3" in long.splitlines()[1] and "loop" in long.splitlines()[1]
