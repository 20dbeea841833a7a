"""The instruction-fetch models (simulator/icache.py). fetch_model 1: code the SM lacks streams in through its
fetch while the warps run it (CodeCache.stream), and the forward kernels' stretches
(algorithms/schedules/forward_code.py) are fetched; 2 (the GH100 profiles' default) fetches them where the warps
reach them; with 0 those stretches cost nothing."""

from __future__ import annotations

import pytest
from flashsim.algorithms import Problem, Tiling
from flashsim.algorithms.ir import Code
from flashsim.algorithms.schedules import build
from flashsim.hw_profiles.loader import load_profile
from flashsim.simulator.api import simulate
from flashsim.simulator.icache import CODE_LINE_BYTES, CodeCache

H200_DEFAULT = load_profile("h200")
H200 = H200_DEFAULT.with_overrides({"fetch_model": 0})  # the forward kernels' code costs nothing
FA2_D64 = Tiling(128, 128, 4, exp2="exp2f")  # SDPA flash's kernel at d64 (exp2f: its compiled exponential)
CAUSAL = Problem(4, 8, 512, 64, causal=True)


def test_stream_queues_the_lines_a_stretch_lacks_behind_the_sms_earlier_fetches():
    cache = CodeCache(32768, 8.1)
    assert cache.stream("a", 10 * CODE_LINE_BYTES, 0, 16.4) == 164  # ten lines, one every 16.4 cycles
    assert cache.stream("b", 10 * CODE_LINE_BYTES, 0, 16.4) == 328  # queued behind a's
    assert cache.stream("a", 10 * CODE_LINE_BYTES, 400, 16.4) == 400  # kept
    assert cache.stream("b", 10 * CODE_LINE_BYTES, 100, 16.4) == 328  # kept, still coming: shared


def test_stream_evicts_only_the_lines_it_needs_least_recently_run_first():
    cache = CodeCache(10 * CODE_LINE_BYTES, 8.1)
    cache.stream("a", 6 * CODE_LINE_BYTES, 0, 10.0)
    cache.stream("b", 6 * CODE_LINE_BYTES, 0, 10.0)  # two of a's six lines make room
    assert cache.held == 10 * CODE_LINE_BYTES and cache.kept["a"][0] == 4 * CODE_LINE_BYTES
    assert cache.stream("a", 6 * CODE_LINE_BYTES, 1000, 10.0) == 1020  # a fetches its two lines again


def test_the_v2_schedule_names_the_code_of_the_kernels_it_knows():
    def stretches(tiling: Tiling, problem: Problem) -> list[str]:
        kernel = build("v2", problem, tiling, code=True).kernels[0]
        last = max(kernel.ctas, key=lambda c: c[2])  # the last Q block, wherever its grid launches it
        return [op.name for op in kernel.roles[0].program(last) if isinstance(op, Code)]

    fa2 = stretches(FA2_D64, CAUSAL)  # the last Q block: 4 K/V steps, the first in FA2's peeled prologue
    assert fa2 == ["fa2 d64 128x128w4 causal prologue", *["fa2 d64 128x128w4 causal loop"] * 3,
                   "fa2 d64 128x128w4 causal epilogue"]
    ours = stretches(Tiling(128, 128, 4), CAUSAL)
    assert ours[0].startswith("flashsim d64") and ours.count(ours[1]) == 4
    # a kernel whose code is not known runs as if it were always there, but for its mask (forward_code.MASK)
    assert [s for s in stretches(Tiling(64, 64, 4), CAUSAL) if not s.endswith(" mask")] == []
    kernel = build("v2", CAUSAL, FA2_D64).kernels[0]  # not asked for (fetch_model 0): no stretches
    assert not [op for op in kernel.roles[0].program(kernel.ctas[-1]) if isinstance(op, Code)]


def test_streamed_code_costs_nothing_without_a_fetch_model_and_waits_when_its_lines_come_slower():
    default = simulate("v2", CAUSAL, H200, FA2_D64).cycles
    streamed = simulate("v2", CAUSAL, H200.with_overrides({"fetch_model": 1}), FA2_D64).cycles
    free = simulate("v2", CAUSAL, H200.with_overrides({"fetch_model": 1, "icache_fetch_cycles_per_line": 0}),
                    FA2_D64).cycles
    assert free == default < streamed


def test_fetch_model_takes_0_1_or_2():
    with pytest.raises(Exception, match="fetch_model"):
        H200.with_overrides({"fetch_model": 3})


def test_front_says_what_a_stretch_lacks_and_queue_brings_it_behind_earlier_fetches():
    cache = CodeCache(10 * CODE_LINE_BYTES, 8.1)
    assert cache.front("a", 6 * CODE_LINE_BYTES, 0) == 6
    assert cache.front("b", 6 * CODE_LINE_BYTES, 0) == 6  # two of a's six lines make room
    assert cache.front("a", 6 * CODE_LINE_BYTES, 50) == 2  # a lacks the two it lost
    assert cache.queue(10, 0, 16.4) == 164
    assert cache.queue(10, 100, 16.4) == 328  # behind the first ten
    assert cache.queue(1, 1000, 16.4) == 1017  # an idle fetch starts when asked


def test_fetch_at_the_front_charges_the_ops_that_issue_faster_than_their_lines_come():
    front = H200.with_overrides({"fetch_model": 2})
    default = simulate("v2", CAUSAL, H200, FA2_D64).cycles
    charged = simulate("v2", CAUSAL, front, FA2_D64).cycles
    free = simulate("v2", CAUSAL, front.with_overrides({"icache_fetch_cycles_per_line": 0}), FA2_D64).cycles
    streamed = simulate("v2", CAUSAL, H200.with_overrides({"fetch_model": 1}), FA2_D64).cycles
    assert free <= default < streamed < charged  # FA2's causal blocks run different stretches on one SM
    # the non-causal launch's blocks on an SM run the same stretches and keep its loop: they pay less
    full = Problem(4, 8, 512, 64)
    ratio = simulate("v2", full, front, FA2_D64).cycles / simulate("v2", full, H200, FA2_D64).cycles
    assert 1 < ratio < charged / default


def test_the_gh100_profiles_fetch_at_the_front_and_the_a100_fetches_nothing():
    assert H200_DEFAULT.fetch_model == load_profile("h100").fetch_model == 2
    assert load_profile("a100").fetch_model == 0


def test_fetch_at_the_front_leaves_the_decode_kernels_fetch_as_it_was():
    from flashsim.algorithms.tiling import resolve_tiling

    step = Problem(8, 32, 1, 128, seqlen_k=4096, kv_heads=8)
    tiling = resolve_tiling("decode", step, H200)
    before = simulate("decode", step, H200, tiling).cycles
    assert simulate("decode", step, H200.with_overrides({"fetch_model": 2}), tiling).cycles == before
