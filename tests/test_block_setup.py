"""A warp-specialised producer's set-up before a tile's first copy (ir.BlockSetup, block_setup_model 1): the
microbenchmark's costs in the profile, the ops the v3 schedule puts on its producer, and what they add to a
block (docs/MODEL.md, "The producer's set-up")."""

import json
import statistics
from pathlib import Path

import pytest
import torch
from flashsim.algorithms.ir import BlockSetup
from flashsim.algorithms.mapping import Tiling
from flashsim.algorithms.numeric import run_numeric
from flashsim.algorithms.problem import Problem
from flashsim.algorithms.schedules import build
from flashsim.algorithms.schedules.v3 import SETUP_PARAM_ROUNDS
from flashsim.errors import FlashsimError
from flashsim.hw_profiles import load_profile
from flashsim.simulator import simulate
from flashsim.simulator.timing import setup_cycles

RESULTS = Path(__file__).resolve().parents[1] / "experiments" / "results" / "h200" / "block-start.json"
H200 = load_profile("h200")
ON = H200.with_overrides({"block_setup_model": 1})
OFF = H200.with_overrides({"block_setup_model": 0})


def _rows(kernel, **kw):
    rows = json.loads(RESULTS.read_text())["rows"]
    return [r for r in rows if r["kernel"] == kernel and all(r.get(k) == v for k, v in kw.items())]


def test_profile_costs_are_the_microbenchmark():
    """Each key is what kernels/microbench/block_start.cu measured, on one SM and on all 132 after the write flush
    and in a relaunch."""
    cold = [r["per_read_cold"] for r in _rows("param_chain")]
    warm = [r["per_read_warm"] for r in _rows("param_chain")]
    assert H200.constant_cold_read_cycles == pytest.approx(statistics.median(cold), rel=0.1)
    assert H200.constant_read_cycles == pytest.approx(statistics.median(warm), rel=0.05)
    assert min(cold) > 3 * max(warm)  # a cold read misses the SM's constant cache
    tiles = [r["per_tile"] for r in _rows("index_chain")]
    assert H200.tile_index_cycles == pytest.approx(statistics.median(tiles), rel=0.02)
    lowered = [r["producer_lowered"]["median"] for r in _rows("regs_realloc")]
    assert H200.setmaxnreg_cycles == pytest.approx(statistics.median(lowered), rel=0.1)
    for nbar in (4, 8, 12):
        past = statistics.median(r["barrier_past"]["median"] for r in _rows("barrier_setup", nbar=nbar))
        model = H200.mbarrier_setup_cycles + nbar * H200.mbarrier_init_cycles
        assert model == pytest.approx(past, rel=0.08)
    for key in ("mbarrier_setup_cycles", "constant_cold_read_cycles", "tile_index_cycles"):
        assert H200.source(key).startswith("measured")
        assert load_profile("h100").source(key).startswith("derived")


def _producer_ops(schedule, ctas=2):
    kernel = schedule.kernels[-1]
    role = next(r for r in kernel.roles if r.name == "producer")
    state, ops = None, []
    for cta in kernel.ctas[:ctas]:
        ops.append(list(role.program(cta, state)))
        state = kernel.carry(state, cta) if kernel.carry else None
    return ops


def test_the_producer_sets_up_before_each_tiles_first_copy():
    """Our v3 at d128 (one Q buffer, two stages): 10 barriers, as its SASS initialises 10 (SYNCS.EXCH),
    setmaxnreg and cold parameter reads on the block's first tile; a persistent block's next tile reads them
    warm. Without the option the schedule has no set-up op (and keeps its speed)."""
    p = Problem(1, 264, 512, 128)
    t = Tiling(128, 176, 12, 2)
    first, *_ = _producer_ops(build("v3", p, t, setup=True))
    assert first[0] == BlockSetup(10, True, SETUP_PARAM_ROUNDS, True, True, False)
    assert first[1].via == "tma"
    assert not any(isinstance(op, BlockSetup) for ops in _producer_ops(build("v3", p, t)) for op in ops)
    later = BlockSetup(0, False, SETUP_PARAM_ROUNDS, False, True, False)
    assert setup_cycles(later, H200) == round(3 * H200.constant_read_cycles + H200.tile_index_cycles)


def test_two_q_buffer_kernel_takes_its_tile_from_the_counter():
    """The causal d64 kernel with a second Q buffer takes each tile from the grid's counter: an L2 round trip more,
    and two barriers more for the second Q buffer."""
    p = Problem(2, 24, 256, 64, kv_heads=12, causal=True)
    t = Tiling(192, 128, 16, 2)
    schedule = build("v3", p, t, setup=True)
    if not schedule.kernels[-1].tile_counter:
        pytest.skip("this shape runs without the tile counter")
    op = _producer_ops(schedule, 1)[0][0]
    assert op.counter and op.mbarriers == 12
    plain = BlockSetup(op.mbarriers, True, SETUP_PARAM_ROUNDS, True, True, False)
    assert setup_cycles(op, H200) - setup_cycles(plain, H200) == H200.l2_hit_latency_cycles


def test_a_one_wave_kernel_waits_for_the_set_up():
    """A block per SM running one K/V block: the set-up stands before Q's copy, so it adds itself to the kernel."""
    p = Problem(1, 64, 128, 128)
    added = simulate("v3", p, ON).cycles - simulate("v3", p, OFF).cycles
    expected = setup_cycles(BlockSetup(10, True, SETUP_PARAM_ROUNDS, True, True, False), H200)
    assert added == pytest.approx(expected, rel=0.05)


def test_a_long_persistent_kernel_hides_the_later_tiles_set_up():
    """Many tiles per block: only the first one's set-up shows; the later ones run while the consumers compute."""
    p = Problem(4, 32, 4096, 128)
    on, off = simulate("v3", p, ON).cycles, simulate("v3", p, OFF).cycles
    first = setup_cycles(BlockSetup(10, True, SETUP_PARAM_ROUNDS, True, True, False), H200)
    assert 0 < on - off < 2 * first


@pytest.mark.parametrize("algo", ["v3", "v3-fp8"])
def test_the_schedule_with_its_set_up_still_computes_attention(algo):
    g = torch.Generator().manual_seed(3)
    p = Problem(1, 2, 200, 64, causal=True, dtype="bf16" if algo == "v3" else "fp8")
    t = Tiling(128, 128, 12, 2)
    q, k, v = (torch.randn(1, 2, 200, 64, generator=g) for _ in range(3))
    with_setup = run_numeric(build(algo, p, t, setup=True), {"Q": q, "K": k, "V": v})["O"]
    without = run_numeric(build(algo, p, t), {"Q": q, "K": k, "V": v})["O"]
    assert torch.equal(with_setup, without)


def test_bad_values_are_refused():
    with pytest.raises(FlashsimError, match="block_setup_model"):
        H200.with_overrides({"block_setup_model": 2})
