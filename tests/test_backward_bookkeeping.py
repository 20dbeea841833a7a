"""The backward kernels' bookkeeping (algorithms/schedules/backward_code.py BOOKKEEPING, counted from Nsight
Compute's executed counts by experiments/bookkeeping.py) and FA2's exponential in the backward: the lowered
tile ops of one pass of the loop over Q blocks plus the table's bookkeeping make what the kernels issued."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from flashsim.algorithms import Problem, Tiling
from flashsim.algorithms.ir import Code, Gemm, LseExp
from flashsim.algorithms.schedules import build
from flashsim.algorithms.schedules.backward_code import BOOKKEEPING
from flashsim.experiments import bookkeeping
from flashsim.experiments.fa2_mix import HOT, executed
from flashsim.experiments.sass_counts import CLASSES
from flashsim.hw_profiles.loader import load_profile
from flashsim.simulator.api import simulate
from flashsim.simulator.instructions import exp2f_issue, lower, lower_gemm, total

RESULTS = Path(__file__).resolve().parents[1] / "experiments" / "results" / "h200" / "session24" / "bwd-bookkeeping"
IMPL = {"flashsim": "ours", "fa2": "sdpa-flash"}
H200 = load_profile("h200")


def _source(key) -> Path:
    kernel, d = key[:2]
    return RESULTS / f"ncu-{IMPL[kernel]}-d{d}-n4096-c0-sass.txt.gz"


def _tiling(key) -> Tiling:
    kernel, _, bm, bn, warps = key
    return Tiling(bm, bn, warps, 2, exp2="exp2f" if kernel == "fa2" else "approx")


def _main_program(p: Problem, t: Tiling, **options) -> list:
    kernel = next(k for k in build("v2-bwd", p, t, **options).kernels if k.name == "flash_bwd_v2")
    return list(kernel.roles[0].program(kernel.ctas[0]))


@pytest.mark.parametrize("key", sorted(BOOKKEEPING))
def test_the_table_is_what_the_committed_counts_say(key):
    row = bookkeeping.stretches(_source(key))
    assert row["tile"] == list(key[2:]) and row["headdim"] == key[1] and not row["causal"]
    assert BOOKKEEPING[key] == pytest.approx((row["prologue"], row["loop"], row["epilogue"]), abs=0.05)


@pytest.mark.parametrize("key", sorted(BOOKKEEPING))
def test_the_lowering_and_the_bookkeeping_make_the_loop(key):
    name, instrs = executed(_source(key))
    top = max(count for *_, count in instrs)
    seen: Counter = Counter()
    for op, _, count in instrs:
        if count >= HOT * top:
            seen[CLASSES.get(op, "other")] += count / top
    program = _main_program(Problem(1, 1, 4096, key[1]), _tiling(key), bookkeeping=True)
    loops = [i for i, op in enumerate(program) if isinstance(op, Code) and op.name.endswith("loop")]
    one_pass = program[loops[1]:loops[2]]
    lowered: Counter = Counter()
    for op in one_pass:
        lowered.update(lower_gemm(op) if isinstance(op, Gemm) else lower(op))
    # the tensor-core work, its fragments, the exponentials and the packing, class by class
    for cls in ("hmma", "ldsm", "mufu", "convert"):
        assert lowered[cls] == pytest.approx(seen[cls], rel=0.01), cls
    assert lowered["fp32"] == pytest.approx(seen["fp32"], rel=0.05)
    # FA2's exp2f: a range test per exponential (ours has none of them in its loop's arithmetic)
    assert lowered["fp32_compare"] == pytest.approx(seen["fp32_compare"], abs=4)
    issued = sum(seen.values())
    assert total(lowered) + BOOKKEEPING[key][1] == pytest.approx(issued, rel=0.03)
    assert BOOKKEEPING[key][1] > 0.2 * issued  # what the lowering leaves out is no rounding error


def test_only_fa2s_form_adds_the_range_tests():
    p = Problem(1, 1, 1024, 128)
    ours, fa2 = (next(op for op in _main_program(p, Tiling(64, 128, 8, 2, exp2=e)) if isinstance(op, LseExp))
                 for e in ("approx", "exp2f"))
    assert exp2f_issue(ours) == 0 and ours.exp2_ops == 0
    per_thread = 64 * 128 / 256
    assert exp2f_issue(fa2) == pytest.approx(4 * per_thread)  # an FMUL per element, FSETP and two FMULs per exp
    assert fa2.alu_flops - ours.alu_flops == 3 * 64 * 128


def test_the_stretches_carry_it_only_when_asked():
    p, t = Problem(1, 1, 1024, 128), Tiling(64, 128, 8, 2)
    assert not [op for op in _main_program(p, t) if isinstance(op, Code)]
    carried = [op.issue for op in _main_program(p, t, bookkeeping=True) if isinstance(op, Code)]
    assert carried == [370.0, *[366.6] * 16, 182.0]  # 1024 queries in 64-row blocks: 16 passes
    # a kernel not measured carries none
    assert not [op for op in _main_program(p, Tiling(64, 64, 8, 2), bookkeeping=True) if isinstance(op, Code)]


def test_only_the_issue_model_charges_them():
    p, t = Problem(1, 4, 1024, 128), Tiling(64, 128, 8, 2)
    issue = H200.with_overrides({"issue_model": 1})
    assert simulate("v2-bwd", p, H200, t, options={"bookkeeping": True}).cycles == \
        simulate("v2-bwd", p, H200, t).cycles
    without = simulate("v2-bwd", p, issue, t, options={"bookkeeping": False}).cycles
    assert simulate("v2-bwd", p, issue, t).cycles > without
