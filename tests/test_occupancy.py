"""The occupancy experiment's reader (experiments/occupancy.py) on its committed Nsight Compute pages: one
block per SM against two, for our v2 (d64, d96, d128, d256) and FA2 (d64, d128)."""

from __future__ import annotations

from pathlib import Path

import pytest
from flashsim.experiments import occupancy

RUNS = Path(occupancy.__file__).parent / "results" / "h200" / "session22" / "occupancy"


def test_the_pages_read_as_one_and_two_blocks_per_sm():
    runs = occupancy.measured(RUNS)
    pairs = [("v2", 64), ("v2", 96), ("v2", 128), ("v2", 256), ("sdpa-flash", 64), ("sdpa-flash", 128)]
    assert set(runs) == {(i, d, b) for i, d in pairs for b in (1, 2)}
    assert {k: r["heads"] for k, r in runs.items() if k[1] == 256} == {("v2", 256, 1): 2, ("v2", 256, 2): 2}
    for r in runs.values():
        # the duration is the elapsed cycles at the SM clock the page reports (to its two decimals of GHz)
        assert r["duration_s"] == pytest.approx(r["elapsed_cycles"] / r["sm_hz"], rel=0.015)


def test_a_second_block_costs_most_of_a_first():
    """Two blocks per SM share it: each block's loop takes 1.45-1.75x as long as alone, not 1x (its work hid
    under the other's) nor 2x (they took turns)."""
    doc = occupancy.table(occupancy.measured(RUNS), None)
    ratios = {(r["impl"], r["headdim"]): r["measured_ratio"] for r in doc["rows"]}
    assert len(ratios) == 6 and all(1.4 < x < 1.8 for x in ratios.values())
    assert "| v2 d128 | 119.2 | 205.3 | 1.72 |" in occupancy.markdown(doc)
    for r in doc["rows"]:
        one, two = r["tensor_active_pct"], r["warps_per_scheduler"]
        # the second block's work keeps the tensor pipe busier, and its warps are alive for most of the run
        assert one[1] > one[0] + 5 and two[0] == pytest.approx(1.0, abs=0.02) and 1.8 < two[1] <= 2.0


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    assert occupancy.main([str(tmp_path / "missing")]) == 2
    assert occupancy.main([str(tmp_path)]) == 2
    (tmp_path / "ncu-v2-d64-b1-details.txt").write_text("no numbers here\n")
    assert occupancy.main([str(tmp_path), "--no-model"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("occupancy: ") for line in err)
