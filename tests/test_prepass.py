"""v3-fp8's quantisation pre-pass as the kernel runs it: its launch, its instructions and their issue."""

import json
from pathlib import Path

import pytest
from flashsim.algorithms.ir import Quantize
from flashsim.algorithms.problem import Problem
from flashsim.algorithms.schedules import v3_fp8
from flashsim.algorithms.tiling import resolve_tiling
from flashsim.experiments import prepass_bookkeeping
from flashsim.hw_profiles.loader import load_profile
from flashsim.simulator.api import simulate
from flashsim.simulator.gpu import blocks_per_sm
from flashsim.simulator.instructions import hadamard_lane_stages, lower

SASS = Path(__file__).resolve().parents[1] / "experiments/results/h200/probe/sass-counts.json"


def test_chunks_per_thread_is_the_host_rule():
    from flashsim.kernels.fp8_prepass import chunks_per_thread

    for d in (64, 96, 128, 192, 256):
        for bm in (64, 128, 192):
            for bn in (64, 128, 160, 176, 224):
                want = chunks_per_thread(bm, bn, d)
                if want is not None:
                    assert v3_fp8.chunks_per_thread(bm, bn, d) == want, (bm, bn, d)


def test_bookkeeping_is_what_nsight_compute_counted():
    """The schedule's table is the experiment's solve of run 189's executed instructions."""
    derived = prepass_bookkeeping.table()
    assert derived.keys() == v3_fp8.BOOKKEEPING.keys()
    for key, value in derived.items():
        assert v3_fp8.BOOKKEEPING[key] == pytest.approx(value, abs=0.05), key


@pytest.mark.parametrize("d, chunks", [(128, 8), (64, 4)])
def test_lowering_matches_the_kernels_sass(d, chunks):
    """The lowered FP32 and shuffle instructions of a Q or K block against the cubin's code: the static counts,
    with the shuffle loop run once per lane stage, and the block's and cluster's reductions (5 SHFL each, in
    the first of a thread block's 8 warps) averaged over the warps."""
    sass = json.loads(SASS.read_text())["v3-fp8.sm_90a.cubin"][f"fp8_prepass_Bf16_k2_c{chunks}"]
    stages = hadamard_lane_stages(d)
    loop = next(lp["classes"] for lp in sass["loops"] if lp["classes"].get("shuffle"))
    dynamic = {cls: sass["classes"][cls] + (stages - 1) * loop.get(cls, 0) for cls in ("fp32", "shuffle")}
    dynamic["shuffle"] -= 2 * 5 * (1 - 1 / 8)
    lowered = lower(Quantize("x", "xq", "s", 64, d, 16, v3_fp8.HADAMARD_SEED, chunks, 0.0))
    for cls, n in dynamic.items():
        assert lowered[cls] == pytest.approx(n, rel=0.10), cls


def test_a_cta_is_the_cluster_with_the_kernels_registers():
    profile = load_profile("h200")
    for d, want in ((128, 1), (64, 2)):  # 114 registers: one cluster of 2 x 256 threads an SM; 64: two
        p = Problem(batch=1, heads=16, seqlen_q=4096, seqlen_k=4096, headdim=d, dtype="fp8")
        t = resolve_tiling("v3-fp8", p, profile)
        prepass = v3_fp8.build(p, t).kernels[0]
        assert prepass.threads == v3_fp8.CLUSTER * 256
        assert blocks_per_sm(prepass, profile) == want


def test_the_prepass_is_issued_as_instructions_whatever_the_elementwise_rule():
    """The pre-pass's code is SIMT code: the dependent-stream rule of wgmma schedules does not pace it, so its
    time is the same under either issue model, and it grows with the instructions it issues."""
    p = Problem(batch=2, heads=8, seqlen_q=2048, seqlen_k=2048, headdim=128, dtype="fp8")
    base = load_profile("h200")

    def prepass_cycles(profile) -> int:
        return simulate("v3-fp8", p, profile).kernels[0]["cycles"]

    stream = prepass_cycles(base.with_overrides({"issue_model": 0}))
    issued = prepass_cycles(base.with_overrides({"issue_model": 1}))
    assert stream == issued
    table = dict(v3_fp8.BOOKKEEPING)
    try:
        for key in table:
            v3_fp8.BOOKKEEPING[key] = 2 * table[key]
        more = prepass_cycles(base)
    finally:
        v3_fp8.BOOKKEEPING.update(table)
    assert more > 1.3 * issued


def test_simulate_says_what_each_kernel_of_the_call_takes(capsys, monkeypatch):
    import re

    from flashsim import cli

    monkeypatch.setenv("COLUMNS", "200")
    args = ["simulate", "--hw", "h200", "--algo", "v3-fp8", "--batch", "1", "--heads", "4", "--seqlen", "1024"]
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    shares = [int(m) for m in re.findall(r"at \d\.\d\d GHz \((\d+)% of the kernels\)", out)]
    assert len(shares) == 2 and "kernel fp8_prepass" in out
    assert abs(sum(shares) - 100) <= 1
