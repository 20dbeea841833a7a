"""The committed sampling-exactness table (experiments/sampling_exactness.py) covers the whole FA2 grid and its
differences and summary recompute from its runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from flashsim.algorithms.problem import Problem
from flashsim.experiments import sampling_exactness as ex
from flashsim.hw_profiles import load_profile
from flashsim.simulator import simulate

RESULTS = Path(ex.__file__).parent / "results" / "sampling-exactness.json"


def test_the_committed_table_covers_the_grid_and_recomputes():
    doc = json.loads(RESULTS.read_text())
    assert [r["key"] for r in doc["rows"]] == [f"{hw} {a} {p.describe()}" for hw, a, p in ex.grid()]
    for r in doc["rows"]:
        assert r["difference"] == pytest.approx(r["default"]["cycles"] / r["full"]["cycles"] - 1)
        assert r["full"]["sms_simulated"] == {"h100": 132, "h200": 132, "a100": 108}[r["key"].split()[0]]
    within = sum(abs(r["difference"]) <= 0.02 for r in doc["rows"])
    assert doc["summary"]["within_2pct"] == within and doc["summary"]["points"] == len(doc["rows"]) == 120


# Representative by the check, yet more than 2% off (experiments/results/sampling-exactness.json has every point).
OFF = {
    "h100 v2 B=32 H=16 N=512 d=128 bf16": "9.3% off: --full itself is bistable here (test below)",
    "h100 v2 B=32 H=16 N=512 d=128 bf16 causal": "2.2% off: 8 SMs deal a head's blocks further apart (L2 hits)",
    "h100 v2 B=32 H=32 N=512 d=64 bf16 causal": "2.4% off: 8 SMs deal a head's blocks further apart (L2 hits)",
    "h200 v2 B=32 H=32 N=512 d=64 bf16 causal": "2.9% off: 8 SMs deal a head's blocks further apart (L2 hits)",
}
FAST = [pytest.param(hw, algo, p, marks=pytest.mark.xfail(strict=True, reason=OFF[f"{hw} {algo} {p.describe()}"]))
        if f"{hw} {algo} {p.describe()}" in OFF else (hw, algo, p)
        for hw, algo, p in ex.grid() if p.seqlen_q == 512 and not (algo == "v3" and p.headdim == 64)]


@pytest.mark.slow
@pytest.mark.parametrize("hw,algo,problem", FAST)
def test_default_run_within_2pct_of_full_on_fast_fa2_points(hw, algo, problem):
    """The FA2 grid's N=512 points (its cheapest --full runs; v3 at d64 left out, the slowest of them), 16
    points of h100, h200 and a100: the default sample is representative by its own check, and its cycles are
    within 2% of the whole chip's, but for the four listed in OFF (the committed table has every point)."""
    profile = load_profile(hw)
    default = simulate(algo, problem, profile)
    full = simulate(algo, problem, profile, sms=None)
    assert default.sim["sample"]["representative"] and default.sim["sms_simulated"] < profile.sm_count
    assert default.cycles == pytest.approx(full.cycles, rel=0.02)


@pytest.mark.slow
@pytest.mark.parametrize("hw", ["h100", "h200"])
def test_a_v3_causal_sample_is_timed_by_its_share(hw):
    """v3's causal order interleaves heads in sections: 48 of 256 heads on 25 of 132 SMs do 1% less work per SM
    than the chip, which their time follows; scaled by it, the sample is within 0.5% of the whole chip
    (unscaled it was 1.0% and 0.8% off; the table's 24 v3 causal points are within 0.7%)."""
    problem, profile = Problem(16, 16, 1024, 128, causal=True), load_profile(hw)
    default = simulate("v3", problem, profile)
    sample = default.sim["sample"]
    assert sample["time_scale"] == pytest.approx(1 / (1 + sample["share_error"])) and sample["time_scale"] > 1
    assert default.cycles == pytest.approx(simulate("v3", problem, profile, sms=None).cycles, rel=0.005)


@pytest.mark.slow
def test_the_worst_point_is_bistable_on_the_whole_chip():
    """h100 v2 B=32 H=16 N=512 d128, the table's worst: the whole chip's 264 blocks run in lockstep until the
    L2 fills, and from then on the second block of each SM falls 1-2k cycles behind the first, which shortens
    every later wave. With an L2 0.8% smaller the stagger does not start and --full takes 7% longer: a run
    that small a change moves is not one a sample can match to 2%."""
    problem, profile = Problem(32, 16, 512, 128), load_profile("h100")
    full = simulate("v2", problem, profile, sms=None).cycles
    smaller = simulate("v2", problem, profile.with_overrides({"l2_bytes": 52_000_000}), sms=None).cycles
    assert smaller / full - 1 > 0.05
