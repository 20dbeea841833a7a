"""The fold (--fold): a sample's twin SMs run as one (simulator/gpu.py Gpu.fold, simulator/api.py _twins), with
the same answers as the run of every twin where the L2's order does not decide (experiments/fold_exactness.py)."""

from __future__ import annotations

import json
import re

import pytest
from flashsim.algorithms.problem import Problem
from flashsim.cli import main
from flashsim.experiments.fold_exactness import answers, same_answers
from flashsim.hw_profiles.loader import load_profile
from flashsim.simulator.api import simulate
from flashsim.simulator.gpu import Environment
from flashsim.simulator.resources import Port

POINT = Problem(batch=1, heads=16, seqlen_q=16384, headdim=128)  # the FA2-grid point: 8 SMs of one head


def _departures(copies: float, requests: list[tuple]) -> tuple[list[int], float]:
    """Submit (cycle, bytes, flow, weight) requests to a port; the cycles each is through, and its busy cycles."""
    env = Environment()
    port = Port(env, "hbm", 64.0, copies, requester_rate=3.0)
    done: list[int] = []
    for at, nbytes, flow, weight in requests:
        env.timeout(at).callbacks.append(
            lambda _e, n=nbytes, f=flow, w=weight: port.submit(env.now, n, done.append, f, 0, w))
    env.run()
    return sorted(done), port.busy_cycles(env.now)


def test_a_weighted_request_leaves_with_the_requests_it_stands_for():
    """Eight twins' identical requests at a port where each requester stands for 16 of the chip's leave when one
    request at a port of 128 copies does; a fetch that only the first twin makes (weight 1/8 there) leaves when
    the same fetch alone does at 16 copies. Beside other traffic too, and the busy cycles agree."""
    other = [(3, 5000.0, "other", 1.0)]
    eight, busy_eight = _departures(16.0, [(0, 4096.0, sm, 1.0) for sm in range(8)] + other)
    folded, busy_folded = _departures(128.0, [(0, 4096.0, 0, 1.0), (3, 5000.0, "other", 1 / 8)])
    assert set(eight[:8]) == {folded[0]} and eight[8] == folded[1]
    assert busy_eight == pytest.approx(busy_folded, rel=1e-12)
    one, _ = _departures(16.0, [(0, 4096.0, 0, 1.0), (2, 2048.0, 1, 1.0)])
    shared, _ = _departures(128.0, [(0, 4096.0, 0, 1 / 8), (2, 2048.0, 1, 1 / 8)])
    assert one == shared


@pytest.mark.parametrize("hw, algo, problem, options", [
    ("h100", "v2", POINT, {}),
    ("h100", "v2", POINT, {"flushed_l2": True}),
    ("h100", "v3", POINT, {}),
    ("h200", "v2", Problem(batch=2, heads=32, kv_heads=8, seqlen_q=16384, headdim=128), {"flushed_l2": True}),
    ("h100", "v2", Problem(batch=4, heads=16, seqlen_q=4096, headdim=128), {"extrapolate": False}),
])
def test_the_fold_answers_as_every_twin_does(hw, algo, problem, options):
    profile = load_profile(hw)
    folded = simulate(algo, problem, profile, fold=True, **options)
    each = simulate(algo, problem, profile, **options)
    assert folded.sim["fold"] == {"twins": 8, "sms_run": 1}
    assert "fold" not in each.sim
    assert same_answers(answers(folded), answers(each))
    assert folded.sim["sms_simulated"] == each.sim["sms_simulated"] == 8
    assert folded.sim["events"] < each.sim["events"] / 3  # what it is for


@pytest.mark.parametrize("hw, problem, why", [
    ("h100", Problem(batch=1, heads=16, seqlen_q=16384, headdim=128, causal=True), "causal blocks differ"),
    ("a100", POINT, "13 SMs of 2 slots: a wave of 26 blocks cuts a head of 128"),
])
def test_no_fold_where_the_sms_are_not_twins(hw, problem, why):
    r = simulate("v2", problem, load_profile(hw), fold=True)
    assert "sample" in r.sim, why
    assert "fold" not in r.sim, why


def test_a_traced_run_shows_every_sm():
    trace: list = []
    r = simulate("v2", POINT, load_profile("h100"), trace=trace, fold=True)
    assert "fold" not in r.sim
    assert {re.match(r"SM\d+", track).group() for track, *_ in trace if track.startswith("SM")} == {
        f"SM{i}" for i in range(8)}


def test_the_command_line_folds_when_asked(capsys):
    args = ["simulate", "--hw", "h100", "--algo", "v2", "--batch", "1", "--heads", "16", "--seqlen", "16384",
            "--headdim", "128"]
    assert main(args + ["--json", "--fold"]) == 0
    folded = json.loads(capsys.readouterr().out)
    assert main(args + ["--json"]) == 0
    each = json.loads(capsys.readouterr().out)
    assert folded["sim"]["fold"]["twins"] == 8 and "fold" not in each["sim"]
    assert folded["cycles"] == each["cycles"] and folded["bytes"] == each["bytes"]
    assert main(args + ["--fold"]) == 0
    table = capsys.readouterr().out
    assert "8 SMs (run as 1)" in table and "fold (--fold)" in table


def test_gqa_heads_listed_in_turn_do_not_fold():
    """A GQA launch lists each K/V head's blocks a few at a time, in turn: a wave of the sample holds blocks of
    several heads, whose SMs read different K/V tiles (no twins)."""
    r = simulate("v2", Problem(batch=64, heads=8, kv_heads=1, seqlen_q=512, seqlen_k=98560, headdim=128),
                 load_profile("h200"), fold=True)
    assert "sample" in r.sim and "fold" not in r.sim


def test_a_report_simulation_is_run_both_ways_where_it_folds():
    """fold_exactness --reports: a report's job (algo, problem, tiling, profile, overrides, swaps, flushed L2) with
    the fold and without it where the fold takes it, and None, before anything runs, where it does not."""
    from flashsim.experiments.fold_exactness import report_job

    point = {"batch": 1, "heads": 16, "seqlen_q": 16384, "headdim": 128}
    row = report_job(("v2", point, None, "h100", [], {}, True))
    assert row["twins"] == 8 and row["equal"]
    assert row["fold"]["events"] < row["each"]["events"]
    assert report_job(("v2", point, None, "a100", [], {}, True)) is None
