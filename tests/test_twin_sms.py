"""experiments/twin_sms.py: the twin classes of a trace's SMs."""

from __future__ import annotations

import pytest
from flashsim.algorithms.problem import Problem
from flashsim.experiments.twin_sms import classes, main
from flashsim.hw_profiles.loader import load_profile
from flashsim.simulator.api import simulate


def _ops(sm: int, times: list[tuple[int, int]], name: str = "gemm") -> list:
    return [(f"SM{sm}.0 consumer", name, start, end) for start, end in times]


def test_sms_are_twins_until_their_ops_part():
    same = [(0, 10), (10, 20), (20, 30), (30, 40)]
    trace = (_ops(0, same) + _ops(1, same) + _ops(2, same[:2] + [(20, 31), (31, 40)])
             + _ops(3, [(0, 11), (11, 20), (20, 30), (30, 40)]) + [("L2", "fill", 0, 40)])
    got = classes(trace, cuts=4)
    assert got["sms"] == 4  # tracks of no SM are not counted
    # to cycle 10: SM3 has ended nothing, the others one op alike; to 20: SM3's ends differ; to 30: SM2's
    assert got["classes_at_cuts"] == [2, 2, 3, 3]
    assert got["class_sizes"] == [2, 1, 1]
    assert got["fold_work_share"] == pytest.approx((2 + 2 + 3 + 3) / 16, abs=1e-3)


def test_an_op_that_differs_in_name_or_track_parts_twins():
    trace = _ops(0, [(0, 10)]) + _ops(1, [(0, 10)], name="softmax")
    assert classes(trace, cuts=1)["classes_at_cuts"] == [2]
    trace = _ops(0, [(0, 10)]) + [("SM1.1 consumer", "gemm", 0, 10)]
    assert classes(trace, cuts=1)["classes_at_cuts"] == [2]


def test_no_sm_tracks_no_classes():
    assert classes([("L2", "fill", 0, 5)])["fold_work_share"] is None


def test_a_lockstep_launch_folds_and_a_causal_one_much_less():
    """Equal blocks in lockstep (the whole chip, a small launch): a few classes for 132 SMs, twins for the whole
    run; the same launch causal, blocks of unequal length, parts into many more."""
    got = {}
    for causal in (False, True):
        trace: list = []
        simulate("v2", Problem(batch=1, heads=16, seqlen_q=2048, headdim=64, causal=causal), load_profile("h100"),
                 trace=trace)
        got[causal] = c = classes(trace)
        assert sum(c["class_sizes"]) == c["sms"] == 132
        assert c["classes_at_cuts"] == sorted(c["classes_at_cuts"])  # a class only ever parts
    assert got[False]["classes_at_cuts"][-1] <= 8
    assert got[True]["classes_at_cuts"][-1] > 4 * got[False]["classes_at_cuts"][-1]
    assert got[False]["fold_work_share"] < got[True]["fold_work_share"]


def test_bad_arguments_are_one_line_and_status_2(tmp_path, capsys):
    for argv in (["--jobs", "0"], ["--only", "no such case"], ["--out", str(tmp_path / "missing" / "x.json")]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
        assert len(capsys.readouterr().err.strip().splitlines()[-1]) > 0
