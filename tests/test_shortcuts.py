"""Shortcuts give the plain event-by-event run's cycle count, to the cycle, where their premise holds.

- Head sampling: a sample of whole heads on a share of the SMs is exact when the chip is copies of it
  (each of its SMs' block sequences repeats on share^-1 of the chip's SMs, heads launched in order) and
  the L2 keeps every line (the sample evicts a line for all its copies at once).
- Periodic skip: leaving out whole periods of a run whose wave times repeat is exact while the L2 stays
  in one regime (the skip waits until it does).
- V1 outer steps: a line through loops of n-1 and n steps, once two step costs in a row are equal.
- Loop skip: leaving out whole stretches of the inner loops every running block is in is exact once the
  machine repeats them (times, each role's ops and phase, counters) and the L2 answers the left-out loads
  as it answered the watched ones without evicting (the skip checks both first). Stretches that evict
  alike (here within EVICTING_TOL), and whole heads that repeat (unit skip), are left out within a
  tolerance: tests/test_shortcut_tolerance.py; causal stretches whose roles drift against each other (the
  drift skip, which the exact tests here leave out): tests/test_drift_skip.py.

Where the premise fails (causal grids whose blocks differ, sampled runs whose L2 evicts), the bounded
tests in test_simulator.py apply.
"""

from __future__ import annotations

import flashsim.simulator.api as api
import flashsim.simulator.sampling as sampling
import pytest
from flashsim.algorithms.problem import Problem
from flashsim.hw_profiles import load_profile
from flashsim.simulator import simulate
from flashsim.simulator.loopskip import EVICTING_TOL
from flashsim.simulator.resources import Barrier, Port

H100 = load_profile("h100")
H200 = load_profile("h200")
A100 = load_profile("a100")
BIG_L2 = H100.with_overrides({"l2_bytes": 8 * H100.l2_bytes, "l2_dirty_max_bytes": 8 * H100.l2_bytes})
FOUR_SMS = H100.with_overrides({"sm_count": 4})


def _same(a, b) -> None:
    assert a.cycles == b.cycles
    assert a.bytes == b.bytes


# -- head sampling -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "algo,problem,profile",
    [
        # 4 blocks per head, 12 sampled SMs of 132: the chip is 11 copies of the sample
        ("v2", Problem(2, 66, 512, 64), H100),
        ("v2", Problem(4, 66, 512, 128), BIG_L2),
        ("v3", Problem(4, 66, 512, 128), BIG_L2),
        ("v3", Problem(4, 66, 512, 64), BIG_L2),  # blocks that run on from tile to tile (two Q buffers)
        ("v2", Problem(1, 66, 512, 64, causal=True), H100),  # one wave: unequal blocks still copies
    ],
)
def test_head_sample_is_exact_when_the_chip_is_copies_of_it(monkeypatch, algo, problem, profile):
    monkeypatch.setattr(api, "SAMPLE_ABOVE_WAVES", 0)  # sample even grids small enough for the whole chip
    monkeypatch.setattr(api, "WHOLE_CHIP_WORK", 0)
    sampled = simulate(algo, problem, profile, sms=12, extrapolate=False)
    whole = simulate(algo, problem, profile, sms=None, extrapolate=False)
    assert sampled.sim["sms_simulated"] == 12 and whole.sim["sms_simulated"] == 132
    _same(sampled, whole)


def test_a_sampled_port_serves_like_the_chip_port_it_stands_for():
    """One SM's request on a port with 1/11 of the chip (copies = 11) is announced at the cycle each of 11
    identical SMs' requests is on the chip's port, also while another SM's request shares it."""
    import simpy

    def announce(copies: int, sms: int) -> list[int]:
        env = simpy.Environment()
        port = Port(env, "hbm", 64.0, copies)
        seen: list[int] = []
        for sm in range(sms):
            port.submit(0, 4096, seen.append, sm, 10)
            port.submit(0, 1024, seen.append, sm, 10)  # queued behind the SM's first request
        env.run()
        return seen

    chip, sample = announce(1, 11), announce(11, 1)
    assert sample == sorted(set(chip)) and len(set(chip)) == 2
    assert chip[:11] == [sample[0]] * 11


def test_port_shares_between_sms_and_keeps_each_sms_order():
    import simpy

    env = simpy.Environment()
    port = Port(env, "l2", 10.0)
    seen: dict[str, int] = {}
    port.submit(0, 100, lambda c: seen.setdefault("a1", c), 0)
    port.submit(0, 100, lambda c: seen.setdefault("a2", c), 0)
    port.submit(0, 100, lambda c: seen.setdefault("b1", c), 1)
    env.run()
    # a1 and b1 share (5 B/clk each) and leave at 20; a2 then has the port alone: 10 more cycles
    assert seen == {"a1": 20, "b1": 20, "a2": 30}
    assert port.busy_cycles(env.now) == pytest.approx(30)


# -- periodic skip ------------------------------------------------------------------------------------------


# V3's blocks run on from tile to tile (no waves to skip) unless an ablation switch is off: without ping-pong
# each persistent tile starts afresh once the last has ended.
NO_PINGPONG = {"pingpong": False}


@pytest.mark.parametrize(
    "algo,problem,profile,sms,options",
    [
        ("v2", Problem(1, 8, 2048, 64), FOUR_SMS, None, None),  # whole chip, a period of one wave within a head
        ("v3", Problem(1, 8, 2048, 128), FOUR_SMS, None, NO_PINGPONG),  # persistent tiles, whole heads left out
        ("v3", Problem(8, 16, 2048, 128), H200, 8, NO_PINGPONG),  # sampled, the L2 evicting throughout
    ],
)
def test_periodic_skip_is_exact(algo, problem, profile, sms, options):
    # (the third is a lockstep grid the default runs whole-chip, api.LOCKSTEP_WORK_FACTOR: its sample is tested)
    fast = simulate(algo, problem, profile, sms=sms, options=options, small_whole_chip=False)
    plain = simulate(algo, problem, profile, sms=sms, extrapolate=False, options=options, small_whole_chip=False)
    assert fast.sim["blocks_extrapolated"] > 0 and plain.sim["blocks_extrapolated"] == 0
    _same(fast, plain)


@pytest.mark.parametrize("problem", [Problem(1, 64, 512, 64), Problem(2, 32, 512, 128)])
def test_periodic_skip_takes_whole_heads_in_a_multiple_of_the_launch_pattern(problem):
    """Heads of 4 blocks on 4 SMs of 2 slots: a head ends at every round of blocks done, but the 2 blocks of
    an SM end together, so the rounds' intervals repeat every 2 rounds (a short one, a long one), not every
    one. Whole heads are left out with that multiple of the pattern as the period. (With the stores' own path
    and the paced bookkeeping of the shipped profiles, an SM's two blocks drift apart by some 35 cycles a round
    and their ends never repeat exactly: the skip rightly stays off there, so the premise is set up without them.)"""
    profile = FOUR_SMS.with_overrides({"store_path_model": 0, "bookkeeping_issue_cycles": 1})
    fast = simulate("v2", problem, profile, sms=None)
    plain = simulate("v2", problem, profile, sms=None, extrapolate=False)
    assert fast.sim["periodic_skips"] == 1 and fast.sim["blocks_extrapolated"] > 0
    _same(fast, plain)


@pytest.mark.parametrize(
    "problem,profile,sms",
    [
        (Problem(1, 8, 2048, 128), FOUR_SMS, None),  # whole chip, whole heads left out
        (Problem(8, 16, 2048, 128), H200, 8),  # sampled, the L2 evicting
        (Problem(16, 16, 1024, 128), H100, 8),  # sampled, 47 heads of 8 tiles on 16 SMs
    ],
)
def test_periodic_skip_is_exact_for_blocks_that_run_on_from_tile_to_tile(problem, profile, sms):
    """V3's persistent blocks take their next tile before the last has ended: watched where the tiles are
    taken, the periods left out give the plain run's cycles and bytes."""
    # (the third is a grid of little work, whole-chip by default: its sample is what is tested here)
    fast = simulate("v3", problem, profile, sms=sms, small_whole_chip=False)
    plain = simulate("v3", problem, profile, sms=sms, extrapolate=False, small_whole_chip=False)
    assert fast.sim["carried_skips"] > 0 and fast.sim["blocks_extrapolated"] > 0
    assert plain.sim["carried_skips"] == 0
    _same(fast, plain)


def test_an_evicting_periodic_skip_waits_for_the_l2_to_turn_over():
    """v3 8 x 32 x 2k d64 on 22 of the H200's SMs: its rounds of tiles take 36,100 cycles while the L2 evicts
    the lines it filled with, then 39,418 once those are gone (the dirty lines' room falls below its cap and
    the K/V reads miss more). The two rounds before a skip at the first rounds evict alike, but a skip leaves
    the L2 as it was, so the plain run's change of pace came in no round left out: 4.2% short. An evicting
    skip now waits until the L2 has evicted a whole capacity since its rounds began to evict alike."""
    from flashsim.simulator.gpu import _turned_over

    # (used, dirty room, evictions, dirty bytes evicted, evicted room) at four marks: alike per period
    marks = [(1.0, 0.0, 10 * i, 0.0, 30.0 * i) for i in range(4)]
    assert _turned_over(marks, 1, capacity=90.0) and not _turned_over(marks, 1, capacity=91.0)
    # the first period evicted otherwise (5 lines, then 10 a period): the regime starts after it
    marks = [(1.0, 0.0, 0, 0.0, 0.0)] + [(1.0, 0.0, 5 + 10 * i, 0.0, 15.0 + 30.0 * i) for i in range(3)]
    assert _turned_over(marks, 1, capacity=60.0) and not _turned_over(marks, 1, capacity=61.0)
    # a lockstep grid the default runs whole-chip (no skip to test there): its sample is tested, which without
    # the wait comes out 4.2% short still
    problem = Problem(8, 32, 2048, 64)
    fast = simulate("v3", problem, H200, sms=22, small_whole_chip=False)
    plain = simulate("v3", problem, H200, sms=22, extrapolate=False, small_whole_chip=False)
    assert fast.sim["sms_simulated"] == 22
    _same(fast, plain)


def test_carried_periodic_skip_leaves_a_heads_last_round_to_run():
    """Within one head (32 tiles on 8 SMs, the L2 evicting) the round of tiles taken before the next head's
    first is 0.7% shorter than the rounds before it: a skip that stood for it came out 0.11% long."""
    # (the default runs this grid whole-chip, where nothing is carried: its 8-SM sample is tested)
    problem = Problem(8, 16, 4096, 128)
    fast = simulate("v3", problem, H100, sms=8, small_whole_chip=False)
    plain = simulate("v3", problem, H100, sms=8, extrapolate=False, small_whole_chip=False)
    assert fast.sim["carried_skips"] > 0
    _same(fast, plain)


def test_periodic_skip_needs_periods_that_take_time():
    """Blocks that start together several per SM end together: the intervals between rounds of blocks done
    are 0 cycles and repeat, but leaving out periods of 0 cycles dropped most of the backward's preprocess
    (D = rowsum(dO O), dQaccum zeroed: 4 blocks per SM), its time and its bytes."""
    from flashsim.simulator.periodic import repeats as _repeats

    assert not _repeats([0, 0, 0], 1) and _repeats([7, 0, 7, 0], 2)
    problem = Problem(32, 32, 512, 64, dtype="bf16")  # 31 rounds of 4 blocks per SM
    fast = simulate("v2-bwd", problem, H200)
    plain = simulate("v2-bwd", problem, H200, extrapolate=False)
    pre_fast, pre_plain = fast.kernels[0], plain.kernels[0]
    assert pre_fast["name"] == "bwd_dot_do_o" and pre_fast["cycles"] == pre_plain["cycles"]
    # it reads dO and O from HBM (its zeros may stay dirty in the L2): no faster than HBM streams them
    read = problem.batch * problem.heads * problem.seqlen_q * problem.headdim * (2 + 2)
    assert pre_fast["cycles"] / pre_fast["clock_hz"] > read / H200.hbm_bandwidth_bytes_per_s


def test_periodic_skip_sums_only_whole_rounds_of_slots():
    """Blocks that end together in waves of 4 per SM (the backward's elementwise kernels) give one round in
    four that takes time. Heads of 7 rounds then hold 2, 2, 2, 1 waves' ends by turns, and three heads in a row
    took the same cycles in sum: the skip charged every head it left out 2 waves where the mean head takes 1.75
    (the preprocess and the dQ conversion 12% long at 12 x 40 x 3584 causal). Sums count over whole rounds of the
    slots only; exact repeats count as before."""
    from flashsim.simulator.periodic import repeats as _repeats

    gaps = [14700, 0, 0, 0] * 12
    assert _repeats(gaps[:41], 7) and not _repeats(gaps[:41], 7, slots=4)  # the last three stretches: 2 waves each
    assert _repeats(gaps, 4, slots=4) and _repeats(gaps, 8, slots=4)  # whole waves repeat exactly
    drifting = [9, 4, 5, 8, 4, 9]  # two blocks per SM whose ends move against each other: 13 cycles a round
    assert _repeats(drifting, 2, slots=2) and not _repeats(drifting, 2, slots=4)


def test_periodic_skip_leaves_out_a_stretch_of_each_head():
    """Watching starts again after each stretch left out: two sampled heads of eight waves each."""
    problem = Problem(2, 16, 16384, 128)
    fast = simulate("v2", problem, H100)
    plain = simulate("v2", problem, H100, extrapolate=False)
    assert fast.sim["periodic_skips"] >= 2 and plain.sim["periodic_skips"] == 0
    _same(fast, plain)


@pytest.mark.parametrize("problem,profile", [(Problem(32, 16, 512, 128), H200), (Problem(16, 16, 1000, 128), H100)])
def test_periodic_skip_waits_while_the_l2_fills(problem, profile):
    """A run whose L2 fills after the times have settled must not leave out the filling: leaving it out
    would keep the L2 emptier for every block after it. Nor may it skip on times from before its
    write-backs slowed it (the second case evicts from the third round on and slows from the fifth). Both
    are grids of little work, whole-chip by default: their samples are what is tested here."""
    fast = simulate("v3", problem, profile, options=NO_PINGPONG, small_whole_chip=False)
    plain = simulate("v3", problem, profile, extrapolate=False, options=NO_PINGPONG, small_whole_chip=False)
    assert fast.sim["blocks_extrapolated"] > 0
    _same(fast, plain)


def test_periodic_skip_within_a_hair_where_the_l2_state_differs(monkeypatch):
    """The repeat and regime checks compare times and counts, not which lines the L2 holds: on the H200
    validation grid 3 of 60 runs whose L2 evicts come out within 0.04% of the plain run (this is one, on
    the 8-SM sample of 16 heads that the sample selection takes when it does not grow)."""
    monkeypatch.setattr(sampling, "SHARE_TOLERANCE", -1.0)  # no sample is representative: no growing
    problem = Problem(8, 32, 2048, 64)  # a lockstep grid the default runs whole-chip: its sample is tested
    fast = simulate("v2", problem, H200, small_whole_chip=False)
    plain = simulate("v2", problem, H200, extrapolate=False, small_whole_chip=False)
    assert fast.sim["blocks_extrapolated"] > 0
    assert fast.cycles == pytest.approx(plain.cycles, rel=1e-3)
    for key in ("hbm_read", "l2_read", "l2_write"):
        assert fast.bytes[key] == pytest.approx(plain.bytes[key], rel=1e-3)


# -- V1 outer steps -----------------------------------------------------------------------------------------


# Shapes whose step costs settle within the probes on this profile (elsewhere the full loop is simulated);
# which ones settle moves with the profile's numbers. Short Q, long K/V: 64 steps, each cheap.
@pytest.mark.parametrize("problem", [Problem(1, 4, 2048, 64, seqlen_k=16384), Problem(2, 2, 1024, 64, seqlen_k=16384)])
def test_v1_outer_steps_are_exact(problem):
    fast = simulate("v1", problem, FOUR_SMS, sms=None)
    plain = simulate("v1", problem, FOUR_SMS, sms=None, extrapolate=False)
    assert len(fast.sim["outer_steps_simulated"]) < problem.seqlen_k // fast.tiling.block_n
    _same(fast, plain)


def test_v1_outer_steps_keep_a_ragged_last_step():
    problem = Problem(1, 4, 2048, 64, seqlen_k=16384 + 50)
    fast = simulate("v1", problem, FOUR_SMS, sms=None)
    plain = simulate("v1", problem, FOUR_SMS, sms=None, extrapolate=False)
    assert "outer_steps_simulated" in fast.sim
    _same(fast, plain)


def test_v1_probes_run_on_the_machine_of_the_full_loop(monkeypatch):
    """Short loops fit the whole chip where the full loop is sampled: probes on a different machine than the
    loop they stand for would not be comparable, so they keep the sample."""
    machines = []
    real = api.simulate

    def recording(*args, **kwargs):
        result = real(*args, **kwargs)
        machines.append(result.sim["sms_simulated"])
        return result

    monkeypatch.setattr(api, "simulate", recording)
    result = api.simulate("v1", Problem(4, 16, 4096, 128), H100)
    assert len(machines) > 2 and len(set(machines)) == 1 and result.sim["sms_simulated"] < H100.sm_count


# -- loop skip ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "problem,profile,sms",
    [
        (Problem(1, 16, 16384, 128), H100, 8),  # the FA2-grid point: eight waves of two blocks per SM
        (Problem(2, 16, 8192, 64), H100, 8),
        (Problem(4, 16, 4096, 128), A100, 8),
        (Problem(2, 32, 8192, 128, kv_heads=8, causal=True), H200, 8),  # GQA, causal: blocks of many lengths
        (Problem(1, 8, 8192, 64), H100, None),  # whole chip
    ],
)
def test_loop_skip_is_exact(problem, profile, sms):
    # the exact premise only: the drift skip (tests/test_drift_skip.py) would take the causal run's stretches
    # within its tolerance
    fast = simulate("v2", problem, profile, sms=sms, drift_skip=False)
    plain = simulate("v2", problem, profile, sms=sms, extrapolate=False)
    skip = fast.sim["loop_skip"]
    # the L2's replay of left-out loads counts what the watched stretch missed, unless the L2 evicts (the
    # evicting skip replays with evictions, and its count may differ)
    assert skip["skips"] > 0 and skip["ops_left_out"] > 0 and (skip["mismatch_bytes"] == 0 or skip["evicting_skips"])
    assert plain.sim["loop_skip"]["skips"] == 0 and fast.sim["ops"] < plain.sim["ops"]
    if profile is A100:
        # the sample's L2 (10 of 108 SMs' share) holds under two of its six heads' K/V: lines the skip brought
        # in at once age otherwise than lines loaded step by step, so a later eviction may pick another line
        # and the HBM reads differ by a hair (0.075%), the cycles not at all
        assert fast.cycles == plain.cycles
        for key, value in plain.bytes.items():
            assert fast.bytes[key] == pytest.approx(value, rel=EVICTING_TOL)
        return
    _same(fast, plain)
    assert fast.utilization == pytest.approx(plain.utilization, rel=1e-9)


def test_loop_skip_leaves_out_stretches_that_evict_alike():
    """K/V streaming through a small L2 evicts in every stretch: once two stretches evicted alike, the
    evicting skip leaves out the next ones, replaying their loads into the L2 (which evicts as they go);
    here that gives the plain run's cycles and bytes."""
    small = H100.with_overrides({"l2_bytes": 4 * 2**20, "l2_dirty_max_bytes": 2 * 2**20})
    problem = Problem(1, 16, 16384, 128)
    fast = simulate("v2", problem, small)
    plain = simulate("v2", problem, small, extrapolate=False)
    assert fast.sim["loop_skip"]["skips"] > 0 and plain.sim["loop_skip"]["skips"] == 0
    _same(fast, plain)


@pytest.mark.parametrize(
    "algo,problem,profile",
    [
        ("v3", Problem(1, 16, 16384, 128), H100),  # its L2 fills: the split of HBM writes must still match
        ("v3", Problem(1, 16, 8192, 256), H200),  # a ragged last K/V tile; skips before and after the L2 fills
        # loop skips inside the periods the periodic skip watches (two consumers: three-consumer d64 tiles,
        # whose softmaxes share their schedulers, do not phase-lock, and the loop skip waits there in vain)
        ("v3", Problem(2, 16, 8192, 128), H100),
        # three consumers (192 x 112) whose softmaxes share their schedulers and still lock into step
        ("v3", Problem(1, 8, 8192, 96), H100),
        ("v3", Problem(2, 32, 8192, 128, kv_heads=8, causal=True), H200),
        ("v3-fp8", Problem(1, 16, 8192, 128, dtype="fp8"), H100),
    ],
)
def test_loop_skip_is_exact_for_warp_specialized_kernels(algo, problem, profile):
    """A producer feeding two or three consumer warpgroups through a ring, with ping-pong and intra-warpgroup overlap:
    the skip waits for the end of the cycle (SMs doing the same work take the same op in that cycle, one
    after another), and gives the plain run's cycles and bytes."""
    fast = simulate(algo, problem, profile)
    plain = simulate(algo, problem, profile, extrapolate=False)
    assert fast.sim["loop_skip"]["skips"] > 0 and fast.sim["ops"] < plain.sim["ops"]
    _same(fast, plain)
    assert fast.utilization == pytest.approx(plain.utilization, rel=1e-9)


def test_periodic_skip_waits_for_periods_that_move_the_same_bytes():
    """Two periods of equal length whose byte counts differ (a loop skip added a stretch's bytes at once in
    one of them) are no copies of each other: nothing is left out on them."""
    from flashsim.simulator.periodic import counters_repeat as _counters_repeat

    marks = [(0, {"l2_read": 0.0, "busy_smem": 0.0}), (10, {"l2_read": 5.0, "busy_smem": 3.0}),
             (20, {"l2_read": 10.0, "busy_smem": 7.0})]
    assert _counters_repeat(marks, 1)  # busy cycles may split unevenly at a period's end
    marks.append((30, {"l2_read": 16.0, "busy_smem": 10.0}))
    assert not _counters_repeat(marks, 1)


def test_a_barrier_counts_the_arrivals_of_left_out_ops():
    """Ops left out after a wait was issued do not satisfy it; waits issued later count them as made."""
    import simpy

    env = simpy.Environment()
    barrier = Barrier(env)
    pending = barrier.wait(1)  # the load it waits for is still on its way
    barrier.skipped += 3  # three loads into this barrier were left out
    assert pending is not None and not pending.triggered
    later = barrier.wait(5)  # the fifth load: the pending one and one more must still arrive
    barrier.arrive()
    assert pending.triggered and not later.triggered
    barrier.arrive()
    assert later.triggered
    assert barrier.wait(4) is None
