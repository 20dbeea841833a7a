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


WRITE_BACKS = pytest.mark.xfail(
    strict=True,
    reason="representative by the check, yet 3-6% off: the sampled L2's evictions and write-backs (the same "
    "sample is exact with a large L2, and the non-causal one with free write-backs); the check does not see "
    "the L2, and no sample selection has fixed it",
)


@pytest.mark.slow
@pytest.mark.parametrize(
    "hw,algo,problem",
    [
        ("h100", "v2", Problem(32, 32, 512, 64)),
        ("h100", "v3", Problem(32, 16, 512, 128, causal=True)),
        ("h200", "v2", Problem(32, 16, 512, 128)),
        ("h200", "v2", Problem(32, 32, 512, 64, causal=True)),
        ("a100", "v2", Problem(32, 16, 512, 128)),
        ("a100", "v2", Problem(32, 32, 512, 64, causal=True)),
        pytest.param("h100", "v2", Problem(32, 16, 512, 128), marks=WRITE_BACKS),
    ],
)
def test_default_run_within_2pct_of_full_on_fast_fa2_points(hw, algo, problem):
    """The FA2 grid's N=512 points (those with the cheapest --full runs) of each profile: the default sample is
    representative by its own check, and its cycles are within 2% of the whole chip's."""
    profile = load_profile(hw)
    default = simulate(algo, problem, profile)
    full = simulate(algo, problem, profile, sms=None)
    assert default.sim["sample"]["representative"] and default.sim["sms_simulated"] < profile.sm_count
    assert default.cycles == pytest.approx(full.cycles, rel=0.02)
