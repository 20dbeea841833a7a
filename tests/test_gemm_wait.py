"""An asynchronous GEMM completes its instruction latency after its last FLOP: a wait for it issued later than
that (FA3's PV GEMM, waited for after the softmax it overlapped) returns at once, and one issued earlier
still pays the latency."""

from __future__ import annotations

import flashsim.simulator.api as api
import pytest
from flashsim.algorithms import Problem, Tiling
from flashsim.algorithms.ir import RMEM, SMEM, Gemm, GemmWait, Kernel, Rescale, Role, Schedule
from flashsim.hw_profiles import load_profile
from flashsim.simulator import simulate

H200 = load_profile("h200")
PROBLEM = Problem(1, 1, 128, 128, dtype="bf16")
TILING = Tiling(128, 176, 12, 2)
GEMM = Gemm("acc", "P", "sV", 64, 128, 176, RMEM, SMEM, "wgmma", "bf16", 4, accumulate=True, async_token="o")


def _cycles(monkeypatch, *ops) -> int:
    """Cycles of one block of one warpgroup running `ops` (its launch costs included, the same for all)."""

    def program(cta):
        yield from ops

    kernel = Kernel("one", [(0, 0, 0)], (Role("wg", 4, program),), 1024, 128)
    monkeypatch.setattr(api, "build", lambda *a, **k: Schedule("v3", PROBLEM, TILING, (kernel,)))
    return simulate("v3", PROBLEM, H200, TILING, sms=None).kernels[0]["cycles"]


def test_a_late_wait_does_not_pay_the_latency_again(monkeypatch):
    work = Rescale("acc", "corr", 64, 4096, 4)  # far longer than the GEMM and its latency
    # every run issues the wgmma, so all run at the same (wgmma-loaded) clock
    issued = _cycles(monkeypatch, GEMM)
    waited = _cycles(monkeypatch, GEMM, GemmWait("o"))
    early = _cycles(monkeypatch, GEMM, GemmWait("o"), work)
    late = _cycles(monkeypatch, GEMM, work, GemmWait("o"))
    flops_cycles = GEMM.flops / H200.wgmma_bf16_flops_per_clk_per_sm
    gemm = flops_cycles + H200.wgmma_latency_cycles
    # waited for at once: its FLOPs at the wgmma rate plus the latency
    assert waited - issued == pytest.approx(gemm, abs=0.05 * flops_cycles)
    assert late - issued > 2 * gemm  # the op outlasts the GEMM
    # waited for after the op: the GEMM and its latency are hidden under it; waited for first, they are not
    assert late - issued == pytest.approx(_cycles(monkeypatch, GEMM, work) - issued, abs=2)
    assert early - late == pytest.approx(gemm, abs=0.05 * flops_cycles)
