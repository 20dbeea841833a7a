"""experiments/masked_steps.py: the share of a causal problem's K/V steps that are masked, the development rows'
estimate of what a masked step costs beyond the model's charge, and the GEMM replay of a kernel's own orders."""

from __future__ import annotations

from pathlib import Path

import pytest
from flashsim.experiments.masked_steps import fa2_masking_steps, main, masked_share, rows

ORDERS = Path(__file__).resolve().parents[1] / "experiments/results/h200/fa2-sass/fa2-causal-d128-gemm-orders.json"


def _problem(nq: int, nk: int = 0, causal: bool = True) -> dict:
    return {"batch": 2, "heads": 4, "seqlen_q": nq, "seqlen_k": nk, "headdim": 64, "causal": causal}


def test_masked_share_counts_the_diagonal_tiles():
    # two Q blocks of 128 over K/V blocks of 128: 1 + 2 steps, the diagonal one of each masked
    assert masked_share(_problem(256), 128, 128) == pytest.approx(2 / 3)
    # K/V blocks of 64: 2 + 4 steps, two masked in each block (the diagonal's 128 rows span two K/V blocks)
    assert masked_share(_problem(256), 128, 64) == pytest.approx(4 / 6)
    assert masked_share(_problem(4096), 128, 64) == pytest.approx(64 / sum(2 * (i + 1) for i in range(32)))
    assert masked_share(_problem(256, causal=False), 128, 128) == 0.0


def test_fa2_counts_its_masking_steps_as_its_source_does():
    """ceil(block_m / block_n) steps through the masking code, one more where the lengths are not multiples of
    the tiles; a block with fewer steps masks them all."""
    assert fa2_masking_steps(3072, 3072, 128, 128) == 1 and fa2_masking_steps(3000, 3000, 128, 128) == 2
    assert fa2_masking_steps(3072, 3072, 128, 64) == 2 and fa2_masking_steps(3000, 3000, 128, 64) == 3
    # even lengths: the geometry's count; N 200 (odd): Q blocks of 1 and 2 steps, FA2 masks all 3, the geometry 2
    assert masked_share(_problem(256), 128, 128, "fa2") == masked_share(_problem(256), 128, 128)
    assert masked_share(_problem(200), 128, 128, "fa2") == pytest.approx(3 / 3)
    assert masked_share(_problem(200), 128, 128) == pytest.approx(2 / 3)


def test_a_long_cache_masks_a_smaller_share():
    """Bottom-right alignment: 128 queries over 1,024 keys see 897 .. 1,024 keys: 8 K/V steps, the last masked."""
    assert masked_share(_problem(128, 1024), 128, 128) == pytest.approx(1 / 8)


def test_the_estimates_come_from_the_development_sets_only():
    table = rows(["sdpa-flash"])
    assert table and {r["set"] for r in table} <= {"dev", "dev-llm", "dev-tiles", "dev-d256"}
    for r in table:
        assert 0.0 < r["masked_share"] <= 1.0
        assert r["extra_per_masked_step"] == pytest.approx(-r["error"] / ((1 + r["error"]) * r["masked_share"]))


def test_a_masked_steps_own_order_replays_slower_than_the_loops(capsys):
    """FA2's d128 causal kernel: its second masked step loads each V fragment right before its products."""
    assert main(["--orders", str(ORDERS), "--tiles", "S=2,4,8,1", "PV=2,8,4,0", "--json"]) == 0
    import json

    (stretches,) = json.loads(capsys.readouterr().out).values()
    assert [s["kind"] for s in stretches] == ["S", "PV"] * 3
    masked_pv, loop_pv = stretches[3], stretches[5]
    assert masked_pv["order"].startswith("Lmmmm" * 4)
    assert masked_pv["cycles"]["4"] > 1.5 * loop_pv["cycles"]["4"]
    assert masked_pv["cycles"]["8"] > loop_pv["cycles"]["8"]


def test_bad_input_exits_2(capsys, tmp_path):
    assert main(["--orders", str(ORDERS), "--tiles", "S=2,4"]) == 2
    assert "--tiles" in capsys.readouterr().err
    assert main(["--orders", str(tmp_path / "none.json")]) == 2
    assert "none.json" in capsys.readouterr().err
    assert main(["--orders", str(ORDERS), "--tiles", "S=1,1,1,1"]) == 2
    assert "fits no tile" in capsys.readouterr().err
