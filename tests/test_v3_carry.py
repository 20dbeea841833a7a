"""V3's persistent blocks run their tiles back to back (Kernel.carry): the producer loads the next tile's Q
(once its buffer is released) and first K/V blocks while the consumers finish the current one, the K/V ring's
slots, the Q buffers and the ping-pong turns counted on across tiles. The numeric interpreter chains a
block's tiles as the simulator does, so a barrier target or ring slot counted wrong deadlocks or reads
another tile's data."""

from __future__ import annotations

import dataclasses
import math

import flashsim.simulator.api as api
import pytest
import torch
from flashsim.algorithms import Problem, Tiling
from flashsim.algorithms.numeric import ScheduleError, run_numeric
from flashsim.algorithms.schedules import build
from flashsim.hw_profiles import load_profile
from flashsim.simulator import simulate

H200 = load_profile("h200")


def _reference(q, k, v, causal: bool) -> torch.Tensor:
    q, k, v = (x.double() for x in (q, k, v))
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        nq, nk = q.shape[2], k.shape[2]
        s = s.masked_fill(torch.arange(nk)[None, :] > torch.arange(nq)[:, None] + (nk - nq), -math.inf)
    return torch.nan_to_num(torch.softmax(s, -1), nan=0.0) @ v


def _inputs(p: Problem, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    shapes = {"Q": (p.batch, p.heads, p.seqlen_q), "K": (p.batch, p.kv_heads, p.seqlen_k),
              "V": (p.batch, p.kv_heads, p.seqlen_k)}
    return {n: torch.randn(*s, p.headdim, generator=g).bfloat16().float() for n, s in shapes.items()}


def _with_carry(schedule, carry):
    kernel = dataclasses.replace(schedule.kernels[0], carry=carry)
    return dataclasses.replace(schedule, kernels=(kernel, *schedule.kernels[1:]))


# (problem, tiling): odd K/V block counts (the ring's slot moves on between tiles), three stages, ragged last
# Q blocks with one consumer of two and two of three (the others idle), GQA, rows that see no key (causal,
# Nq > Nk), non-causal
CASES = [
    (Problem(2, 2, 180, 64, causal=True, dtype="bf16"), Tiling(128, 32, 12, 2)),
    (Problem(2, 4, 300, 64, seqlen_k=170, kv_heads=2, causal=True, dtype="bf16"), Tiling(64, 48, 8, 3)),
    (Problem(2, 3, 90, 128, seqlen_k=300, causal=True, dtype="bf16"), Tiling(128, 64, 12, 2)),
    (Problem(2, 2, 260, 64, dtype="bf16"), Tiling(192, 64, 16, 2)),
    (Problem(1, 2, 130, 64, seqlen_k=40, causal=True, dtype="bf16"), Tiling(64, 16, 8, 2)),
    # one Q buffer: d96 (no two-Q-buffer kernel), non-causal, so a persistent grid
    (Problem(2, 3, 200, 96, seqlen_k=150, dtype="bf16"), Tiling(128, 48, 12, 2)),
    (Problem(2, 2, 150, 96, seqlen_k=200, kv_heads=1, dtype="bf16"), Tiling(64, 32, 8, 3)),
]


@pytest.mark.parametrize("problem,tiling", CASES)
def test_chained_tiles_compute_attention(problem, tiling):
    schedule = build("v3", problem, tiling)
    assert schedule.kernels[0].carry is not None
    x = _inputs(problem)
    out = run_numeric(schedule, x)["O"]
    ref = _reference(x["Q"], x["K"], x["V"], problem.causal)
    assert ((out.double() - ref).norm() / ref.norm()).item() < 5e-3  # O is stored in bf16


def test_a_carry_that_loses_the_ring_position_is_caught():
    """The check above is sharp: a state one K/V block off, or no state carried at all, fails."""
    problem, tiling = CASES[1]
    schedule = build("v3", problem, tiling)
    carry = schedule.kernels[0].carry
    x = _inputs(problem)

    def one_off(state, cta):
        after = carry(state, cta)
        return dataclasses.replace(after, kv_blocks=after.kv_blocks + 1)

    with pytest.raises(ScheduleError, match="deadlocks"):
        run_numeric(_with_carry(schedule, one_off), x)
    # every tile from ring slot 0 on barriers that kept their counts: a consumer reads a slot that holds
    # another tile's K/V block (of another shape here) before the producer has refilled it
    with pytest.raises((ScheduleError, RuntimeError)):
        run_numeric(_with_carry(schedule, lambda state, cta: None), x)


def test_every_persistent_block_carries():
    """Persistent grids carry, with one Q buffer (d128 non-causal's 128x176, fp8, d96) or two; split K/V, the
    ablations and grids of one block per tile (causal d256) run each tile afresh. Only the two-Q-buffer kernel
    takes its tiles from a counter in memory; the others deal them by block index."""
    causal = Problem(4, 8, 1024, 128, causal=True, dtype="bf16")
    kernel = build("v3", causal, Tiling(128, 128, 12, 2)).kernels[0]
    assert kernel.carry is not None and kernel.tile_counter
    assert build("v3", causal, Tiling(128, 128, 12, 2), pingpong=False).kernels[0].carry is None
    assert build("v3", causal, Tiling(128, 128, 12, 2, splits=2)).kernels[0].carry is None
    one_q = build("v3", Problem(4, 8, 1024, 128, dtype="bf16"), Tiling(128, 176, 12, 2)).kernels[0]
    assert one_q.carry is not None and not one_q.tile_counter
    fp8 = build("v3-fp8", Problem(4, 8, 1024, 128, dtype="fp8"), Tiling(128, 224, 12, 2)).kernels[-1]
    assert fp8.carry is not None and not fp8.tile_counter
    per_tile = build("v3", Problem(4, 8, 1024, 256, causal=True, dtype="bf16"), Tiling(128, 80, 12, 2)).kernels[0]
    assert not per_tile.persistent and per_tile.carry is None


def test_the_next_tile_starts_under_the_current_one(monkeypatch):
    """Causal 1k, d128: short tiles, so the next tile's Q and first K/V loads, issued while the consumers
    finish, save a visible share of the time against starting every tile afresh once the last has ended."""
    problem = Problem(16, 16, 1024, 128, causal=True, dtype="bf16")
    carried = simulate("v3", problem, H200)
    plain_build = api.build
    monkeypatch.setattr(api, "build", lambda *a, **k: _with_carry(plain_build(*a, **k), None))
    afresh = simulate("v3", problem, H200)
    assert carried.bytes["hbm_read"] == pytest.approx(afresh.bytes["hbm_read"], rel=0.02)
    assert carried.time_s < 0.95 * afresh.time_s
