"""The K/V loops' repeat marks hold. Where a list of ops says it repeats every `period` places but for its counts
(OpList.repeat), the loop skip makes one period's signatures and copies them (loopskip._list_signatures): a mark
that overstated the repeat would let it leave out ops that differ from the stretch it watched."""

import pytest
from flashsim.algorithms.ir import Load
from flashsim.algorithms.mapping import Tiling
from flashsim.algorithms.oplists import OpList
from flashsim.algorithms.problem import Problem
from flashsim.algorithms.schedules import build
from flashsim.simulator.loopskip import signature

LIST_ITER = type(iter([]))


def marked_lists(algo: str, problem: Problem, tiling: Tiling, **options) -> list[OpList]:
    """Every OpList with a repeat mark that a kernel's programs yield from, over all its blocks (tile after
    tile where the kernel carries its state)."""
    found = {}
    for kernel in build(algo, problem, tiling, **options).kernels:
        state = None
        for cta in kernel.ctas:
            for role in kernel.roles:
                program = role.program(cta, state) if kernel.carry is not None else role.program(cta)
                for _ in program:
                    inner = program
                    while inner is not None and not isinstance(inner, LIST_ITER):
                        inner = getattr(inner, "gi_yieldfrom", None)
                    if inner is not None:
                        items = inner.__reduce__()[1][0]
                        if getattr(items, "repeat", None) is not None:
                            found[id(items)] = items
            if kernel.carry is not None:
                state = kernel.carry(state, cta)
    return list(found.values())


def holds(ops: OpList, repeat: tuple) -> bool:
    start, stop, period = repeat
    sigs = [signature(op) for op in ops]
    return start >= 0 and stop <= len(ops) and stop - start >= 2 * period and \
        all(sigs[i] == sigs[i - period] for i in range(start + period, stop))


CASES = [
    # v2: whole and ragged K/V, causal (its masked steps), split K/V
    ("v2", Problem(1, 2, 1024, 64), Tiling(128, 64, 4, 2), {}),
    ("v2", Problem(1, 2, 1000, 128, seqlen_k=1000), Tiling(128, 64, 4, 2), {}),
    ("v2", Problem(1, 2, 1024, 128, causal=True), Tiling(128, 64, 4, 2), {}),
    ("v2", Problem(1, 2, 512, 64, seqlen_k=2000), Tiling(128, 64, 4, 2, splits=2), {}),
    # v3: causal with carried tiles, a ragged K/V end, three stages, cuDNN's serial loop, fp8
    ("v3", Problem(1, 2, 2048, 128, causal=True, dtype="bf16"), Tiling(128, 128, 12, 2), {}),
    ("v3", Problem(1, 2, 1000, 128, seqlen_k=1500, dtype="bf16"), Tiling(128, 176, 12, 2), {}),
    ("v3", Problem(1, 2, 1024, 64, seqlen_k=1300, dtype="bf16"), Tiling(128, 64, 12, 3), {}),
    ("v3", Problem(1, 2, 1024, 128, causal=True, dtype="bf16"), Tiling(128, 64, 12, 2, pipeline="serial"), {}),
    ("v3-fp8", Problem(1, 2, 1024, 128, seqlen_k=4096, dtype="fp8"), Tiling(128, 224, 12, 2), {}),
]


@pytest.mark.parametrize("algo,problem,tiling,options", CASES)
def test_every_repeat_mark_holds(algo, problem, tiling, options):
    lists = marked_lists(algo, problem, tiling, **options)
    # the lists of K/V loads are marked too (v3's producer, v2's one loop), not only v3's consumers
    assert any(type(op) is Load for ops in lists for op in ops), "no K/V load list is marked"
    for ops in lists:
        assert holds(ops, ops.repeat), f"{algo} {problem.describe()}: {ops.repeat} does not repeat"


def test_the_check_is_sharp():
    """A mark one place off, or one period longer, fails: the loops' ops differ within a period."""
    ops = max(marked_lists("v3", *CASES[4][1:3]), key=len)
    start, stop, period = ops.repeat
    assert not holds(ops, (start, stop, period + 1))
    assert not holds(ops, (start, stop + period, period)) or stop + period > len(ops)
