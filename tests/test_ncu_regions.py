"""ncu_regions on the committed Nsight Compute runs of our v2 forward (experiments/results/h200/fa2-sass/):
the loop body splits into regions whose times add up to a warp's K/V step, and the split shows what d128
adds over d64."""

from __future__ import annotations

from pathlib import Path

import pytest
from flashsim.experiments.ncu_regions import main, regions

DIR = Path(__file__).resolve().parents[1] / "experiments/results/h200/fa2-sass"


def _run(name: str) -> dict:
    return regions(str(DIR / f"ncu-{name}-details.txt"), str(DIR / f"ncu-{name}-sass.txt.gz"))


def test_regions_add_up_to_the_step_and_hold_the_products():
    r = _run("v2-d128-n4096-c0")
    assert r["warps"] == 32 * 16 * 4 * 4 and r["kv_blocks_per_warp"] == pytest.approx(64)
    # sub-partition active cycles x 1.95 active warps x 528 / (8192 warps x 64 blocks)
    assert r["cycles_per_warp_step"] == pytest.approx(2_569_767 * 1.95 * 528 / (8192 * 64), rel=1e-3)
    parts = r["regions"].values()
    assert sum(p["cycles"] for p in parts) == pytest.approx(r["cycles_per_warp_step"])
    # 32 x 64 x 128 and 32 x 128 x 64 per warp: 128 m16n8k16 each
    assert [p["hmma"] for p in parts] == [0, 128, 0, 128]


def test_d128s_s_gemm_waits_on_its_fragments_more_than_d64s():
    d128 = _run("v2-d128-n4096-c0")["regions"]["S = Q K^T"]["stalls"]
    d64 = _run("v2-d64-n4096-c0")["regions"]["S = Q K^T"]["stalls"]
    assert d128["short_sb"] > 2 * d64.get("short_sb", 0.0)


def test_odd_arguments_exit_2(capsys):
    assert main(["only-one.txt"]) == 2
    assert "usage" in capsys.readouterr().err


D96 = Path(__file__).resolve().parents[1] / "experiments/results/h200"


def _d96(session: str) -> dict:
    base = D96 / session / "ncu-v2-d96-n4096-c0"
    return regions(f"{base}-details.txt.gz", f"{base}-sass.txt.gz")


def test_d96_copies_without_per_copy_arithmetic_shorten_the_step():
    """Our v2 at d96 before and after its copies kept one chunk column per thread: the body is still one K/V
    block per warp although the copies' branch (120 of 128 threads) runs its reconvergence more often than
    the products, and the region that issues the copies holds fewer instructions and cycles."""
    before, after = _d96("session12/v3-ncu"), _d96("session16/v2-d96")
    for r in (before, after):
        assert r["kv_blocks_per_warp"] == pytest.approx(64)
        assert [p["hmma"] for p in r["regions"].values()] == [0, 96, 0, 96]
    copies = "before S (copies, addresses, barrier)"
    assert after["regions"][copies]["instructions"] < 0.6 * before["regions"][copies]["instructions"]
    assert after["regions"][copies]["cycles"] < 0.6 * before["regions"][copies]["cycles"]
    assert after["cycles_per_warp_step"] < 0.95 * before["cycles_per_warp_step"]
