"""V3's K/V loops are built column by column as lists (algorithms/oplists.py), for the loop skip to slice: each
program still issues, op for op, the FA3 step order written out here step by step, across a persistent block's
tiles (ring slots and turns counted on), in every ablation, with fp8's block scales and ragged or masked tiles."""

from __future__ import annotations

import pytest
from flashsim.algorithms import Problem, Tiling
from flashsim.algorithms.ir import Arrive, Gemm, GemmWait, Load, OnlineSoftmax, Rescale, Store, Wait, causal_offset
from flashsim.algorithms.oplists import Counted, interleave, periodic
from flashsim.algorithms.parts import tile_mask
from flashsim.algorithms.schedules import build
from flashsim.algorithms.schedules.v3 import kv_range
from flashsim.simulator.loopskip import signatures, take


def _describe(op) -> tuple:
    """What of an op the step order decides."""
    kind = type(op)
    if kind is Wait:
        return "wait", op.barrier, op.target
    if kind is Arrive:
        return "arrive", op.barrier, op.count
    if kind is Gemm:
        return "gemm", op.a, op.b
    if kind is GemmWait:
        return "gemm wait", op.token
    if kind is OnlineSoftmax:
        return "softmax", op.p, op.mask is not None
    if kind is Rescale:
        return ("rescale",)
    if kind is Load:
        return "load", op.src, op.dst, op.barrier
    return (kind.__name__,)


def _producer_steps(p: Problem, t: Tiling, cta: tuple, ring: int, fp8: bool) -> list[list]:
    """Per K/V step, the loads written out one by one: K_0 first, then K_j+1 and V_j, each after its slot's
    release (none for a slot's first fill)."""
    consumers, stages, bn = t.block_m // 64, t.stages, t.block_n
    first, n = kv_range(p, t, cta)
    b, hk = cta[0], cta[1] // p.group

    def load(tensor: str, j: int) -> list:
        r, s = ring + j, (ring + j) % stages
        out = [("wait", f"empty{tensor}{s}", consumers * (r // stages))] if r >= stages else []
        block = first + j
        rows = min(bn, p.seqlen_k - block * bn)
        src = (tensor + "q") if fp8 else tensor
        out.append(("load", _tile(p, src, b, hk, block * bn, rows), f"s{tensor}{s}", f"full{tensor}{s}"))
        if fp8:
            out.append(
                ("load", _tile(p, f"{tensor}scale", b, hk, block, 1, 1, 4), f"{tensor.lower()}s{s}", f"full{tensor}{s}")
            )
        return out

    return [(load("K", 0) if j == 0 else []) + (load("K", j + 1) if j + 1 < n else []) + load("V", j) for j in range(n)]


def _tile(
    p: Problem, tensor: str, b: int, head: int, row: int, rows: int, cols: int | None = None, elem: int | None = None
):
    from flashsim.algorithms.ir import GTile

    return GTile(
        tensor, b, head, row, rows, 0, p.headdim if cols is None else cols, p.elem_bytes if elem is None else elem
    )


def _consumer_loop(
    p: Problem, t: Tiling, cta: tuple, c: int, ring: int, turn: int, q_buf: str, options: dict, fp8: bool
) -> list:
    """Consumer c's K/V loop, step by step as FA3 orders it."""
    consumers, stages, bn = t.block_m // 64, t.stages, t.block_n
    first, n = kv_range(p, t, cta)
    c_act = min(consumers, -(-(p.seqlen_q - cta[2] * t.block_m) // 64))
    weight = 1 + (consumers - c_act if c == c_act - 1 else 0)
    pp = options.get("pingpong", True) and c_act > 1
    intra = options.get("intra_overlap", True)
    loads = _producer_steps(p, t, cta, ring, fp8) if not options.get("warp_specialization", True) and c == 0 else None
    arrivals = 2 if fp8 else 1
    row0 = cta[2] * t.block_m + c * 64
    visible = p.seqlen_k
    if p.causal:
        visible = min(visible, row0 + causal_offset(p.causal_align, p.seqlen_q, p.seqlen_k) + 1)
    out = []
    for j in range(n):
        s, s1 = (ring + j) % stages, (ring + j - 1) % stages
        qk = ("gemm", q_buf, f"sK{s}")
        pv = [("wait", f"fullV{s1}", arrivals * ((ring + j - 1) // stages + 1)), ("gemm", f"P{(j - 1) % 2}", f"sV{s1}")]
        release_v = [("gemm wait", "o"), ("arrive", f"emptyV{s1}", weight)]
        step = list(loads[j]) if loads else []
        step.append(("wait", f"fullK{s}", arrivals * ((ring + j) // stages + 1)))
        if pp:
            step.append(("wait", f"turn{c}", turn + j + (1 if c else 0)))
        step += [qk] if not j else [qk, *pv] if intra else [*pv, qk]
        if pp:
            step.append(("arrive", f"turn{(c + 1) % c_act}", 1))
        if j and not intra:
            step += release_v
        masked = (first + j + 1) * bn > visible and tile_mask(p, row0, (first + j) * bn, 64, bn) is not None
        step += [("gemm wait", "s"), ("arrive", f"emptyK{s}", weight), ("softmax", f"P{j % 2}", masked)]
        if j:
            step += (release_v if intra else []) + [("rescale",)]
        out += step
    return out


CASES = [
    # causal d128 (two Q buffers, blocks carried from tile to tile), ragged, three stages, GQA
    (Problem(1, 2, 700, 128, causal=True), Tiling(128, 128, 12, 2), {}),
    (Problem(2, 4, 300, 64, seqlen_k=170, kv_heads=2, causal=True), Tiling(64, 48, 8, 3), {}),
    (Problem(1, 2, 1000, 64), Tiling(192, 128, 16, 2), {}),
    (Problem(1, 2, 640, 128, causal=True), Tiling(128, 128, 12, 2), {"pingpong": False}),
    (Problem(1, 2, 640, 128, causal=True), Tiling(128, 128, 12, 2), {"intra_overlap": False}),
    (Problem(1, 2, 640, 128, causal=True), Tiling(128, 128, 12, 2), {"warp_specialization": False}),
]


@pytest.mark.parametrize("p, t, options", CASES)
def test_v3_loops_issue_the_step_order(p: Problem, t: Tiling, options: dict) -> None:
    _check(build("v3", p, t, **options), p, t, options, fp8=False)


def test_v3_fp8_loops_issue_the_step_order_with_block_scales() -> None:
    p, t = Problem(1, 2, 512, 128, causal=True), Tiling(128, 224, 12, 2)
    _check(build("v3-fp8", p, t, hadamard=False), p, t, {}, fp8=True)


def _check(schedule, p: Problem, t: Tiling, options: dict, fp8: bool) -> None:
    kernel = next(k for k in schedule.kernels if k.name.startswith("flash_fwd"))
    roles = {role.name: role.program for role in kernel.roles}
    state, checked = None, 0
    for cta in kernel.ctas[:6]:  # one block's tiles back to back (its ring and turns run on), or each alone
        at = state if kernel.carry else None
        ring = at.kv_blocks if at else 0
        tiles = at.tiles if at else 0
        assert not tiles or kernel.carry
        if "producer" in roles:
            got = [
                _describe(op)
                for op in roles["producer"](cta, at)
                if type(op) is not Load or op.src.tensor not in ("Q", "Qq")
            ]
            expected = [x for step in _producer_steps(p, t, cta, ring, fp8) for x in step]
            # after the Q buffer's release (a carried block's later tiles) and the Q loads
            assert got[len(got) - len(expected) :] == expected and len(got) - len(expected) <= 1
            checked += 1
        for c in range(t.block_m // 64):
            ops = [_describe(op) for op in roles[f"consumer{c}"](cta, at)]
            if not ops:
                continue
            q_buf = f"sQ{c}'" if kernel.tile_counter and tiles % 2 else f"sQ{c}"  # two Q buffers, by turns
            turn = at.turns[c] if at else 0
            loop = _consumer_loop(p, t, cta, c, ring, turn, q_buf, options, fp8)
            start = next(k for k, o in enumerate(ops) if o[0] == "Fill") + 3  # after acc, m and l's fills
            assert ops[start : start + len(loop)] == loop
            checked += 1
        if kernel.carry:
            state = kernel.carry(state, cta)
    assert checked


def test_counted_periodic_and_interleave() -> None:
    made = []
    counted = Counted(lambda k: made.append(k) or ("op", k))
    assert counted.slice(2, 5) == [("op", 2), ("op", 3), ("op", 4)] and counted[1] == ("op", 1)
    assert counted.slice(0, 3) == [("op", 0), ("op", 1), ("op", 2)] and made == [0, 1, 2, 3, 4]  # each once
    assert periodic(lambda j: j % 3, 1, 9, 3) == [1, 2, 0, 1, 2, 0, 1, 2]
    assert periodic(lambda j: j, 4, 4, 2) == [] and periodic(lambda j: j, 5, 2, 2) == []
    assert interleave([[1, 2], ["a", "b"], [None, None]]) == [1, "a", None, 2, "b", None]


@pytest.mark.parametrize("chunk", [5, 37, 10**6])
def test_the_loop_skip_takes_the_signatures_a_list_says_repeat_as_they_are(chunk: int) -> None:
    """OpList.repeat's promise holds for V3's loops: the signatures take() repeats from one period are those
    of the ops, wherever the slices it takes begin and end."""
    p, t = Problem(1, 2, 2048, 128, causal=True), Tiling(128, 128, 12, 2)
    kernel = build("v3", p, t).kernels[0]
    program = next(role.program for role in kernel.roles if role.name == "consumer1")
    state, claimed = None, 0
    for cta in kernel.ctas[:4]:
        source = program(cta, state)
        taken = []
        while type(source.gi_yieldfrom) is not type(iter([])):  # into the K/V loop's list
            taken.append(next(source))
        claimed += source.gi_yieldfrom.__reduce__()[1][0].repeat is not None
        memo: dict = {}
        sigs: list = []
        before = len(taken)
        while True:
            ops, more = take(source, chunk, memo)
            if not ops:
                break
            taken += ops
            sigs += more
        expected: list = []
        signatures(taken, expected, {})
        # a store's signature is never equal to another's (loops that write global memory are not left out)
        tail = taken[len(taken) - len(sigs) :]
        stores = [type(op) is Store for op in tail]
        assert [s for s, x in zip(sigs, stores, strict=True) if not x] == [
            s for s, x in zip(expected[len(expected) - len(sigs) :], stores, strict=True) if not x
        ]
        assert len(sigs) == len(taken) - before and sum(stores) == 2  # O and LSE
        state = kernel.carry(state, cta)
    assert claimed
