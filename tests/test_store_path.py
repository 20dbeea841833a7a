"""Plain stores through the SM's store path and the chip's store rate (store_path_model 1), and the bookkeeping
of a prologue or epilogue paced by its dependencies (bookkeeping_issue_cycles): the microbenchmark's rates in the
profile, and what each mechanism adds to a block (docs/MODEL.md, "Stores and paced bookkeeping")."""

import json
import statistics
from pathlib import Path

import pytest
from flashsim.algorithms.mapping import Tiling
from flashsim.algorithms.problem import Problem
from flashsim.algorithms.schedules.forward_code import BOOKKEEPING
from flashsim.errors import FlashsimError
from flashsim.hw_profiles import load_profile
from flashsim.simulator import simulate

RESULTS = Path(__file__).resolve().parents[1] / "experiments" / "results" / "h200" / "session32" / "store-burst"
# the paced bookkeeping alone: with the fetch at the warps' front (the shipped fetch_model 2) its lines come as the
# warps reach them, and the pacing hides partly under that fetch
H200 = load_profile("h200").with_overrides({"fetch_model": 0})
OLD = {"store_path_model": 0, "bookkeeping_issue_cycles": 1}


def test_profile_rates_are_the_microbenchmark():
    """33 B/clk per SM is what blocks storing 8 KiB or more per warp issue on 1 or 66 SMs; the chip's 5.3 TB/s is
    what all 132 storing their largest bursts (128 KiB each) reach, at the clock memory-bound kernels run at."""
    rows = json.loads((RESULTS / "store-burst.json").read_text())["rows"]
    few = [r["bytes_per_clk_per_sm"] for r in rows if r["blocks"] < 132 and r["kib_per_warp"] >= 8]
    assert H200.store_bytes_per_clk_per_sm == pytest.approx(statistics.median(few), rel=0.02)
    assert max(few) < 1.1 * min(few)
    full = [r["bytes_per_clk_per_sm"] for r in rows if r["blocks"] == 132 and r["warps"] * r["kib_per_warp"] == 128]
    chip = statistics.median(full) * 132 * H200.sm_clock_hz
    assert H200.store_chip_bytes_per_s == pytest.approx(chip, rel=0.03)
    assert max(full) < 0.7 * min(few)  # the chip's rate binds once every SM stores
    for key in ("store_bytes_per_clk_per_sm", "store_chip_bytes_per_s", "bookkeeping_issue_cycles"):
        assert H200.source(key).startswith("measured")
        assert load_profile("h100").source(key).startswith("derived")


def _cycles(problem, overrides=None, tiling=None):
    profile = H200.with_overrides(overrides) if overrides else H200
    return simulate("v2", problem, profile, tiling).cycles


def test_a_blocks_stores_of_o_take_the_sm_store_path():
    """One block of our v2 at d128 stores its 32 KiB of O at 33 B/clk, where the L2 port alone took it in a few
    hundred cycles: about 1 k cycles more, and as much again at half the rate; the model switch takes it away."""
    prob = Problem(1, 1, 128, 128)
    o_bytes = 128 * 128 * 2
    with_path = _cycles(prob, {"bookkeeping_issue_cycles": 1})
    added = with_path - _cycles(prob, OLD)
    assert added == pytest.approx(o_bytes / H200.store_bytes_per_clk_per_sm, rel=0.05)
    half = _cycles(prob, {"bookkeeping_issue_cycles": 1, "store_bytes_per_clk_per_sm": 16.5})
    assert half - with_path == pytest.approx(o_bytes / H200.store_bytes_per_clk_per_sm, rel=0.05)


def test_the_chips_store_rate_binds_when_every_sm_stores():
    prob = Problem(1, 132, 1024, 128)  # a block per SM, all storing O at once
    shipped = _cycles(prob)
    assert _cycles(prob, {"store_chip_bytes_per_s": 1e12}) > shipped * 1.05
    assert _cycles(prob, {"store_path_model": 0}) < shipped


@pytest.mark.parametrize("seqlen", [128, 1024])
def test_prologue_and_epilogue_bookkeeping_is_paced_and_the_loop_is_not(seqlen):
    """Our v2 at d128: the prologue's and epilogue's bookkeeping (393 and 697 instructions a warp) issue at 2.06
    cycles each instead of 1, whatever the number of K/V steps (the loop's issues beside its tile ops)."""
    prologue, _, epilogue = BOOKKEEPING["flashsim", 128, 128, 64, 4]
    prob = Problem(1, 1, seqlen, 128)
    added = _cycles(prob, {"store_path_model": 0}) - _cycles(prob, OLD)
    assert added == pytest.approx((prologue + epilogue) * (H200.bookkeeping_issue_cycles - 1), rel=0.01)


def test_fa2s_peeled_prologue_is_not_paced():
    """SDPA's flash kernel runs its first K/V step inside its prologue: only its epilogue is paced."""
    _, _, epilogue = BOOKKEEPING["fa2", 128, 128, 64, 4]
    prob, fa2 = Problem(1, 1, 1024, 128), Tiling(128, 64, 4, exp2="exp2f")
    added = _cycles(prob, {"store_path_model": 0}, fa2) - _cycles(prob, OLD, fa2)
    assert added == pytest.approx(epilogue * (H200.bookkeeping_issue_cycles - 1), rel=0.02)


def test_bad_values_are_refused():
    with pytest.raises(FlashsimError, match="store_path_model"):
        H200.with_overrides({"store_path_model": 2})
    with pytest.raises(FlashsimError, match="bookkeeping_issue_cycles"):
        H200.with_overrides({"bookkeeping_issue_cycles": 0.5})
