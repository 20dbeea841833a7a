"""The drift skip leaves out causal loop stretches whose roles drift against each other, within a tolerance.

On causal grids the roles of the sampled SMs run at steady rates that are no whole multiples of each other, so
the exact loop skip rarely finds every role in phase; the drift skip (simulator/loopskip.py,
LoopSkip._watch_drift) moves each role on by its own rate instead. It is not exact: each skip leaves a role
within half a loop body of where the plain run has it, and the run's end moves by what such a nudge moves it
(a few cycles' stagger at the start moves these runs by up to about 0.9%). Here the sampled run stays within
DRIFT_BOUND of the exact-only run, and leaves out every op and load it says it does.

These samples' answers are the chip's dispatch replayed from their blocks' fitted costs (simulator/replay.py).
That fit moves more than the run does: on h100 B1 H16 N16384 d128 causal the drift skip moves the sample's own
end by 0.013% but its fitted cost per step by 0.5%, and the replayed answer by 0.66% (session 48). The replayed
answers are held to REPLAYED_BOUND.
"""

from __future__ import annotations

import pytest
from flashsim.algorithms.problem import Problem
from flashsim.hw_profiles import load_profile
from flashsim.simulator import simulate

DRIFT_BOUND = 5e-3
REPLAYED_BOUND = 1e-2


@pytest.mark.parametrize(
    "hw,problem",
    [
        ("h200", Problem(2, 32, 8192, 128, kv_heads=8, causal=True)),  # GQA: 8 query heads read each K/V head
        ("h100", Problem(1, 16, 16384, 128, causal=True)),
    ],
)
def test_drift_skip_leaves_out_causal_stretches_within_half_a_percent(hw, problem):
    profile = load_profile(hw)
    exact = simulate("v2", problem, profile, drift_skip=False)
    drift = simulate("v2", problem, profile)
    skip, exact_skip = drift.sim["loop_skip"], exact.sim["loop_skip"]
    assert skip["drift_skips"] > 0 and exact_skip["drift_skips"] == 0
    assert drift.sim["ops"] < exact.sim["ops"]
    # every op is either run or counted as left out, and every left-out load is read through the L2
    assert drift.sim["ops"] + skip["ops_left_out"] == exact.sim["ops"] + exact_skip["ops_left_out"]
    assert drift.bytes["l2_read"] == exact.bytes["l2_read"]
    own, exact_own = (r.sim["sample"]["replay"]["sample_cycles"] for r in (drift, exact))
    assert own == pytest.approx(exact_own, rel=DRIFT_BOUND)  # the sampled run itself
    assert drift.cycles == pytest.approx(exact.cycles, rel=REPLAYED_BOUND)
    for key in ("hbm_read", "hbm_write", "smem_write"):
        assert drift.bytes[key] == pytest.approx(exact.bytes[key], rel=DRIFT_BOUND)
    # the shared-memory reads of the left-out ops are their own (a GEMM's operands), not the window's average
    assert drift.bytes["smem_read"] == pytest.approx(exact.bytes["smem_read"], rel=1e-9)


def test_drift_skip_leaves_uniform_kernels_to_the_exact_skip():
    """Blocks that all do the same work (non-causal) are the periodic and exact loop skips' to take."""
    result = simulate("v2", Problem(1, 16, 8192, 128), load_profile("h100"))
    assert result.sim["loop_skip"]["skips"] > 0 and result.sim["loop_skip"]["drift_skips"] == 0
