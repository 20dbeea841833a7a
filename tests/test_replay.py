"""The dispatch replay (simulator/replay.py): its fluid model of a launch, its fit of what a block costs, and
what it does to a head sample of causal blocks dealt head after head."""

from __future__ import annotations

import pytest
from flashsim.algorithms.problem import Problem
from flashsim.hw_profiles import load_profile
from flashsim.simulator import replay, simulate


def test_equal_blocks_end_in_waves_at_the_shared_pace():
    # 3 waves of 2 blocks on each of 4 SMs; two residents run at 1 / (1 + share) each
    assert replay.makespan([10.0] * 24, 4, 2, share=1.0) == pytest.approx(3 * 20.0)
    assert replay.makespan([10.0] * 24, 4, 2, share=0.5) == pytest.approx(3 * 15.0)
    assert replay.makespan([10.0], 4, 2, share=1.0) == pytest.approx(10.0)  # alone


def test_a_freed_slot_takes_the_next_block_in_launch_order():
    # one slot per SM: SM0 and SM1 end their first blocks at 1; SM0 takes block 2 (1), SM1 block 3 (3)
    assert replay.makespan([1.0, 1.0, 1.0, 3.0], 2, 1, share=0.0) == pytest.approx(4.0)
    # shortest first on the same two SMs: the long block starts last, later than longest first would
    assert replay.makespan([1.0, 1.0, 2.0, 4.0], 2, 1, 0.0) > replay.makespan([4.0, 2.0, 1.0, 1.0], 2, 1, 0.0)


def test_a_lone_block_speeds_up_when_its_neighbour_ends():
    # two residents at half pace until the short one ends at 2 (1 unit of work each), then the long one alone
    assert replay.makespan([1.0, 3.0], 1, 2, share=1.0) == pytest.approx(2.0 + 2.0)


def _records(fixed: float, per_step: float, share: float) -> list[tuple]:
    """Blocks alone on SMs 0-3 and pairs that share SM 4-7 for their whole lives, as the fit reads them."""
    recs = []
    for i, k in enumerate((2, 5, 9, 14)):
        recs.append(((0, 0, i), i, 0, round(fixed + per_step * k)))
    for i, k in enumerate((3, 6, 10, 12)):
        end = round(fixed + per_step * k * (1 + share))
        recs += [((0, 1, 2 * i), 4 + i, 0, end), ((0, 1, 2 * i + 1), 4 + i, 0, end)]
    return recs


def test_the_fit_recovers_what_a_block_costs():
    recs = _records(5000.0, 1800.0, 1.7)
    k = {r[0]: s for r, s in zip(recs, (2, 5, 9, 14, 3, 3, 6, 6, 10, 10, 12, 12), strict=True)}
    cost = replay.fit(recs, k.__getitem__)
    assert cost["fixed"] == pytest.approx(5000, rel=1e-3)
    assert cost["per_step"] == pytest.approx(1800, rel=1e-3)
    assert cost["share"] == pytest.approx(1.7, rel=1e-3)
    assert cost["rms"] < 1e-3


def test_too_few_blocks_say_nothing():
    recs = _records(5000.0, 1800.0, 1.7)[: replay.MIN_BLOCKS - 1]
    assert replay.fit(recs, lambda c: 4) is None


def test_a_sample_of_one_head_in_sixteen_follows_the_chips_dispatch():
    """B1 H16 N5000 d128 causal (v2, h200): one head's 40 blocks on 8 SMs ended 14% before the whole chip's 640
    on 132 (752,386 cycles in --full, simulated once: 16 s); replayed, the sample comes within the replay's own
    spread of it."""
    problem = Problem(1, 16, 5000, 128, causal=True)
    result = simulate("v2", problem, load_profile("h200"))
    sample = result.sim["sample"]
    assert sample["kind"] == "dispatch replayed" and sample["heads"] == 1
    assert sample["replay"]["scale"] > 1.1
    assert result.cycles == pytest.approx(752_386, rel=0.05)
