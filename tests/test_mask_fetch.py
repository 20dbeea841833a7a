"""A masked step's own code (algorithms/schedules/forward_code.py MASK): our v2's mask is a stretch of dense
instructions that only masked steps run, so the first masked step on an SM runs at the pace of its lines'
fetch (simulator/timing.py _fetch_paced), which session 38's phase stamps and Nsight Compute twins measured."""

from __future__ import annotations

import gzip
import json
import statistics
from pathlib import Path

import pytest
from flashsim.algorithms.ir import Code
from flashsim.algorithms.problem import Problem
from flashsim.algorithms.schedules import forward_code
from flashsim.experiments import code_lines
from flashsim.experiments.block_lifetimes import lifetimes
from flashsim.hw_profiles import load_profile
from flashsim.simulator.api import simulate
from flashsim.simulator.timing import _fetch_paced

RESULTS = Path(__file__).resolve().parent.parent / "experiments" / "results" / "h200"
# (head dim, block_n) -> Nsight Compute source pages of our v2 run causal and not (the same binary)
RUNS = {(64, 128): ("session18/causal-short/ncu-v2-d64-n512-c1", "session18/causal-short/ncu-v2-d64-n512-c0"),
        (128, 64): ("fa2-sass/ncu-v2-d128-n4096-c1", "fa2-sass/ncu-v2-d128-n4096-c0")}


def test_mask_is_the_static_sass_region_that_selects_minus_infinity():
    counts = json.loads((RESULTS / "session39/v2-sass-counts.json").read_text())
    assert code_lines.sass_masks(counts) == forward_code.MASK


@pytest.mark.parametrize("d, bn", sorted(RUNS))
def test_mask_lines_match_the_causal_runs_own(d, bn):
    """Nsight Compute's executed lines of an earlier build, run causal and not: the lines only the causal run
    ran and their instructions come within a few of the static count."""
    causal, plain = (str(RESULTS / f"{stem}-sass.txt.gz") for stem in RUNS[d, bn])
    lines, instructions = code_lines.mask(causal, plain)
    static_lines, static_instructions = forward_code.MASK["flashsim", d, 128, bn, 4]
    assert abs(lines - static_lines) <= 1
    assert abs(instructions - static_instructions) <= 0.05 * static_instructions
    # forward_code.LINES' causal loop is the plain loop and the mask, counted the same way
    assert forward_code.LINES["flashsim", d, 128, bn, 4, True][1] == forward_code.LINES[
        "flashsim", d, 128, bn, 4, False][1] + lines


def test_dense_code_runs_at_its_fetch_and_slow_code_does_not():
    p = load_profile("h200")
    mask = forward_code.mask_code("flashsim", 64, 128, 128, 4)
    assert _fetch_paced(mask, p)  # eight instructions a line issue in 8 cycles; a line comes every 16.4
    # the attention kernels' softmax issues a line in ~36 cycles: its fetch hides under it
    slow = Code("slow", mask.nbytes, warps=4, instructions=mask.nbytes // 128 * 36)
    assert not _fetch_paced(slow, p)
    # eight warps on four schedulers issue half as fast: the A100's d256 tile of 8 warps waits for no line
    assert not _fetch_paced(forward_code.mask_code("flashsim", 256, 128, 64, 8), p)


def test_only_masked_steps_of_causal_runs_run_the_mask():
    from flashsim.algorithms.ir import Code as CodeOp
    from flashsim.algorithms.schedules import v2
    from flashsim.algorithms.tiling import default_tiling

    profile = load_profile("h200")
    for causal, expect in ((True, 1), (False, 0)):
        p = Problem(batch=1, heads=1, seqlen_q=512, headdim=64, causal=causal)
        sched = v2.build(p, default_tiling("v2", p, profile))
        kernel = sched.kernels[0]
        role = kernel.roles[0]
        for cta in kernel.ctas:
            ops = list(role.program(cta))
            assert sum(isinstance(op, CodeOp) and op.name.endswith("mask") for op in ops) == expect


def _longest(causal: bool, fetch_model: int | None = None) -> int:
    p = Problem(batch=2, heads=24, kv_heads=12, seqlen_q=256, headdim=64, causal=causal)
    profile = load_profile("h200")
    if fetch_model is not None:
        profile = profile.with_overrides({"fetch_model": fetch_model})
    return lifetimes("v2", p, profile, flushed_l2=True)["max_cycles"]


def test_the_first_masked_step_takes_the_measured_extra(monkeypatch):
    """B2 H24/12 N256 d64, one wave: the causal run's longest block against its non-causal twin's, the same
    K/V steps. Measured (session38/phase-stamps/, after validate's write flush): 1.1k cycles longer, the
    masked phase 800-890 cycles longer; Nsight Compute's twins (session38/short-ncu/): 1.3k."""
    rows = json.loads(gzip.decompress((RESULTS / "session38/phase-stamps/phase-stamps.json.gz").read_bytes()))["rows"]

    def longest(config_id):  # the block span whose median over the calls is longest (phase-stamps.md)
        runs = [r["blocks"] for r in rows if r["config_id"] == config_id and r["protocol"] == "write"]
        return max(statistics.median(run[i]["span"] for run in runs) for i in range(len(runs[0])))

    measured = longest("b2-h24-kv12-n256-d64-causal") - longest("b2-h24-kv12-n256-d64")
    assert 1000 < measured < 1300
    for fetch_model in (None, 0):  # the shipped fetch at the warps' front, and no forward code fetched
        modelled = _longest(True, fetch_model) - _longest(False, fetch_model)
        assert 0.7 * measured < modelled < 1.3 * measured
    monkeypatch.delitem(forward_code.MASK, ("flashsim", 64, 128, 128, 4))
    # without the mask's own stretch, fetch_model 0 misses it; the fetch at the front still charges the mask's
    # lines, which the causal loop's stretch holds (forward_code.LINES)
    assert _longest(True, 0) - _longest(False, 0) < 0.3 * measured
    assert 0.7 * measured < _longest(True) - _longest(False) < 1.3 * measured


def test_an_sm_fetches_the_mask_once():
    """Blocks after the first on an SM find the mask's code kept: one fetch per SM, though each SM runs
    several masked blocks, where nothing else takes the SM's cache (fetch_model 0; the fetch at the warps' front
    keeps the kernel's other stretches there too, and they evict it)."""
    trace: list = []
    p = Problem(batch=4, heads=16, seqlen_q=1024, headdim=64, causal=True)
    simulate("v2", p, load_profile("h200").with_overrides({"fetch_model": 0}), trace=trace, extrapolate=False)
    fetches = [t[0].split(".")[0] for t in trace if t[1].startswith("fetch") and t[1].endswith("mask")]
    blocks = [t[0].split()[0] for t in trace if t[1] == "load Q"]
    assert fetches and len(fetches) == len(set(fetches)) == len(set(blocks))
    assert len(blocks) > 2 * len(set(blocks))
