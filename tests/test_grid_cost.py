"""experiments/grid_cost.py: the FA2 grid's points by kind of cost, and the shortcuts each took in words."""

from __future__ import annotations

from flashsim.experiments import grid_cost


def _point(name: str, cpu: float, events: int, sample: bool, **sim) -> dict:
    sim = {"sms_simulated": 8 if sample else 132, "sample": {"heads": 1, "of_heads": 16} if sample else None, **sim}
    return {"point": name, "cpu_s": cpu, "events": events, "sim": sim}


def test_points_are_summed_by_kind():
    points = [
        _point("v2 d64 full N=512 B=32 H=32", 5.0, 100, False),
        _point("v3 d128 causal N=512 B=32 H=16", 3.0, 50, False),
        _point("v3 d64 full N=16384 B=1 H=32", 9.0, 800, True),
        _point("v2 d128 causal N=16384 B=1 H=16", 4.0, 200, True),
        _point("v2 d128 full N=16384 B=1 H=16", 0.5, 20, True),
        {"point": "v2 d256 full N=512 B=32 H=8", "skipped": "does not fit"},
    ]
    kinds = grid_cost.by_kind(points)
    assert kinds["whole chip"] == {"points": 2, "cpu_s": 8.0, "events": 150}
    assert kinds["sampled v3 d64"]["points"] == 1 and kinds["sampled causal"]["events"] == 200
    assert kinds["sampled, not causal"]["cpu_s"] == 0.5
    assert sum(k["points"] for k in kinds.values()) == 5  # the skipped point counts nowhere


def test_shortcuts_are_named_with_what_they_left_out():
    sim = {
        "sms_simulated": 132,
        "periodic_skips": 1,
        "blocks_extrapolated": 792,
        "loop_skip": {"skips": 0, "ops_left_out": 0},
    }
    assert grid_cost._shortcuts(sim) == "whole chip (132 SMs), periodic x1, 792 blocks left out"
    sim = {
        "sms_simulated": 17,
        "sample": {"heads": 4, "of_heads": 32},
        "loop_skip": {"skips": 14, "ops_left_out": 264800},
    }
    assert grid_cost._shortcuts(sim) == "sample 4/32 heads on 17 SMs, loop x14 (264800 ops)"
