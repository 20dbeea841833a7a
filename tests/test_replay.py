"""The dispatch replay (simulator/replay.py): its fluid model of a launch, its fit of what a block costs, and
what it does to a head sample of causal blocks dealt head after head."""

from __future__ import annotations

import pytest
from flashsim.algorithms.problem import Problem
from flashsim.hw_profiles import load_profile
from flashsim.simulator import replay, simulate
from flashsim.simulator.report import detail_table
from rich.console import Console


def test_equal_blocks_end_in_waves_at_the_shared_pace():
    # 3 waves of 2 blocks on each of 4 SMs; two residents run at 1 / (1 + share) each
    assert replay.makespan([(0.0, 10.0)] * 24, 4, 2, share=1.0) == pytest.approx(3 * 20.0)
    assert replay.makespan([(0.0, 10.0)] * 24, 4, 2, share=0.5) == pytest.approx(3 * 15.0)
    assert replay.makespan([(0.0, 10.0)], 4, 2, share=1.0) == pytest.approx(10.0)  # alone


def test_the_fixed_part_is_not_stretched_by_a_neighbour():
    # two residents: each spends its 5 fixed cycles, then its 10 of work at half pace
    assert replay.makespan([(5.0, 10.0)] * 2, 1, 2, share=1.0) == pytest.approx(5.0 + 20.0)
    # a resident in its fixed part shares the SM as the fit counts it (any overlap): the first block does 2 of
    # its 10 by 4, ends at 4 + 2 x 8, and the second finishes its last 2 alone
    assert replay.makespan([(0.0, 10.0), (4.0, 10.0)], 1, 2, share=1.0) == pytest.approx(20.0 + 2.0)


def test_a_freed_slot_takes_the_next_block_in_launch_order():
    # one slot per SM: SM0 and SM1 end their first blocks at 1; SM0 takes block 2 (1), SM1 block 3 (3)
    assert replay.makespan([(0.0, w) for w in (1.0, 1.0, 1.0, 3.0)], 2, 1, share=0.0) == pytest.approx(4.0)
    # shortest first on the same two SMs: the long block starts last, later than longest first would
    shortest, longest = [(0.0, w) for w in (1.0, 1.0, 2.0, 4.0)], [(0.0, w) for w in (4.0, 2.0, 1.0, 1.0)]
    assert replay.makespan(shortest, 2, 1, 0.0) > replay.makespan(longest, 2, 1, 0.0)


def test_a_lone_block_speeds_up_when_its_neighbour_ends():
    # two residents at half pace until the short one ends at 2 (1 unit of work each), then the long one alone
    assert replay.makespan([(0.0, 1.0), (0.0, 3.0)], 1, 2, share=1.0) == pytest.approx(2.0 + 2.0)


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
    """B2 H8 N9000 d64 causal (v2, h200), off the FA2 grid: one head's 71 blocks on 8 SMs end 5.5% before the
    whole chip's 1,136 on 132 (1,156,224 cycles in --full, simulated once: 25 s, session 48); the chip's
    dispatch replayed with the sample's block costs comes within 1% of it. (The earlier rule, the sample's
    end scaled by the ratio of two replays that stretched each block's fixed part too, was 6% long.)"""
    problem = Problem(2, 8, 9000, 64, causal=True)
    result = simulate("v2", problem, load_profile("h200"))
    sample = result.sim["sample"]
    assert sample["kind"] == "dispatch replayed" and sample["heads"] == 1
    full = 1_156_224
    assert sample["replay"]["sample_cycles"] < 0.96 * full
    assert result.cycles == pytest.approx(full, rel=0.01)
    console = Console(width=400, record=True)
    console.print(detail_table(result))  # the output says the chip's end was replayed, and what the sample gave
    assert f"where the sample's own end gave {sample['replay']['sample_cycles']:,} cycles" in console.export_text()


def test_few_blocks_a_slot_leave_the_replay_within_its_bound():
    """B1 H16 N5000 d128 causal (v2, h200): 640 blocks, 2.4 for each of the chip's 264 slots, so which SM the
    last long blocks land on decides the end; the replay gives the mean over small moves of the block costs
    (its spread 2-3%), 4.2% short of --full's 769,769 cycles (session 48), within the kind's bound."""
    result = simulate("v2", Problem(1, 16, 5000, 128, causal=True), load_profile("h200"))
    sample = result.sim["sample"]
    assert sample["replay"]["sample_cycles"] < 0.9 * 769_769  # the sample's own end: 16% short
    assert result.cycles == pytest.approx(769_769, rel=sample["bound"])
