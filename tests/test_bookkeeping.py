"""The compiler's bookkeeping in the issue model: the stretches of the mma.sync forward kernels carry the warp
instructions the lowering leaves out (algorithms/schedules/forward_code.py BOOKKEEPING, counted from Nsight
Compute's executed counts by experiments/bookkeeping.py), which only issue_model 1 charges."""

from __future__ import annotations

from pathlib import Path

import pytest
from flashsim.algorithms import Problem, Tiling, catalog
from flashsim.algorithms.ir import Code, Gemm, OnlineSoftmax, SyncThreads
from flashsim.algorithms.schedules import build
from flashsim.algorithms.schedules.forward_code import BOOKKEEPING
from flashsim.experiments import bookkeeping
from flashsim.experiments.fa2_mix import mix
from flashsim.hw_profiles.loader import load_profile
from flashsim.simulator.api import issue_model_for, schedule_options, simulate
from flashsim.simulator.instructions import lower, lower_gemm, total

RESULTS = Path(__file__).resolve().parents[1] / "experiments" / "results" / "h200"
# without the fetch at the warps' front, which asks for the code and its bookkeeping whatever the issue model
H200 = load_profile("h200").with_overrides({"fetch_model": 0})
ISSUE = H200.with_overrides({"issue_model": 1})
DEPENDENT = H200.with_overrides({"issue_model": 0})  # the dependent stream, which charges no bookkeeping
PROBLEM = Problem(2, 8, 1024, 128)
OURS_D128 = Tiling(128, 64, 4)
SOURCES = {
    ("flashsim", 64, 128, 128, 4): "fa2-sass/ncu-v2-d64-n4096-c0-sass.txt.gz",
    ("flashsim", 96, 128, 64, 4): "session16/v2-d96/ncu-v2-d96-n4096-c0-sass.txt.gz",
    ("flashsim", 128, 128, 64, 4): "fa2-sass/ncu-v2-d128-n4096-c0-sass.txt.gz",
    ("flashsim", 256, 64, 64, 4): "session16/d256-ncu/ncu-v2-d256-n4096-c0-sass.txt.gz",
    ("fa2", 64, 128, 128, 4): "fa2-sass/ncu-sdpa-flash-d64-n4096-c0-sass.txt.gz",
    ("fa2", 96, 128, 64, 4): "session20/fa2-d96/ncu-sdpa-flash-d96-n4096-c0-sass.txt.gz",
    ("fa2", 128, 128, 64, 4): "fa2-sass/ncu-sdpa-flash-d128-n4096-c0-sass.txt.gz",
    ("fa2", 256, 64, 64, 4): "session16/d256-ncu/ncu-sdpa-flash-d256-n4096-c0-sass.txt.gz",
}


@pytest.mark.parametrize("key", sorted(BOOKKEEPING))
def test_the_table_is_what_the_committed_counts_say(key):
    row = bookkeeping.stretches(RESULTS / SOURCES[key])
    assert row["tile"] == list(key[2:]) and row["headdim"] == key[1]
    assert BOOKKEEPING[key] == pytest.approx((row["prologue"], row["loop"], row["epilogue"]), abs=0.05)


# our d96: its loop's count is split
@pytest.mark.parametrize("key", sorted(k for k in BOOKKEEPING if k[:2] != ("flashsim", 96)))
def test_the_lowering_and_the_bookkeeping_make_the_loop(key):
    # one unmasked K/V pass, per warp, from the schedule's own ops between two loop stretches: the lowered tile
    # ops plus the table's bookkeeping come to what Nsight Compute saw the kernel's loop issue
    kernel, d, bm, bn, warps = key
    tiling = Tiling(bm, bn, warps, exp2="exp2f" if kernel == "fa2" else "approx")
    block = build("v2", Problem(1, 1, 4096, d), tiling, bookkeeping=True).kernels[0]
    program = list(block.roles[0].program(block.ctas[0]))
    loops = [i for i, op in enumerate(program) if isinstance(op, Code) and op.name.endswith("loop")]
    one_pass = program[loops[1] : loops[2]]
    lowered = sum(total(lower_gemm(op)) for op in one_pass if isinstance(op, Gemm))
    lowered += sum(total(lower(op)) for op in one_pass if isinstance(op, (OnlineSoftmax, SyncThreads)))
    issued = sum(mix(RESULTS / SOURCES[key])["loop_iteration"].values())
    assert lowered + BOOKKEEPING[key][1] == pytest.approx(issued, rel=0.01)
    assert BOOKKEEPING[key][1] > 0.04 * issued  # what the lowering leaves out is no rounding error


def test_the_stretches_carry_it_only_when_asked():
    def stretches(**options) -> list[Code]:
        kernel = build("v2", PROBLEM, OURS_D128, **options).kernels[0]
        return [op for op in kernel.roles[0].program(kernel.ctas[0]) if isinstance(op, Code)]

    assert stretches() == []
    carried = stretches(bookkeeping=True)
    assert [op.issue for op in carried] == [393.0, *[278.8] * 16, 697.0]  # 1024 keys in 64-key blocks: 16 K/V steps
    assert {op.warps for op in carried} == {4} and not any(op.nbytes for op in carried)  # no lines: not fetched
    both = stretches(bookkeeping=True, code=True)
    assert all(op.nbytes for op in both) and [op.issue for op in both] == [op.issue for op in carried]


def test_simulate_asks_for_them_with_the_issue_model():
    assert schedule_options(DEPENDENT) == {}
    assert schedule_options(ISSUE) == {"bookkeeping": True}
    assert schedule_options(H200.with_overrides({"issue_model": 2})) == {"bookkeeping": True}
    assert schedule_options(DEPENDENT.with_overrides({"fetch_model": 1})) == {"code": True}
    assert schedule_options(load_profile("h200")) == {"code": True, "bookkeeping": True}  # fetch_model 2


def test_the_wgmma_kernels_build_none_for_the_fetch_at_the_front():
    """Their stretches name no lines, so under fetch_model 2 their bookkeeping would only cost the build; the
    timing is the same without it."""
    h200 = load_profile("h200")
    v2, v3 = catalog.get("v2"), catalog.get("v3")
    assert schedule_options(issue_model_for(v2, h200), v2) == {"code": True, "bookkeeping": True}
    assert schedule_options(issue_model_for(v3, h200), v3) == {"code": True}
    problem, tiles = Problem(1, 4, 1024, 128, causal=True), Tiling(128, 176, 12, stages=2)
    kernel = build("v3", problem, tiles, bookkeeping=True).kernels[0]
    assert any(isinstance(op, Code) and op.issue for op in kernel.roles[1].program(kernel.ctas[0]))
    built = simulate("v3", problem, h200, tiles, sms=None).cycles
    assert simulate("v3", problem, h200, tiles, sms=None, options={"bookkeeping": True}).cycles == built


def test_only_the_issue_model_charges_them_and_it_takes_longer():
    default = simulate("v2", PROBLEM, DEPENDENT, OURS_D128).cycles
    plain = simulate("v2", PROBLEM, DEPENDENT, OURS_D128, options={"bookkeeping": True}).cycles
    assert plain == default  # the dependent stream's pacing stands for them
    without = simulate("v2", PROBLEM, ISSUE, OURS_D128, options={"bookkeeping": False}).cycles
    charged = simulate("v2", PROBLEM, ISSUE, OURS_D128).cycles
    # at least the schedulers' time for one block's extra instructions per SM, at most all of them in series
    per_block = 393.0 + 16 * 278.8 + 697.0
    assert without + per_block / 4 < charged < without + 2 * per_block * 2


def test_the_command_line_refuses_a_bad_file(capsys):
    assert bookkeeping.main(["no-such-ncu-sass.txt"]) == 2
    assert "no such file" in capsys.readouterr().err
