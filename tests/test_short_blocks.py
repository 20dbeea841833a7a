"""Short blocks: the simulator's block residency against Nsight Compute's warp lifetimes of our v2 kernel.

The N 256 causal development shapes, whose blocks visit one or two K/V tiles, run 20-25% slower under the
validation protocol than predicted; under Nsight Compute (its own clean flush, one launch) the same kernel's
warps live as long as the simulator keeps its blocks, and the kernel takes as many cycles
(experiments/results/h200/session31/short-blocks/, experiments/h200_short_blocks.sh).

Since the stores' own path and the prologue's and epilogue's paced bookkeeping (both measured, adopted in
session 33 by the development-set rule) the simulator keeps these multi-wave blocks 2-9% longer than the warps
live under Nsight Compute (it was -5..+4%), while their GPU busy time under the validation protocol stays within
3% (B16 H48/6 N256 d64 causal: -1.8% -> +2.4%), and the kernel's own clock64 stamps (session 32) still measure
that shape's blocks longer than simulated (9.3-23.0 k cycles against 6.6-19.3 k;
experiments/results/h200/session33/phase-stamps.md). The two measurements disagree, and which one the model should
follow is open (docs/MODEL.md, "Stores and paced bookkeeping"); the bounds below hold the gap, no more.

The fetch at the warps' front (fetch_model 2, shipped since session 47) widened it at d64: the blocks live 13-15%
longer than the warps there (9% without it) and the kernel takes 12-13% more cycles than Nsight Compute's (7-8%),
while the same shapes' GPU busy time under the validation protocol came closer at N 256 (-20.5 -> -15.8%) and
went from +6.1 to +8.0% at N 512 (devset-tiles.md). d128 moved 3 points."""

import re
from pathlib import Path

import pytest
from flashsim.algorithms.problem import Problem
from flashsim.experiments.block_lifetimes import lifetimes
from flashsim.experiments.busy_protocol import parse_id
from flashsim.hw_profiles.loader import load_profile

RESULTS = Path(__file__).resolve().parent.parent / "experiments" / "results" / "h200" / "session31" / "short-blocks"


def _metric(text: str, name: str) -> float:
    m = re.search(rf"{re.escape(name)}\s+\S+\s+([\d,.]+)", text)
    assert m, f"{name} missing from the Nsight Compute details"
    return float(m.group(1).replace(",", ""))


def _measured(name: str) -> tuple[float, float]:
    """(mean warp lifetime, longest SM's elapsed cycles) of one committed Nsight Compute run."""
    text = (RESULTS / f"ncu-{name}-details.txt").read_text()
    life = _metric(text, "sm__warps_active.sum") / _metric(text, "smsp__warps_launched.sum")
    return life, _metric(text, "sm__cycles_elapsed.max")


@pytest.mark.parametrize("name, batch, seqlen, headdim", [
    ("v2-d64-n256-c", 16, 256, 64),
    ("v2-d64-n512-c", 16, 512, 64),
    ("v2-d128-n256-c-b16", 16, 256, 128),
])
def test_block_lifetimes_match_warp_lifetimes(name, batch, seqlen, headdim):
    problem = Problem(batch=batch, heads=48, kv_heads=6, seqlen_q=seqlen, headdim=headdim, causal=True)
    sim = lifetimes("v2", problem, load_profile("h200"))
    life, elapsed = _measured(name)
    assert sim["blocks"] == batch * 48 * seqlen // 128
    assert sim["mean_cycles"] == pytest.approx(life, rel=0.16)
    assert sim["kernel_cycles"] == pytest.approx(elapsed, rel=0.14)


def test_lifetimes_cover_the_kernel():
    """Blocks of two slots per SM, one wave: each lives less than the kernel, the longest most of it."""
    problem = Problem(batch=1, heads=8, seqlen_q=256, headdim=64, causal=True)
    sim = lifetimes("v2", problem, load_profile("h200"))
    assert sim["blocks"] == 16
    assert sim["min_cycles"] <= sim["mean_cycles"] <= sim["max_cycles"] < sim["kernel_cycles"]
    assert sim["max_cycles"] > 0.7 * sim["kernel_cycles"]  # the rest: launch, the last stores draining


def test_config_ids_read_back():
    for config_id in ("b16-h48-kv6-n256-d64-causal", "b1-h16-kv8-n903-k2048-d128-causal", "b8-h132-n128-k8192-d128"):
        assert parse_id(config_id).id == config_id
    with pytest.raises(SystemExit):
        parse_id("b16-n256")
