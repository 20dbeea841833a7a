"""The loop skip's bookkeeping shortcuts hand on exactly what the plain way would."""

from __future__ import annotations

from itertools import islice

from flashsim.algorithms.ir import SMEM, GTile, Load, Wait
from flashsim.simulator.loopskip import _last_columns, _last_moves, signatures, take


def _load(col: int, tensor: str = "K") -> Load:
    return Load(GTile(tensor, 0, 0, 0, 64, col, 64, 2), f"s{tensor}", SMEM, "cp.async", tensor.lower())


def _program(loop: list):
    yield Wait("q", 1)
    yield from loop
    yield Wait("end", 1)


def _nested(loop: list):
    yield from _program(loop)


def test_take_hands_on_what_next_would_and_the_program_goes_on_after_it() -> None:
    loop = [op for j in range(40) for op in (_load(64 * j), Wait("k", j + 1), _load(64 * j, "V"))]
    for make in (_program, _nested):
        plain = list(make(loop))
        source = make(loop)
        first = next(source)
        memo: dict = {}
        ops, sigs = take(source, 50, memo)  # from inside the list
        more, more_sigs = take(source, 100, memo)  # past its end: the rest of the list, then the program's own
        rest = list(source)
        assert [first, *ops, *more, *rest] == plain
        assert len(ops) == 50 and len(more) == len(plain) - 51 and not rest
        expected: list = []
        signatures([*ops, *more], expected, {})
        assert sigs + more_sigs == expected


def test_take_from_a_plain_generator_is_islice() -> None:
    ops = [_load(64 * j) for j in range(10)]
    memo: dict = {}
    got, sigs = take(iter(tuple(ops)), 4, memo)
    assert got == list(islice(ops, 4)) and len(sigs) == 4
    got, _ = take((op for op in ops), 20, memo)
    assert got == ops


def test_columns_issued_again_later_are_dropped_without_changing_the_last_moves() -> None:
    a = [_load(64 * j) for j in range(6)]
    b = [_load(64 * j, "V") for j in range(6)]
    c = [_load(64 * (j + 1)) for j in range(6)]  # a role a step ahead: other tiles of the same tensor
    columns = [a, b, list(a), c, b]
    kept = _last_columns(columns)
    assert len(kept) == 3  # a's first copy and b's first are issued again later
    for stretch, short in zip(zip(*columns, strict=True), zip(*kept, strict=True), strict=True):
        assert _last_moves(list(short)) == _last_moves(list(stretch))
    assert _last_columns([a, b]) == [a, b]


def test_a_launch_gives_the_collector_its_thresholds_back() -> None:
    import gc

    from flashsim.algorithms.problem import Problem
    from flashsim.hw_profiles.loader import load_profile
    from flashsim.simulator import gpu as gpu_module
    from flashsim.simulator.api import simulate

    before = gc.get_threshold()
    seen = []
    run_until = gpu_module.Environment.run_until

    def watched(env, until):
        seen.append(gc.get_threshold()[0])
        return run_until(env, until)

    gpu_module.Environment.run_until = watched
    try:
        simulate("v2", Problem(1, 2, 256, 64), load_profile("h100"))
    finally:
        gpu_module.Environment.run_until = run_until
    assert seen and gc.get_threshold() == before
