"""Unit skip: leave out whole query heads once the last two took the same time, within a tolerance.

A sampled launch runs its query heads (units: every block of one (batch, head), causal ones of every
length) one after another, each doing the same work on other data. Once two heads in a row took the same
cycles and moved the same bytes within UNIT_TOL (counts under SMALL_SHARE of a head's L2 traffic within
SMALL_TOL: `_differ`), and the L2 neither started evicting nor would fill in what is left, the heads after
them are copies of the last: they are left out when the dispatcher reaches the next head's first block,
their cycles and counter increments added once each, and the blocks running then (the last head's tail)
stand for the tail of the last head left out.

Premise, and why it is not exact: the heads are marked at the dispatch of their first block, while the
previous head's tail still runs, so two heads repeat only as far as the machine has settled into one rate;
that settles to well within UNIT_TOL for heads of many blocks but never to the cycle (causal heads end
their blocks out of step), hence the tolerance. Query heads that share a K/V head (GQA) repeat only within
their group (its first head fetches the K/V the others find in L2): a skip stays inside the group of the
heads watched, and watches none of them that is the group's first. Measured against the plain run in
experiments/results/shortcut-exactness.json; docs/MODEL.md, Shortcuts.
"""

from __future__ import annotations

import math

# Relative difference allowed between the two watched heads, in cycles and in every byte count.
UNIT_TOL = 2e-3
# Counts under SMALL_SHARE of a head's bytes through the L2 (TRAFFIC) may differ by SMALL_TOL of themselves.
SMALL_SHARE = 0.05
SMALL_TOL = 1e-2
TRAFFIC = ("l2_read", "l2_write", "l2_atomic")
# Largest difference from the plain run this skip has shown (shortcut-exactness.json), printed with it.
UNIT_BOUND = 5e-3
# A head must hold this many waves of blocks (its start marks must not fall in the first wave).
MIN_WAVES = 2


class UnitSkip:
    """One launch's unit skip over `items` (launch order); None from `plan` when the launch has no such
    units. kv_head_of: a block's K/V head; a unit is a block's (batch, head)."""

    def __init__(self, items: list, wave: int, kv_head_of):
        self.starts: list[int] = []  # launch index of each unit's first block
        self.kv: list = []  # each unit's K/V head
        keys = []
        for n, cta in enumerate(items):
            key = cta[:2]
            if not keys or keys[-1] != key:
                keys.append(key)
                self.starts.append(n)
                self.kv.append(kv_head_of(cta))
        self.total = len(items)
        sizes = [b - a for a, b in zip(self.starts, [*self.starts[1:], self.total], strict=True)]
        self.ok = (len(set(keys)) == len(keys) >= 4 and len(set(sizes)) == 1 and sizes[0] >= MIN_WAVES * wave)
        self.size = sizes[0] if sizes else 0
        # units between two whose first blocks are dealt at the same place in a wave: where a unit is no whole
        # number of waves, the units between are dealt from other places and their starts fall on other wave
        # ends, so two units in a row may take equal time (both 3 waves of 22 slots) where the mean unit takes
        # less (64 blocks: 2.91 waves)
        self.period = wave // math.gcd(self.size, wave) if self.size else 1
        self.marks: list = []  # (unit index, virtual cycle, counters, L2 state) at each unit's first dispatch
        self.skips = 0
        self.units_left_out = 0
        self.worst = 0.0  # the largest relative difference of the two watched heads at a skip

    def unit_at(self, index: int) -> int | None:
        """The unit whose first block has launch index `index` (None: not a unit's first block)."""
        if not self.ok or index % self.size:
            return None
        return index // self.size

    def mark(self, unit: int, cycle: int, counters: dict, l2_state: tuple, cache) -> dict | None:
        """Unit `unit`'s first block is about to be dispatched: a plan to leave out units from it on
        ({"at", "blocks", "units", "reps": periods of units, "cycles" and "delta": a period's, "filling"}), or
        None."""
        marks, period = self.marks, self.period
        if marks and marks[-1][0] != unit - 1:
            marks.clear()  # units left out in between (another skip): watch again
        marks.append((unit, cycle, counters, l2_state))
        if len(marks) < 2 * period + 1:
            return None
        del marks[: -2 * period - 1]
        (u0, t0, c0, l0), (u1, t1, c1, l1), (_, t2, c2, l2) = marks[0], marks[period], marks[-1]
        kv = self.kv
        gqa = kv.count(kv[u1]) > 1
        if gqa and (kv[u0] != kv[u1] or kv.index(kv[u0]) == u0):
            return None  # a GQA group's heads repeat only among themselves, its first one apart
        d1, d2 = t1 - t0, t2 - t1
        diff = _differ(d1, d2, c0, c1, c2)
        if diff > UNIT_TOL:
            return None
        end = len(self.starts)
        if gqa:  # stay within the group
            end = max(i for i, k in enumerate(kv) if k == kv[u1]) + 1
        reps = (end - unit) // period  # whole periods of units, so that the units after are dealt as they were
        units = reps * period
        filling = _l2_filling(l0, l1, l2, reps, cache, _churn_tol(c1, c2))
        if units <= 0 or filling is None:
            return None
        self.worst = max(self.worst, diff)
        return {"at": self.starts[unit], "blocks": units * self.size, "units": units, "reps": reps, "cycles": d2,
                "delta": {k: c2[k] - c1[k] for k in c2}, "filling": filling}


def _differ(d1: float, d2: float, c0: dict, c1: dict, c2: dict) -> float:
    """How far two heads in a row differ, as a share of the second: their cycles d1, d2, and each count's
    increment (c0, c1, c2: the counters at their starts and the next's); inf where a count is out of its
    tolerance. A count of under SMALL_SHARE of the head's bytes through the L2 (HBM reads where the L2 answers
    most loads) moves with which lines the L2 happens to evict first: causal GQA heads at 32k read 22.5 MB
    of HBM each, 0.3-0.9% apart head to head, while their 2.2 GB through the L2 repeat within UNIT_TOL. Such
    a count is held to SMALL_TOL of itself and counted as its share of the traffic; every other to UNIT_TOL."""
    diff = abs(d2 - d1) / max(d2, 1)
    traffic = sum(c2.get(k, 0.0) - c1.get(k, 0.0) for k in TRAFFIC)
    for key in c2:
        if key.startswith("busy_"):
            continue
        a, b = c1[key] - c0[key], c2[key] - c1[key]
        if max(abs(a), abs(b)) < SMALL_SHARE * traffic:
            if not math.isclose(a, b, rel_tol=SMALL_TOL, abs_tol=1.0):
                return math.inf
            diff = max(diff, abs(b - a) / traffic)
        elif math.isclose(a, b, rel_tol=UNIT_TOL, abs_tol=1.0):
            diff = max(diff, abs(b - a) / max(abs(b), 1.0))
        else:
            return math.inf
    return diff


def _churn_tol(c1: dict, c2: dict) -> float:
    """The tolerance for a head's evictions and write-backs: the L2 evicts a line for each it fills (HBM
    reads, writes), so where those are a small count (_differ) its evictions are one too."""
    traffic = sum(c2.get(k, 0.0) - c1.get(k, 0.0) for k in TRAFFIC)
    fills = sum(c2.get(k, 0.0) - c1.get(k, 0.0) for k in ("hbm_read", "l2_write"))
    return SMALL_TOL if fills < SMALL_SHARE * traffic else UNIT_TOL


def _l2_filling(l0: tuple, l1: tuple, l2: tuple, units: int, cache, tol: float = UNIT_TOL) -> bool | None:
    """L2 states (used, dirty room, evictions, dirty bytes evicted) at three unit starts: False if the L2
    evicts alike in both heads (a steady state; within `tol`), True if it evicts nothing and the left-out
    heads' lines would still fit (they stay: the dirty lines at the end grow with them), None otherwise (the
    L2 fills or starts evicting within the heads left out: their state differs from the watched ones')."""
    evicted = (l1[2] - l0[2], l2[2] - l1[2])
    written = (l1[3] - l0[3], l2[3] - l1[3])
    if evicted[1] and math.isclose(*evicted, rel_tol=tol) and math.isclose(*written, rel_tol=tol, abs_tol=1.0):
        return False
    if evicted[0] or evicted[1]:
        return None
    grow = units + 1
    if l2[0] + (l2[0] - l1[0]) * grow > cache.capacity or l2[1] + (l2[1] - l1[1]) * grow > cache.dirty_max:
        return None
    return True
