"""Shortcuts taken within a tolerance come within 0.5% of the plain run (every op of every sampled block
interpreted), on problems small enough to run both.

- Unit skip (simulator/unitskip.py): whole query heads left out once the last two took the same cycles
  and bytes within UNIT_TOL; GQA groups apart.
- Evicting loop skip (simulator/loopskip.py): loop stretches left out while the L2 evicts, once two
  stretches evicted alike.
- Loop skip of V3's d64 tiles, whose iteration is no whole number of cycles: the state at the marks agrees
  in cycles and phases, not in the units' fractions of a cycle: a cycle off, and 2% fewer dirty lines at
  the end (one skip of 1 to 4 iterations came out the same).
- V1 outer steps (simulator/api.py): probes whose last three step costs agree within V1_SETTLE_TOL stand
  for the loop, extended by their mean.
"""

from __future__ import annotations

import flashsim.simulator.api as api
import pytest
from flashsim.algorithms.problem import Problem
from flashsim.hw_profiles import load_profile
from flashsim.simulator import simulate
from flashsim.simulator.api import V1_SETTLE_TOL, _settled
from flashsim.simulator.unitskip import UNIT_TOL, UnitSkip

H100 = load_profile("h100")
H200 = load_profile("h200")
BOUND = 5e-3


def _within(fast, plain) -> None:
    assert fast.cycles == pytest.approx(plain.cycles, rel=BOUND)
    for key, value in plain.bytes.items():
        assert fast.bytes[key] == pytest.approx(value, rel=BOUND), key


@pytest.mark.parametrize(
    "algo,problem,profile",
    [
        ("v3", Problem(4, 32, 8192, 128, causal=True), H200),  # 8 causal heads, longest tiles first
        ("v2", Problem(4, 16, 16384, 128), H100),  # 4 heads: the periodic skip leaves out a stretch of each
    ],
)
def test_unit_skip_within_the_bound(algo, problem, profile):
    fast = simulate(algo, problem, profile)
    plain = simulate(algo, problem, profile, extrapolate=False)
    units = fast.sim["unit_skip"]
    assert units["skips"] > 0 and units["units_left_out"] > 0 and units["worst"] <= UNIT_TOL
    assert "unit_skip" not in plain.sim and fast.sim["ops"] < plain.sim["ops"]
    _within(fast, plain)


def test_unit_skip_keeps_the_dispatch_replay():
    """A causal V2 sample whose chip dispatch is replayed (simulator/replay.py) and whose heads the unit skip
    leaves out: the replay fits the blocks' own cycles, which exclude the heads left out while a block ran. (Its
    blocks running at the skip once counted the left-out heads' cycles as theirs, the fit failed, and the run
    fell back to the sample's own end, 3% over the plain run.)"""
    problem = Problem(5, 48, 5120, 64, causal=True)
    fast = simulate("v2", problem, H100, flushed_l2=True)
    plain = simulate("v2", problem, H100, flushed_l2=True, extrapolate=False)
    assert fast.sim["unit_skip"]["units_left_out"] > 0 and "unit_skip" not in plain.sim
    assert fast.sim["sample"]["kind"] == plain.sim["sample"]["kind"] == "dispatch replayed"
    _within(fast, plain)


@pytest.mark.parametrize(
    "algo,problem,profile",
    [
        # one causal head whose K/V stream through an L2 of 3 MiB
        ("v3", Problem(1, 8, 16384, 128, causal=True), H100.with_overrides({"l2_bytes": 3 * 2**20})),
        ("v2", Problem(1, 16, 16384, 128), H100.with_overrides({"l2_bytes": 4 * 2**20, "l2_dirty_max_bytes": 2**21})),
    ],
)
def test_evicting_loop_skip_within_the_bound(algo, problem, profile):
    fast = simulate(algo, problem, profile)
    plain = simulate(algo, problem, profile, extrapolate=False)
    assert fast.sim["loop_skip"]["skips"] > 0 and fast.sim["ops"] < plain.sim["ops"]
    _within(fast, plain)


def _marks(skip: UnitSkip, times: list[int], first: int = 0):
    """Feed unit starts `first`, first + 1, ... with the given cycles and equal byte increments; the
    last plan (or None)."""
    plan = None
    for n, t in enumerate(times):
        unit = first + n
        counters = {"hbm_read": 100.0 * unit, "busy_tensor": 7.0 * unit}
        plan = skip.mark(unit, t, counters, (0.0, 0.0, 0, 0.0), _FakeL2())
    return plan


class _FakeL2:
    capacity = dirty_max = 1e12


def _units(kv_heads: list, size: int = 64) -> UnitSkip:
    items = [(0, h, i) for h in range(len(kv_heads)) for i in range(size)]
    return UnitSkip(items, 16, lambda cta: kv_heads[cta[1]])


def test_loop_skip_takes_v3_d64_stretches_of_several_iterations():
    """2 heads of 86 tiles of 86 K/V steps on 4 SMs: stretches of 1 to 4 iterations repeat once (one skip);
    with longer stretches watched, 9 skips leave out 13 times as many ops. (With the fills' measured port
    share, fill_model 1, the consumers' phases recur after more than MAX_PERIOD iterations and one skip is
    taken; the premise is pinned to every filled byte on the port, where the 18-iteration recurrence holds.)"""
    four_sms = H100.with_overrides({"sm_count": 4, "fill_model": 0})
    problem = Problem(1, 2, 16384, 64)
    fast = simulate("v3", problem, four_sms, sms=None)
    plain = simulate("v3", problem, four_sms, sms=None, extrapolate=False)
    assert fast.sim["loop_skip"]["skips"] >= 5 and fast.sim["loop_skip"]["mismatch_bytes"] == 0
    assert abs(fast.cycles - plain.cycles) <= 1
    # the dirty lines left at the end (hbm_write_back_after) come out 2% short, as with one skip
    assert all(fast.bytes[k] == plain.bytes[k] for k in plain.bytes if k != "hbm_write_back_after")


def test_unit_skip_leaves_out_the_heads_after_two_alike():
    skip = _units(list(range(8)))
    plan = _marks(skip, [0, 1000, 2000, 3000])
    assert plan == {"at": 3 * 64, "blocks": 5 * 64, "units": 5, "reps": 5, "cycles": 1000,
                    "delta": {"hbm_read": 100.0, "busy_tensor": 7.0}, "filling": True}


def test_unit_skip_compares_heads_dealt_from_the_same_place_in_a_wave():
    """Heads of 40 blocks on a wave of 16 slots start at a wave's start and in its middle by turns: heads two
    apart are dealt alike, and whole pairs of heads are left out."""
    skip = UnitSkip([(0, h, i) for h in range(10) for i in range(40)], 16, lambda cta: cta[1])
    assert skip.period == 2
    assert _marks(skip, [0, 3000, 5000, 8000]) is None  # 3000, 2000, 3000: pairs not yet compared
    plan = _marks(skip, [10000], first=4)  # pairs of 5000 cycles, twice
    assert plan["at"] == 4 * 40 and plan["reps"] == 3 and plan["units"] == 6 and plan["cycles"] == 5000


def test_unit_skip_takes_no_two_heads_that_alias_on_the_waves():
    """Heads of 64 blocks on a wave of 22 slots: their starts fall on wave ends 3, 3, 3, 2, ... waves apart,
    so two heads in a row may take equal time where the mean head takes 2.91 waves (a run of 8 such heads
    came out 2% over its plain run when two were taken for the rest). Heads 11 apart are dealt alike: a group
    of 8 is left whole."""
    skip = UnitSkip([(0, h, i) for h in range(8) for i in range(64)], 22, lambda cta: cta[1])
    assert skip.period == 11
    assert _marks(skip, [0, 3000, 6000, 9000, 11000, 14000, 17000, 20000]) is None


def test_unit_skip_needs_heads_alike_within_its_tolerance():
    skip = _units(list(range(8)))
    assert _marks(skip, [0, 1000, 2000 + 1000 * 2 * UNIT_TOL]) is None


def test_unit_skip_keeps_to_a_gqa_group_and_watches_none_of_its_first_heads():
    # two K/V heads of four query heads each: the group's first head fetched the K/V the others find in L2
    skip = _units([0, 0, 0, 0, 1, 1, 1, 1])
    assert _marks(skip, [0, 1000, 2000]) is None  # heads 0 and 1 watched: 0 is the group's first
    plan = _marks(skip, [3000], first=3)  # heads 1 and 2 watched: head 3 left out, not the next group
    assert plan is not None and plan["units"] == 1 and plan["at"] == 3 * 64


def test_unit_skip_needs_equal_heads_of_two_waves():
    assert not UnitSkip([(0, h, i) for h in range(8) for i in range(16)], 16, lambda c: c[1]).ok  # one wave
    assert not UnitSkip([(0, h, i) for h in range(8) for i in range(32 + h)], 16, lambda c: c[1]).ok


def _probes(cycles, writes=None):
    """Probe results with these cycles (and HBM writes: by default 100 bytes a step)."""
    from types import SimpleNamespace

    writes = writes or [100 * (i + 1) for i in range(len(cycles))]
    return [SimpleNamespace(cycles=c, bytes={"hbm_write": w}) for c, w in zip(cycles, writes, strict=True)]


def test_v1_probes_settle_exactly_or_within_the_tolerance():
    assert _settled(_probes([100, 210, 320])) == (1, 0.0)  # two equal step costs: exact
    assert _settled(_probes([100, 210, 321])) is None  # two that differ, and no third
    k, spread = _settled(_probes([0, 1000, 2001, 3000, 4002]))  # 1001, 999, 1002: 0.3% apart
    assert k == 3 and spread == pytest.approx(3 / 1000.67, rel=1e-3) and spread <= V1_SETTLE_TOL
    assert _settled(_probes([0, 1000, 2010, 3000, 4020])) is None  # 1010, 990, 1020: 3% apart
    # cycles within the tolerance, but a byte count whose last two increments differ (write-backs of the
    # first steps): not settled
    assert _settled(_probes([0, 1000, 2001, 3000, 4002], [50, 400, 500, 610, 700])) is None


def test_v1_loop_from_probes_that_wander_by_a_hair(monkeypatch):
    """Step costs that never repeat but stay within V1_SETTLE_TOL (here a probe's cycles nudged by up to
    0.02% of a step) extend the loop by their mean: within the bound of the plain run, the spread reported."""
    from dataclasses import replace

    real = api.simulate
    nudges = iter((0, 30, -20, 10, 0, 0, 0, 0))

    def nudged(*args, **kwargs):
        result = real(*args, **kwargs)
        if kwargs.get("extrapolate", True):
            return result
        return replace(result, cycles=result.cycles + next(nudges))

    monkeypatch.setattr(api, "simulate", nudged)
    # the nudges are laid over the probes' step costs under the latency form of ldmatrix (ldsm_model 1) with
    # every filled byte on the port (fill_model 0) and the stores on the L2 port alone (store_path_model 0),
    # where the probes settle after 5 steps
    problem = Problem(1, 4, 2048, 64, seqlen_k=16384)
    four_sms = H100.with_overrides({"sm_count": 4, "ldsm_model": 1, "fill_model": 0, "store_path_model": 0})
    fast = api.simulate("v1", problem, four_sms, sms=None)
    assert fast.sim["outer_step_spread"] > 0 and len(fast.sim["outer_steps_simulated"]) == 5
    monkeypatch.setattr(api, "simulate", real)
    plain = simulate("v1", problem, four_sms, sms=None, extrapolate=False)
    _within(fast, plain)


def _counted(skip: UnitSkip, increments: list[dict]):
    """Feed unit starts 0, 1, ... a thousand cycles apart, the counters moving by `increments` (one dict per
    unit after the first); the last plan (or None)."""
    counters = dict.fromkeys(increments[0], 0.0)
    plan = skip.mark(0, 0, dict(counters), (0.0, 0.0, 0, 0.0), _FakeL2())
    for unit, step in enumerate(increments, start=1):
        counters = {k: counters[k] + step[k] for k in counters}
        plan = skip.mark(unit, 1000 * unit, dict(counters), (0.0, 0.0, 0, 0.0), _FakeL2())
    return plan


def test_unit_skip_holds_small_counts_to_their_own_tolerance():
    """A count under SMALL_SHARE of a head's L2 traffic (HBM reads where the L2 catches most loads) may move
    by up to SMALL_TOL of itself from head to head (which lines the L2 evicts first); the head's traffic and
    every larger count still by UNIT_TOL."""
    from flashsim.simulator.unitskip import SMALL_SHARE, SMALL_TOL

    assert UNIT_TOL < SMALL_TOL
    traffic = 1e6
    hbm = 0.5 * SMALL_SHARE * traffic

    def plan(hbm_moves: float, traffic_moves: float = 0.0):
        heads = [{"l2_read": traffic, "hbm_read": hbm}] * 2
        heads.append({"l2_read": traffic * (1 + traffic_moves), "hbm_read": hbm * (1 + hbm_moves)})
        return _counted(_units(list(range(8))), heads)

    taken = plan(0.5 * SMALL_TOL)
    assert taken is not None and taken["units"] == 5
    assert taken["delta"]["hbm_read"] == pytest.approx(hbm * (1 + 0.5 * SMALL_TOL))
    assert plan(2 * SMALL_TOL) is None  # a small count that moved by more than its tolerance
    assert plan(0.0, 2 * UNIT_TOL) is None  # the traffic itself held to UNIT_TOL
    # a count as large as a tenth of the traffic is no small one: UNIT_TOL
    assert _counted(_units(list(range(8))), [{"l2_read": traffic, "hbm_read": 0.1 * traffic}] * 2
                    + [{"l2_read": traffic, "hbm_read": 0.1 * traffic * (1 + 2 * UNIT_TOL)}]) is None
