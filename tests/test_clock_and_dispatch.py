"""Two measured SM mechanisms (experiments/results/h200/session12/):

- a wgmma kernel's clock follows its tensor cores' duty (power management; `power/power-mix.json`): the
  profile's knee-and-line reproduces the measured wgmma-only mixes, and with `clock_model = 1` a kernel
  reports the clock of its duty (the shipped default, 0, keeps the saturated clock);
- the dependent streams of three or more warps per scheduler take turns at the scheduler's measured rate
  (`dep-warps/dep-warps.json`): three-consumer v3 tiles slow down, two-consumer ones do not.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from flashsim.algorithms.problem import Problem
from flashsim.algorithms.tiling import Tiling
from flashsim.hw_profiles import load_profile
from flashsim.simulator import simulate

RESULTS = Path(__file__).resolve().parents[1] / "experiments" / "results" / "h200" / "session12"


def test_the_clock_line_reproduces_the_measured_wgmma_mixes():
    p = load_profile("h200")
    report = json.loads((RESULTS / "power" / "power-mix.json").read_text())["results"]
    points = [q for q in report["power_mix"]["points"]
              if q["tensor"] == "wgmma" and q["mufu_per_thread"] == 0 and q["ffma_per_thread"] == 0]  # fmt: skip
    assert len(points) == 5
    for q in points:
        if q["tensor_per_period"] == 0:
            continue  # no tensor work: the clock of an idle spin, not a wgmma kernel's
        duty = q["tensor_flops_per_clk_per_sm"] / p.wgmma_bf16_flops_per_clk_per_sm
        assert p.wgmma_clock_hz(duty) == pytest.approx(q["clock_hz"], rel=0.02), q
    # the saturated clock is the first calibration's (1.583 GHz); the same run as the mixes read 1.611
    assert p.sm_clock_wgmma_load_hz == pytest.approx(report["clock"]["clock_hz"], rel=0.02)


def test_the_clock_is_flat_to_the_knee_then_falls_to_the_saturated_clock():
    p = load_profile("h200")
    knee = p.wgmma_clock_knee_fraction
    assert p.wgmma_clock_hz(0.0) == p.wgmma_clock_hz(knee) == p.sm_clock_light_tensor_load_hz
    assert p.wgmma_clock_hz(1.0) == p.wgmma_clock_hz(1.5) == p.sm_clock_wgmma_load_hz
    duties = [knee + i * (1 - knee) / 10 for i in range(11)]
    clocks = [p.wgmma_clock_hz(d) for d in duties]
    assert all(a > b for a, b in zip(clocks, clocks[1:], strict=False))


def _v3(headdim: int, block_m: int, block_n: int, overrides: dict | None = None, **kw):
    problem = Problem(batch=1, heads=16, seqlen_q=4096, headdim=headdim, **kw)
    tiling = Tiling(block_m=block_m, block_n=block_n, warps=4 * (block_m // 64 + 1), stages=2)
    return simulate("v3", problem, load_profile("h200", overrides), tiling=tiling)


def test_a_wgmma_kernel_runs_at_the_clock_of_its_duty():
    result = _v3(128, 128, 176, {"clock_model": 1})
    kernel = result.kernels[0]
    p = load_profile("h200")
    duty = result.utilization["tensor"]
    assert p.sm_clock_wgmma_load_hz < kernel["clock_hz"] < p.sm_clock_light_tensor_load_hz
    assert kernel["clock_hz"] == pytest.approx(p.wgmma_clock_hz(duty), rel=0.01)
    assert result.kernel_time_s == pytest.approx(kernel["cycles"] / kernel["clock_hz"], rel=1e-9)


def test_by_default_a_wgmma_kernel_runs_at_the_saturated_clock():
    p = load_profile("h200")
    assert p.clock_model == 0
    assert _v3(128, 128, 176).kernels[0]["clock_hz"] == p.sm_clock_wgmma_load_hz


def test_mma_sync_kernels_keep_their_measured_clock():
    problem = Problem(batch=1, heads=16, seqlen_q=4096, headdim=128)
    kernel = simulate("v2", problem, load_profile("h200")).kernels[0]
    assert kernel["clock_hz"] == load_profile("h200").sm_clock_mma_sync_load_hz


def test_the_dispatch_rate_is_the_measured_one():
    points = json.loads((RESULTS / "dep-warps" / "dep-warps.json").read_text())["results"]["dep_warps"]["points"]
    ffma = {q["warps_per_sm"]: q["cycles_per_instruction"] for q in points if q["kernel"] == "fp32_dep"}
    rate = load_profile("h200").dependent_issue_per_clk_per_sub_partition
    for warps in (12, 16):  # three and four warps per scheduler: the rate binds
        assert (warps / 4) / ffma[warps] == pytest.approx(rate, rel=0.02)
    assert ffma[8] < 1.02 * ffma[4]  # two warps per scheduler: each keeps its latency


def test_three_consumer_streams_take_turns_two_do_not():
    free = {"dependent_issue_per_clk_per_sub_partition": 100.0}
    three = _v3(64, 192, 128).kernels[0]["cycles"] / _v3(64, 192, 128, free).kernels[0]["cycles"]
    two = _v3(128, 128, 176).kernels[0]["cycles"] / _v3(128, 128, 176, free).kernels[0]["cycles"]
    assert three > 1.02
    assert two == pytest.approx(1.0, abs=0.002)
