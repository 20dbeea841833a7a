"""The phase experiment's what-if (simulate(start_stagger_cycles=D): the first block of each SM's odd slots
starts D cycles late, as kernels/v2.cu's start_stagger_cycles holds the second block to start on an SM back) and
its report (experiments/stagger.py)."""

from __future__ import annotations

import pytest
from flashsim.algorithms.problem import Problem
from flashsim.experiments import stagger
from flashsim.hw_profiles import load_profile
from flashsim.simulator import simulate

H200 = load_profile("h200")
# one wave of two of v2's 128-row d64 blocks per SM on the whole chip: 2 x 33 heads x 4 Q blocks = 264
ONE_WAVE = Problem(batch=2, heads=33, seqlen_q=512, seqlen_k=512, headdim=64)
ONE_PER_SM = Problem(batch=1, heads=33, seqlen_q=512, seqlen_k=512, headdim=64)


def _cycles(problem: Problem, stagger_cycles: int) -> int:
    return simulate("v2", problem, H200, sms=None, start_stagger_cycles=stagger_cycles).cycles


def test_a_late_second_block_runs_after_the_first_when_held_back_past_it():
    """Held back longer than a lone block takes, the second block of each SM starts after the first is done
    and then runs alone: the launch takes the hold plus one lone block, give or take its start."""
    alone = _cycles(ONE_PER_SM, 0)
    together = _cycles(ONE_WAVE, 0)
    hold = 2 * alone
    late = _cycles(ONE_WAVE, hold)
    assert together < 2 * alone  # sharing the SM beats taking turns
    assert hold + 0.9 * alone < late < hold + 1.1 * alone


def test_the_hold_touches_only_odd_slots():
    """With one block per SM no slot but the first holds a block, so the hold changes nothing; with two it
    moves the launch's end."""
    assert _cycles(ONE_PER_SM, 5000) == _cycles(ONE_PER_SM, 0)
    assert _cycles(ONE_WAVE, 500) != _cycles(ONE_WAVE, 0)


def test_the_report_gives_each_columns_change_from_its_unstaggered_run():
    result = {"clock_hz": 1.76e9, "rows": [
        {"headdim": 128, "batch": 2, "stagger_cycles": 0, "measured_cycles": 361000, "default": 335000,
         "issue model": 336000, "block shares": 362000},
        {"headdim": 128, "batch": 2, "stagger_cycles": 1200, "measured_cycles": 362500, "default": 317000,
         "issue model": 295000, "block shares": 361000},
    ]}
    text = stagger.markdown(result)
    assert "| d128 | 2 | 1200 | 362,500 | +1,500 | 317,000 | -18,000 | 295,000 | -41,000 | 361,000 | -1,000 |" in text
    assert stagger._clock({"rows": []}) == pytest.approx(1.76e9)


def test_compare_refuses_a_missing_file(tmp_path, capsys):
    assert stagger.main(["compare", str(tmp_path / "none.json")]) == 2
    assert "no such file" in capsys.readouterr().err
