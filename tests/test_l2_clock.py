"""The L2 keeps its own clock (Nsight Compute on the H200, experiments/results/h200/session20/clock-domains/):
1.70-1.71 GHz in every launch while the SM clock moved between 1.68 and 1.97 GHz with the load. So the L2's
rates are per second, and a kernel whose SM clock drops under tensor load gets more L2 bytes per SM cycle."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from flashsim.experiments.clock_domains import summarize
from flashsim.hw_profiles import load_profile
from flashsim.simulator.gpu import Gpu

RESULTS = Path(__file__).resolve().parents[1] / "experiments" / "results" / "h200" / "session20" / "clock-domains"


def test_the_committed_profile_run_shows_the_l2_clock_fixed_while_the_sm_clock_moves():
    data = summarize(gzip.decompress((RESULTS / "ncu-clocks.csv.gz").read_bytes()).decode())
    s = data["summary"]
    assert s["launches"] >= 30
    sm_lo, sm_hi = s["sm_clock_ghz"]
    l2_lo, l2_hi = s["l2_clock_ghz"]
    assert sm_hi - sm_lo > 0.25  # power management moved the SM clock...
    assert l2_hi - l2_lo < 0.01  # ...and not the L2's
    # wgmma kernels ran slower than memory-bound ones, at the same L2 clock
    kinds = s["by_kind"]
    assert kinds["our v3 (wgmma)"]["sm_clock_ghz"][1] < kinds["memory-bound (input generation)"]["sm_clock_ghz"][0]


@pytest.mark.parametrize("name", ["h200", "h100", "a100"])
def test_l2_bytes_per_sm_cycle_follow_the_sm_clock(name):
    p = load_profile(name)
    gpu = Gpu(p, sms=8)
    for clock in (p.sm_clock_hz, p.sm_clock_mma_sync_load_hz, p.sm_clock_wgmma_load_hz or p.sm_clock_hz):
        gpu.set_clock(clock)
        assert gpu.l2_port.rate * clock == pytest.approx(p.l2_bandwidth_bytes_per_s)
        assert gpu.l2_atomic.rate * clock == pytest.approx(p.l2_atomic_bytes_per_s)


def test_an_l2_transfer_takes_the_same_seconds_at_any_sm_clock():
    p = load_profile("h200")
    seconds = []
    for clock in (p.sm_clock_hz, p.sm_clock_wgmma_load_hz):
        gpu = Gpu(p, sms=p.sm_count)
        gpu.set_clock(clock)
        done = []
        gpu.l2_port.submit(0, 64 << 20, done.append)
        gpu.env.run()
        seconds.append(done[0] / clock)
    assert seconds[0] == pytest.approx(seconds[1], rel=1e-4)
    assert seconds[0] == pytest.approx((64 << 20) / p.l2_bandwidth_bytes_per_s, rel=1e-3)
