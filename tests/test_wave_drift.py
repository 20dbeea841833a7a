"""The wave-skip what-if (experiments/wave_drift.py) played on made-up wave marks."""

from __future__ import annotations

import pytest
from flashsim.experiments.wave_drift import wave_skip, waves


def _marks(first: int, rest: list[int]) -> list[int]:
    out = [0, first]
    for g in rest:
        out.append(out[-1] + g)
    return out


def test_waves_of_equal_length_are_charged_exactly():
    marks = _marks(500, [1000] * 8)
    s = wave_skip(marks, 3, 0.001)
    assert s["stop_wave"] == 4 and s["end_error"] == 0.0  # the fill, then three equal waves
    assert s["watched"] == pytest.approx(3500 / 8500)


def test_drifting_waves_carry_the_drift_into_the_end():
    marks = _marks(500, [1000, 999, 998, 990, 980, 970, 960])  # the last waves shorten: the skip overcharges
    s = wave_skip(marks, 3, 0.005)
    assert s["stop_wave"] == 4 and s["end_error"] > 0


def test_no_agreement_watches_everything():
    marks = _marks(500, [1000, 1100, 1000, 1100, 1000])
    assert wave_skip(marks, 3, 0.001) == {"stop_wave": None, "watched": 1.0, "end_error": 0.0}


def test_one_mark_a_wave():
    assert waves([0, 10, 11, 20, 21, 30], 2) == [0, 11, 21]
