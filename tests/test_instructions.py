"""The lowering of tile ops to instructions matches the SASS of our kernels' inner loops, class by class.

The reference is the committed static SASS count (experiments/results/h200/probe/sass-counts.json): for each
kernel, the main loop is the innermost loop that issues tensor instructions (no other such loop inside it)
and, of those, the one with the most exponentials (the softmax of a K/V block; the others are a
persistent kernel's tile loop around its last P V product and epilogue). One iteration
without its skipped regions (the mask of blocks that cross the diagonal or the sequence end, the next
block's load) is what every unmasked K/V block issues; the lowering of the schedule's ops for one K/V block
must be within 10% of it in every class below.
"""

import json
import re
from collections import Counter
from pathlib import Path

import pytest
from flashsim.algorithms.ir import Gemm, Mask, OnlineSoftmax, Rescale, RowMax, SyncThreads, Wait
from flashsim.algorithms.mapping import Tiling
from flashsim.algorithms.problem import Problem
from flashsim.algorithms.schedules import v2, v3
from flashsim.simulator import instructions
from flashsim.simulator.instructions import chain_cycles, lower

COUNTS = Path(__file__).resolve().parents[1] / "experiments/results/h200/probe/sass-counts.json"
TOLERANCE = 0.10
# classes the lowering derives (integer and move instructions are the compiler's addressing and bookkeeping)
COMPARED = ("fp32", "fmnmx", "mufu", "shuffle", "convert", "fp32_compare", "hmma", "hgmma", "ldsm")
V2_NAME = re.compile(r"flashsim_v2_d(\d+)_(bf16|fp16)_(\d+)x(\d+)w(\d+)s2_fwd")
V3_NAME = re.compile(r"v3_(Bf16|Fp16)_d(\d+)_m(\d+)_n(\d+)_s2_c(\d)_p(\d)_o(\d)")


def _sass() -> dict:
    return json.loads(COUNTS.read_text())


def _main_loop(kernel: dict) -> Counter:
    """One unmasked iteration of the main loop."""
    loops = [lp for lp in kernel["loops"] if lp["classes"].get("hmma") or lp["classes"].get("hgmma")]
    innermost = [lp for lp in loops if not any(o is not lp and _inside(o, lp) for o in loops)]
    body = max(innermost, key=lambda lp: (lp["classes"].get("mufu", 0), -sum(lp["classes"].values())))
    counts = Counter(body["classes"])
    outer = [s for s in body["skips"] if not any(o is not s and _inside(s, o) for o in body["skips"])]
    for skip in outer:
        counts.subtract(skip["classes"])
    return counts


def _inside(inner: dict, outer: dict) -> bool:
    return int(outer["start"], 16) <= int(inner["start"], 16) and int(inner["end"], 16) <= int(outer["end"], 16)


def _one_block(program, opens, step: int = 1) -> Counter:
    """The lowered instructions of the ops of K/V block `step` of a program: from the op `opens` matches for
    the step-th time to the next such op."""
    counts: Counter = Counter()
    seen = -1
    for op in program:
        if opens(op):
            seen += 1
            if seen > step:
                break
        if seen == step and isinstance(op, (Gemm, OnlineSoftmax, Rescale, SyncThreads)):
            counts.update(lower(op))
    return counts


def _v2_block(d: int, dtype: str, bm: int, bn: int, warps: int, exp2: str = "approx") -> Counter:
    p = Problem(1, 1, 4 * max(bm, bn), d, dtype=dtype)
    schedule = v2.build(p, Tiling(bm, bn, warps, 2, exp2=exp2))
    program = schedule.kernels[0].roles[0].program((0, 0, 0))
    return _one_block(program, lambda op: isinstance(op, Wait) and op.barrier == "k")


def _v3_block(d: int, dtype: str, bm: int, bn: int, pingpong: bool, overlap: bool) -> Counter:
    """A causal kernel's unmasked blocks issue what a non-causal kernel's do, so a non-causal problem serves."""
    p = Problem(1, 1, 8 * max(bm, bn), d, dtype=dtype)
    schedule = v3.build(p, Tiling(bm, bn, 4 + 4 * (bm // 64), 2), pingpong=pingpong, intra_overlap=overlap)
    consumer = next(r for r in schedule.kernels[0].roles if r.name == "consumer0")
    program = consumer.program(schedule.kernels[0].ctas[0])
    return _one_block(program, lambda op: isinstance(op, Wait) and op.barrier.startswith("fullK"))


def _mismatches(lowered: Counter, sass: Counter) -> list[str]:
    out = []
    for cls in COMPARED:
        want, got = sass.get(cls, 0), lowered.get(cls, 0)
        if abs(got - want) > TOLERANCE * max(want, 1):
            out.append(f"{cls}: lowered {got:g}, SASS {want}")
    return out


def _v2_kernels():
    return sorted(k for k in _sass()["v2.sm_90a.cubin"] if V2_NAME.fullmatch(k))


def _v3_kernels():
    return sorted(k for k in _sass()["v3.sm_90a.cubin"] if V3_NAME.fullmatch(k))


def test_the_reference_covers_our_kernels():
    assert len(_v2_kernels()) >= 8 and len(_v3_kernels()) >= 8


@pytest.mark.parametrize("name", _v2_kernels())
def test_v2_block_matches_sass(name):
    d, dtype, bm, bn, warps = V2_NAME.fullmatch(name).groups()
    lowered = _v2_block(int(d), dtype, int(bm), int(bn), int(warps))
    sass = _main_loop(_sass()["v2.sm_90a.cubin"][name])
    assert not _mismatches(lowered, sass), name
    assert lowered["barrier"] == sass["barrier"] == 2  # two __syncthreads per K/V block


@pytest.mark.parametrize("name", _v3_kernels())
def test_v3_block_matches_sass(name):
    dtype, d, bm, bn, _causal, pingpong, overlap = V3_NAME.fullmatch(name).groups()
    lowered = _v3_block(int(d), dtype.lower(), int(bm), int(bn), pingpong == "1", overlap == "1")
    sass = _main_loop(_sass()["v3.sm_90a.cubin"][name])
    assert not _mismatches(lowered, sass), name


def test_a_wrong_lowering_is_caught():
    """The comparison is not vacuous: dropping the O rescale or the row-sum FADDs breaks it."""
    name = "flashsim_v2_d128_bf16_128x64w4s2_fwd"
    lowered = _v2_block(128, "bf16", 128, 64, 4)
    sass = _main_loop(_sass()["v2.sm_90a.cubin"][name])
    lowered["fp32"] -= 64
    assert _mismatches(lowered, sass) == [f"fp32: lowered {lowered['fp32']:g}, SASS {sass['fp32']}"]


def test_masked_tiles_add_compares_and_selects():
    base = dict(s="S", p="P", m="m", l="l", rows=128, cols=64, scale=0.1, p_dtype="bf16", acc="acc",
                acc_cols=128, warps=4)
    from flashsim.algorithms.ir import Mask

    plain = lower(OnlineSoftmax(**base, mask=None))
    masked = lower(OnlineSoftmax(**base, mask=Mask(0, 0, 128, 128, True)))
    per_thread = 128 * 64 // 128
    assert masked["int"] - plain["int"] == 2 * per_thread
    assert masked["select"] - plain["select"] == per_thread
    assert {k: v for k, v in masked.items() if k not in ("int", "select")} == {
        k: v for k, v in plain.items() if k not in ("int", "select")}


def test_chain_grows_with_the_row_and_its_latencies():
    op = OnlineSoftmax("S", "P", "m", "l", 128, 64, 0.1, None, "bf16", acc="acc", acc_cols=128, warps=4)
    wide = OnlineSoftmax("S", "P", "m", "l", 128, 128, 0.1, None, "bf16", acc="acc", acc_cols=128, warps=4)
    short = chain_cycles(op, 4.0, 18.0, 24.0)
    assert chain_cycles(wide, 4.0, 18.0, 24.0) - short == pytest.approx(2 * 8 * 4.0)  # 16 more per row, two chains
    assert chain_cycles(op, 4.0, 28.0, 24.0) - short == pytest.approx(10.0)  # one exp2 on the chain
    assert chain_cycles(op, 4.0, 18.0, 34.0) - short == pytest.approx(2 * 10.0)  # two shuffles
    assert instructions.per_pipe(lower(op))["mufu"] == 64 + 4


@pytest.mark.parametrize("masked", [False, True])
def test_a_row_max_taken_ahead_splits_the_softmax_without_changing_it(masked):
    """cuDNN's loop takes the row max (and the mask) before its turn and the rest of the softmax within it: the
    two ops issue the one op's instructions and ALU work between them, the first phase being the max's."""
    mask = Mask(0, 0, 100, 100, True) if masked else None
    whole = OnlineSoftmax("S", "P", "m", "l", 64, 128, 0.1, mask, "bf16", acc="acc", acc_cols=128, corr="c",
                          warps=4)
    ahead = RowMax("S", "m", "mx", 64, 128, 0.1, mask, warps=4)
    rest = OnlineSoftmax("S", "P", "m", "l", 64, 128, 0.1, None, "bf16", acc="acc", acc_cols=128, corr="c",
                         warps=4, max_in="mx")
    assert lower(ahead) + lower(rest) == lower(whole)
    assert lower(ahead)["fmnmx"] > 0 and "fmnmx" not in lower(rest) and "mufu" not in lower(ahead)
    assert ahead.alu_flops + rest.alu_flops == whole.alu_flops and rest.exps == whole.exps
    lat = (4.0, 18.0, 30.0)
    assert chain_cycles(ahead, *lat) + chain_cycles(rest, *lat) == pytest.approx(chain_cycles(whole, *lat))
    assert [name for _, name in instructions.lower_phases(rest)] == ["exp"]
    with pytest.raises(ValueError):
        OnlineSoftmax("S", "P", "m", "l", 64, 128, 0.1, mask or Mask(0, 0, 10, 10, True), "bf16", max_in="mx")
