"""Periodic skip: leave out whole periods of blocks (or work tiles) that are copies of those running.

A launch (simulator/launch.py) whose blocks all do the same work is watched each time one more block per SM
is done (`skip_plan`, `counters_repeat`). Blocks that run on from tile to tile (Kernel.carry: V3's persistent
blocks) are watched by `CarriedSkip` instead, at the moments a tile is taken.
"""

from __future__ import annotations

import math

# Periodic skip (launch.Launch): periods of up to PERIOD_MAX waves within a head, launch patterns of up to
# PATTERN_MAX waves across heads are recognised.
PERIOD_MAX = 4
PATTERN_MAX = 16


def skip_plan(heads: list, step: int, slots: int, times: list[int], queued: int, block_of=lambda n: n) -> dict | None:
    """Which blocks a periodic run may leave out. `heads`: each block's K/V head, in launch order; `times`:
    the run's start and the cycles at which each further `step` blocks (one per SM) were done; `queued`:
    blocks queued so far, which run. Whole periods (P x step blocks) are left out, such that every block
    from the watched periods on has a copy exactly that many blocks later:
    - whole heads, from a head boundary on, once the times repeat with the period of the launch pattern
      (steps until one ends at a head boundary again; heads launched one after another);
    - or, while the blocks watched, queued and left out all belong to one head (its K/V already in L2),
      once the times repeat with any period up to PERIOD_MAX waves.
    Nothing needs to run after them: the blocks running when they are left out are copies of the last."""
    gaps = [b - a for a, b in zip(times[1:], times[2:], strict=False)]  # the first interval fills the pipeline
    per_head = heads.count(heads[0])
    room = len(heads)
    pattern = per_head // math.gcd(step, per_head)
    in_order = len(heads) % per_head == 0 and all(heads[i] == heads[i - i % per_head] for i in range(len(heads)))
    # blocks that end together in each of `slots` rounds repeat with a multiple of the pattern, each as good
    multiples = range(pattern, PATTERN_MAX * slots + 1, pattern) if in_order else ()
    whole = next((n for n in multiples if repeats(gaps, n, slots)), 0)
    if whole:
        pattern = whole
        unit = pattern * step
        at = -(-queued // per_head) * per_head
        reps = (room - at) // unit
        if reps > 0:
            return {"at": at, "blocks": reps * unit, "period": pattern, "reps": reps, "whole_heads": True}
    period = next((n for n in range(1, PERIOD_MAX * slots + 1) if repeats(gaps, n, slots)), 0)
    if not period:
        return None
    first = block_of((len(times) - 1 - 2 * period) * step)  # first block of the watched periods
    end = heads.index(heads[first]) + heads.count(heads[first])  # one past that head's last block
    reps = (min(room, end) - queued) // (period * step)
    if reps > 0 and heads[queued - 1] == heads[first]:
        return {"at": queued, "blocks": reps * period * step, "period": period, "reps": reps}
    return None


def counters_repeat(marks: list, period: int) -> bool:
    """Whether every byte count moved alike in the last two periods (a loop skip adds its stretches' bytes
    at once, which may put them in another period than the plain run's ops: a period that is not a copy of
    the next). Busy cycles are left out: work in service at a period's end splits them unevenly."""
    (_, a), (_, b), (_, c) = marks[-1 - 2 * period], marks[-1 - period], marks[-1]
    return all(
        math.isclose(c[k] - b[k], b[k] - a[k], rel_tol=1e-9, abs_tol=1e-6) for k in c if not k.startswith("busy_")
    )


def repeats(gaps: list[int], period: int, slots: int = 1) -> bool:
    """Whether the last intervals repeat with that period: the last 2 x `period` exactly, or, where an SM's
    blocks drift against each other (their ends move a few cycles a round and wrap around), the last three
    periods each taking the same cycles in sum. A period must take time: blocks that end together (several
    per SM, started at once) give intervals of 0 cycles, which repeat but say nothing of the blocks after
    them. The sums are compared only over whole rounds of the SMs' `slots` (a period a multiple of them): blocks
    that end together in waves of `slots` per SM end 1 or 2 waves into stretches of other lengths by turns, so
    three stretches in a row may each hold 2 while the mean stretch holds 1.75."""
    if len(gaps) < 2 * period or sum(gaps[-period:]) <= 0:
        return False
    if gaps[-period:] == gaps[-2 * period : -period]:
        return True
    if len(gaps) < 3 * period or period % slots:
        return False
    last, before, first = gaps[-period:], gaps[-2 * period : -period], gaps[-3 * period : -2 * period]
    return sum(last) == sum(before) == sum(first)


class CarriedSkip:
    """The periodic skip for blocks that run on from tile to tile (Kernel.carry).

    Such a block takes its next tile while the last one's tail still runs (V3's producer loads the next Q
    and K/V while the consumers finish), so a tile's end is no boundary between equal states, and the
    launch's queue holds every tile from the start. The watch is kept where the tiles are taken instead: each
    time `step` more tiles (one per SM) have been taken, the virtual cycle, the counters and the L2's state
    are noted as the next one is asked for. In a periodic machine the state when tile k is asked for is
    the state when tile k + P x step is, shifted in time and tile coordinates, with every block at the same
    point of its own tiles; once the intervals repeat exactly twice over, the byte counts move alike and the
    L2 stays in one regime (`skip_plan`, `counters_repeat`, Gpu._l2_regime, the same checks as for blocks
    that start afresh), whole periods of tiles are left out at the moment the plan's first one is asked for:
    their time and every counter are added period by period, the block that asked takes the first tile after
    them, and the others run on with theirs. A block's carried state (ring slots, Q buffers, barrier counts)
    stays that of the tiles it ran: the barriers counted only those, and the state moves by whole tiles of
    equal work, so the block goes on at the same point of its rhythm. Watching starts again after a skip."""

    def __init__(self, gpu, heads: list, step: int, slots: int, counters):
        self.gpu, self.heads, self.step, self.slots, self.counters = gpu, heads, step, slots, counters
        self.total = len(heads)
        self.start = step  # launch index of the first tile noted (the first wave is taken all at once)
        self.asked = -1  # the last launch index asked for (workers ask again before one takes it)
        self.marks: list[tuple[int, dict]] = []  # (virtual cycle, counters) each `step` tiles from `start`
        self.l2_marks: list[tuple] = []
        self.plan: dict | None = None
        self.filling = 0  # tiles left out while the L2 was filling (their dirty lines would be there too)

    def restart(self, index: int) -> None:
        """Watch again from tile `index` (after a skip of this or another shortcut)."""
        self.start, self.plan = index, None
        self.marks.clear()
        self.l2_marks.clear()

    def asking(self, index: int) -> int:
        """A lead role asks for tile `index`: note the machine every `step` tiles and leave out a plan's
        periods when its first tile is reached; returns the tiles left out."""
        if index <= self.asked:
            return 0
        self.asked = index
        if self.plan is None and index >= self.start and (index - self.start) % self.step == 0:
            self._note(index)
        plan = self.plan
        if plan is None or plan["at"] != index:
            return 0
        return self._leave_out(plan, index)

    def _note(self, index: int) -> None:
        gpu = self.gpu
        self.marks.append((gpu.env.now + gpu.skipped_cycles, self.counters()))
        self.l2_marks.append(gpu._l2_state())
        # the tiles running when the first watched period began were taken up to a wave before it
        wave = self.step * self.slots
        plan = skip_plan(
            self.heads,
            self.step,
            self.slots,
            [m[0] for m in self.marks],
            index,
            lambda n: max(0, self.start + n - wave),
        )
        if not plan or plan["at"] + plan["blocks"] > self.total or not counters_repeat(self.marks, plan["period"]):
            return
        if not plan.get("whole_heads") and not self._short_of_head_end(plan):
            return
        regime = gpu._l2_regime(self.l2_marks, plan, index, self.total)
        if regime:
            plan["mark"], plan["regime"] = len(self.marks) - 1, regime
            self.plan = plan

    def _short_of_head_end(self, plan: dict) -> bool:
        """Cut a plan within one head to end a round before the head does; whether any of it is left. The
        round of tiles taken last before the next head's first is no copy of those before it (v3 4 x 16 x 4k
        d128: 0.7% less time than the two before it, which had evicted alike): the left-out tiles must not
        stand for it."""
        first = self.heads[plan["at"]]
        end = self.heads.index(first) + self.heads.count(first)
        unit = plan["blocks"] // plan["reps"]
        reps = (end - self.step * self.slots - plan["at"]) // unit
        if reps <= 0:
            return False
        plan["reps"], plan["blocks"] = min(reps, plan["reps"]), min(reps, plan["reps"]) * unit
        return True

    def _leave_out(self, plan: dict, index: int) -> int:
        gpu = self.gpu
        k, period, reps, blocks = plan["mark"], plan["period"], plan["reps"], plan["blocks"]
        (t0, c0), (t1, c1) = self.marks[k - period], self.marks[k]
        gpu.leave_out_blocks(t1 - t0, {key: c1[key] - c0[key] for key in c1}, reps)
        if plan["regime"] == "filling":
            self.filling += blocks
        gpu.extrapolated_blocks += blocks
        gpu.periodic_skips += 1
        gpu.carried_skips += 1
        self.restart(index + blocks)
        return blocks
