"""The detail table names what the clock leaves out where it matters: a kernel that keeps HBM and the tensor
cores busy together (measured below the model's clock on the H200), and nothing otherwise."""

from __future__ import annotations

from types import SimpleNamespace

from flashsim.algorithms.problem import Problem
from flashsim.hw_profiles import load_profile
from flashsim.simulator import simulate
from flashsim.simulator.report import clock_caveat


def _run(time_s=None, **util):
    return SimpleNamespace(utilization={"tensor": 0.0, "hbm": 0.0, **util}, time_s=time_s)


def test_caveat_only_where_hbm_and_tensor_work_load_the_chip_together():
    assert clock_caveat(_run(hbm=0.66, tensor=0.58)).startswith("HBM 66% and tensor cores 58% busy")
    assert clock_caveat(_run(hbm=0.9, tensor=0.1)) == ""  # memory-bound: the clock stays
    assert clock_caveat(_run(hbm=0.02, tensor=0.6)) == ""  # compute-bound: the class clock holds


def test_caveat_follows_the_simulated_utilization():
    h200 = load_profile("h200-sxm-141gb")
    long_kv = simulate("v2", Problem(8, 132, 128, 128, seqlen_k=2048), h200)  # every block streams its own K/V
    grid = simulate("v2", Problem(1, 16, 4096, 128), h200)
    assert clock_caveat(long_kv) and not clock_caveat(grid)


def test_caveat_gives_the_time_at_the_measured_clocks():
    """6-10% below the model's clock: 1 ms at the model's clock takes 1.06-1.11 ms."""
    text = clock_caveat(_run(time_s=1e-3, hbm=0.7, tensor=0.6))
    assert "6-10% below" in text and text.endswith("1.06 ms-1.11 ms")
