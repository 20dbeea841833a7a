"""SDPA's flash kernel (FA2 as PyTorch builds it) computes the softmax's exponential its own way (exp2f, the
exponent unfused: ir.EXP2_FORMS), and the model issues what that code issues.

The reference is FA2's sm_90 SASS taken from PyTorch's library (experiments/results/h200/fa2-sass/): the
main loop of each kernel the dispatcher runs on the development set (traits <128, 128, 64, 4> at d128 and
<64, 128, 128, 4> at d64, bf16, with or without the causal mask and the even-length shortcut) must be within
10% of the v2 schedule's lowering of one K/V block with exp2="exp2f", class by class.
"""

import json
import re
from pathlib import Path

import pytest
from flashsim.algorithms.ir import OnlineSoftmax
from flashsim.algorithms.mapping import Tiling
from flashsim.algorithms.problem import Problem
from flashsim.errors import FlashsimError
from flashsim.hw_profiles import load_profile
from flashsim.simulator import simulate
from flashsim.simulator.instructions import exp2f_issue, lower

from .test_instructions import _main_loop, _mismatches, _v2_block

FA2 = Path(__file__).resolve().parents[1] / "experiments/results/h200/fa2-sass"
TRAITS = re.compile(r"Flash_fwd_kernel_traitsILi(\d+)ELi(\d+)ELi(\d+)ELi(\d+)ELb0ELb0EN7cutlass10bfloat16_tE")
# the kernel's bools after its traits: dropout, causal, local, alibi, even_MN, even_K, softcap, return_softmax
FLAGS = re.compile(r"S3_EE((?:Lb[01]E){8})")
DISPATCHED = {128: (128, 64, 4), 64: (128, 128, 4)}  # FA2's sm80 path on sm_90, no dropout: d -> tile


def _dispatched() -> list[tuple[str, str]]:
    out = []
    for cubin, kernels in json.loads((FA2 / "fa2-sass-counts.json").read_text()).items():
        for name in kernels:
            t, f = TRAITS.search(name), FLAGS.search(name)
            if not (t and f):
                continue
            d, bm, bn, warps = map(int, t.groups())
            dropout, _causal, local, alibi, _even_mn, even_k, softcap, ret = re.findall(r"Lb([01])E", f.group(1))
            if (
                DISPATCHED.get(d) == (bm, bn, warps)
                and even_k == "1"
                and "1" not in (dropout, local, alibi, softcap, ret)
            ):
                out.append((cubin, name))
    return sorted(out)


def _kernel(cubin: str, name: str) -> dict:
    return json.loads((FA2 / "fa2-sass-counts.json").read_text())[cubin][name]


def test_the_reference_holds_the_dispatched_kernels():
    assert len(_dispatched()) == 8  # d64 and d128, causal or not, even lengths or not


@pytest.mark.parametrize(("cubin", "name"), _dispatched())
def test_fa2_block_matches_its_sass(cubin, name):
    d, bm, bn, warps = map(int, TRAITS.search(name).groups())
    sass = _main_loop(_kernel(cubin, name))
    lowered = _v2_block(d, "bf16", bm, bn, warps, exp2="exp2f")
    assert not _mismatches(lowered, sass), name
    # our own code's form does not match FA2's loop: the comparison can fail
    assert _mismatches(_v2_block(d, "bf16", bm, bn, warps), sass)


def test_every_fa2_forward_kernel_computes_exp2f():
    """The form is FA2's softmax code, not one kernel's: all 272 forward kernels of the library (head dims
    32-256, every switch) test each exponential's argument (an FSETP per MUFU in the main loop), which is
    what lets SDPA flash take exp2f at every head dim."""
    kernels = [k for ks in json.loads((FA2 / "fa2-sass-counts.json").read_text()).values() for k in ks.values()]
    loops = [_main_loop(k) for k in kernels]
    assert len(loops) == 272
    assert all(0 < loop["mufu"] <= loop["fp32_compare"] for loop in loops)


def test_exp2f_adds_one_fp32_per_element_and_three_per_exponential():
    base = dict(
        s="S",
        p="P",
        m="m",
        l="l",
        rows=128,
        cols=64,
        scale=0.1,
        mask=None,
        p_dtype="bf16",
        acc="acc",
        acc_cols=128,
        warps=4,
    )
    ours, fa2 = lower(OnlineSoftmax(**base)), lower(OnlineSoftmax(**base, exp2="exp2f"))
    e, exps = 128 * 64 / 128, 128 * 64 / 128 + 4  # per thread: its elements, and one more exp per row it holds
    assert fa2["fp32"] - ours["fp32"] == e + 2 * exps
    assert fa2["fp32_compare"] - ours["fp32_compare"] == exps
    assert exp2f_issue(OnlineSoftmax(**base, exp2="exp2f")) == e + 3 * exps
    assert exp2f_issue(OnlineSoftmax(**base)) == 0


def test_an_unknown_form_is_refused():
    with pytest.raises(FlashsimError, match="exp2"):
        Tiling(128, 64, 4, exp2="fast")


def _exp2f_added(issue_model: int) -> tuple[float, float]:
    """(cycles exp2f adds to a softmax-heavy problem, its extra instructions per warp over the K/V loop). The two
    forms run different kernels' code (FA2's and ours), whose prologue and epilogue bookkeeping differ: issued at
    their dependencies' pace those stretches' difference would swamp the exp2f instructions, so here every
    bookkeeping instruction issues in one cycle, and neither kernel's code is fetched (their sizes differ too)."""
    profile = load_profile("h200").with_overrides([f"issue_model={issue_model}", "bookkeeping_issue_cycles=1",
                                                   "fetch_model=0"])
    prob = Problem(1, 33, 512, 64, dtype="bf16")  # 132 blocks of 128 rows: one per SM, four K/V tiles each
    cycles = {
        form: simulate("v2", prob, profile, Tiling(128, 128, 4, exp2=form)).cycles for form in ("approx", "exp2f")
    }
    extra = exp2f_issue(
        OnlineSoftmax("S", "P", "m", "l", 128, 128, 0.1, None, "bf16", acc="acc", acc_cols=64, warps=4, exp2="exp2f")
    )
    return cycles["exp2f"] - cycles["approx"], 512 // 128 * extra


def test_exp2f_costs_issue_slots_not_a_dependent_chain():
    """Beside the dependent stream (issue_model 0) the extra instructions slow a softmax-heavy problem by their
    issue cycles on the warps' schedulers: at least those cycles, well under what the stream would charge."""
    added, issued = _exp2f_added(0)
    assert issued * 0.9 <= added <= issued * 2 < issued * load_profile("h200").fp32_dependent_issue_cycles


def test_exp2f_fills_issue_slots_the_chains_leave_idle():
    """The instruction-issue model (the shipped form for mma.sync schedules) issues them in the cycles the
    rows' dependent chains leave idle with one warp per scheduler: they cost something, less than their count."""
    added, issued = _exp2f_added(2)
    assert 0 < added < issued
