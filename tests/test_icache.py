"""Instruction fetch (simulator/icache.py): code an SM lacks costs the profile's cycles per 128-byte line, once
for a loop body the SM keeps and on every pass for one it cannot; the decode schedule names its code."""

from __future__ import annotations

import math

import pytest
from flashsim.algorithms.ir import RMEM, Code, Gemm, Kernel, Role
from flashsim.algorithms.problem import Problem
from flashsim.algorithms.schedules import decode
from flashsim.algorithms.tiling import Tiling
from flashsim.hw_profiles import load_profile
from flashsim.simulator.gpu import Gpu
from flashsim.simulator.icache import CODE_LINE_BYTES, CodeCache

H200 = load_profile("h200")
KEPT = H200.icache_bytes_per_sm
MISS = H200.icache_miss_cycles_per_line


def _cycles(stretches, passes: int = 1, branches: float = 0.0, far: float = 0.0) -> int:
    """One block of 4 warps on an idle H200 SM running a small GEMM after each stretch of code, `passes`
    times (a loop whose body is the stretches), each stretch with `branches` taken branches, `far` of them
    landing beyond the next line."""

    def program(cta):
        for _ in range(passes):
            for name, nbytes in stretches:
                yield Code(name, nbytes, branches, far)
                yield Gemm("acc", "a", "b", 64, 64, 64, RMEM, RMEM, "mma_sync", "bf16", 4, trans_b=True)

    kernel = Kernel("code", [(0, 0, 0)], (Role("warps", 4, program),), 0, 32)
    gpu = Gpu(H200, 1)
    cycles, _, _ = gpu.run_kernel(kernel, lambda: {}, extrapolate=False)
    return cycles


def _lines(nbytes: int) -> float:
    return math.ceil(nbytes / CODE_LINE_BYTES) * MISS


def test_a_short_launch_of_more_code_costs_its_lines():
    base = _cycles([])
    small, large = _cycles([("a", 4096)]), _cycles([("a", 16384)])
    assert small - base == pytest.approx(_lines(4096), abs=2)
    assert large - base == pytest.approx(_lines(16384), abs=2)


def test_a_loop_body_the_sm_keeps_is_fetched_once():
    body = KEPT // 2
    once, many = _cycles([("body", body)]), _cycles([("body", body)], passes=8)
    plain_once, plain_many = _cycles([("body", 0)]), _cycles([("body", 0)], passes=8)
    assert once - plain_once == pytest.approx(_lines(body), abs=2)
    assert many - plain_many == pytest.approx(_lines(body), abs=2)  # the 7 later passes find it there


def test_a_loop_body_larger_than_the_cache_is_fetched_every_pass():
    body = 2 * KEPT
    many, plain = _cycles([("body", body)], passes=4), _cycles([("body", 0)], passes=4)
    assert many - plain == pytest.approx(4 * _lines(body), abs=4)


def test_taken_branches_cost_their_redirects_on_every_pass():
    """Kept or not, each pass of a stretch pays its taken branches' fetch redirects."""
    per = H200.icache_branch_cycles
    assert per > 0
    body = KEPT // 2
    plain = _cycles([("body", body)], passes=8)
    branchy = _cycles([("body", body)], passes=8, branches=10)
    assert branchy - plain == pytest.approx(8 * math.ceil(10 * per), abs=4)
    # far ones also fetch their target line
    far = _cycles([("body", body)], passes=8, branches=10, far=4)
    assert far - plain == pytest.approx(8 * math.ceil(10 * per + 4 * MISS), abs=4)
    # no code to fetch, only branches: the same on every pass
    assert _cycles([("b", 0)], passes=3, branches=4) - _cycles([("b", 0)], passes=3) == pytest.approx(
        3 * math.ceil(4 * per), abs=3
    )


def test_our_combine_names_its_code_and_fa2s_does_not():
    from flashsim.algorithms.splitkv import OUR_COMBINE_CODE, combine_kernel

    p = Problem(batch=1, heads=32, kv_heads=4, seqlen_q=1, seqlen_k=1024, headdim=128)

    def code_ops(ours: bool) -> list:
        kernel = combine_kernel(p, 8, ours=ours)
        return [op for op in kernel.roles[0].program(kernel.ctas[0]) if isinstance(op, Code)]

    (ours,) = code_ops(True)
    assert (ours.nbytes, ours.branches, ours.far) == OUR_COMBINE_CODE
    assert code_ops(False) == []
    # a combine after the split kernel runs longer by its fetch: its lines and its branches
    gpu_with, gpu_without = Gpu(H200, 1), Gpu(H200, 1)
    kernel = combine_kernel(p, 8, ours=True)
    plain = Kernel(
        kernel.name,
        kernel.ctas[:1],
        (Role("warps", 4, lambda c: (op for op in kernel.roles[0].program(c) if not isinstance(op, Code))),),
        0,
        64,
    )
    one = Kernel(kernel.name, kernel.ctas[:1], kernel.roles, 0, 64)
    with_code = gpu_with.run_kernel(one, lambda: {}, extrapolate=False)[0]
    without = gpu_without.run_kernel(plain, lambda: {}, extrapolate=False)[0]
    nbytes, branches, far = OUR_COMBINE_CODE
    expected = _lines(nbytes) + branches * H200.icache_branch_cycles + far * MISS
    assert with_code - without == pytest.approx(expected, abs=3)


def test_stretches_that_together_overflow_the_cache_evict_each_other():
    cache = CodeCache(KEPT, MISS)
    half = KEPT // 2 + CODE_LINE_BYTES  # two of them do not fit
    assert cache.fetch("a", half, 0) == pytest.approx(_lines(half), abs=1)
    assert cache.fetch("a", half, 5000) == 5000  # kept
    cache.fetch("b", half, 6000)  # evicts a, the least recently run
    assert cache.fetch("a", half, 9000) > 9000
    assert CodeCache(KEPT, 0.0).fetch("a", half, 5) == 5  # a profile without the mechanism


def test_warps_reaching_a_stretch_another_block_is_fetching_wait_for_it():
    cache = CodeCache(KEPT, MISS)
    ready = cache.fetch("a", 8192, 0)
    assert cache.fetch("a", 8192, 10) == ready


def test_the_decode_schedule_names_its_code_and_a_longer_split_runs_more_of_it():
    p = Problem(batch=1, heads=32, kv_heads=4, seqlen_q=1, seqlen_k=1024, headdim=128)
    t = decode.kernel_tiling(128)

    def stretches(splits: int) -> list[str]:
        kernel = decode.build(p, Tiling(t.block_m, t.block_n, t.warps, t.stages, splits=splits)).kernels[0]
        return [op.name for op in kernel.roles[0].program(kernel.ctas[0]) if isinstance(op, Code)]

    short, long_ = stretches(8), stretches(1)  # 2 and 16 K/V blocks per thread block
    assert short == ["decode d128 prologue", "decode d128 step", "decode d128 step", "decode d128 epilogue"]
    kernel = decode.build(p, Tiling(t.block_m, t.block_n, t.warps, t.stages, splits=1)).kernels[0]
    ops = [op for op in kernel.roles[0].program(kernel.ctas[0]) if isinstance(op, Code)]
    # the prologue's once, a step's 16 times, a refill's 14 times (decode.CODE_BRANCHES)
    counts = decode.CODE_BRANCHES
    for k, field in enumerate(("branches", "far")):
        taken = sum(getattr(op, field) for op in ops)
        assert taken == counts["prologue"][k] + 16 * counts["step"][k] + 14 * counts["refill"][k] > 0
    assert long_.count("decode d128 step") == 16 and long_.count("decode d128 refill") == 14
