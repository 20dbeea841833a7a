"""The replay-window what-if (experiments/replay_window.py) on made-up block records."""

from __future__ import annotations

import pytest
from flashsim.experiments.replay_window import replay_windows, windows

FIXED, PER_STEP = 500.0, 100.0


def _records(heads: int, blocks: int) -> list[tuple]:
    """Blocks of `heads` heads, block m of a head m + 1 steps, each alone on its SM one after another: their
    cycles are exactly FIXED + PER_STEP * steps."""
    out, now = [], 0
    for h in range(heads):
        for m in range(blocks):
            cycles = int(FIXED + PER_STEP * (m + 1))
            out.append(((0, h, m), h * blocks + m, now, now + cycles))
            now += cycles
    return out


def _steps(cta: tuple) -> int:
    return cta[2] + 1


def test_windows_split_by_time_and_by_head():
    records = _records(3, 10)
    named = dict(windows(records))
    assert [len(named[f"head {h} alone"]) for h in range(3)] == [10, 10, 10]
    assert len(named["heads 0-1"]) == 20 and len(named["heads 0-2"]) == 30
    shares = [len(part) for name, part in windows(records) if name.startswith("time")]
    assert shares == sorted(shares) and shares[-1] < 30  # the last block ends at the run's end, past 90%


def test_costs_that_fit_exactly_replay_alike_from_any_window():
    records = _records(3, 10)
    chip = [(0, h, m) for h in range(6) for m in range(10)]
    out = replay_windows(records, _steps, chip, chip_sms=4, slots=1)
    assert out["full"]["fixed"] == pytest.approx(FIXED) and out["full"]["per_step"] == pytest.approx(PER_STEP)
    for row in out["rows"]:
        if row["blocks"] >= 8:  # replay.MIN_BLOCKS: fewer say too little
            assert row["cycles_error"] == pytest.approx(0.0, abs=1e-9), row
        else:
            assert row["fit"] is None and row["cycles_error"] is None
