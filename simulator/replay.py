"""The chip's dispatch of unequal blocks, replayed from what a head sample's own blocks cost (dispatch replay).

A head sample (simulator/sampling.py) runs g of the chip's heads on n of its S SMs. Where the blocks are
equal, its waves are the chip's in small. Where they are not (causal: block i of a head visits about i + 1
K/V blocks) and the launch deals them head after head to whichever slot frees first, the sample does not end
as the chip does: the chip holds S slots' worth of heads in flight and ends on the longest blocks of its last
heads; the sample ends on those of its few heads over its few slots. At B1 H16 N5000 d128 causal (v2) the
sample of one head on 8 SMs came out 14% short of the whole chip.

What a block costs, the sample knows: each simulated block's cycles against its K/V steps and the blocks that
shared its SM meanwhile give, by least squares, a fixed part, a part per step, and what each other resident
block adds to a step (`fit`). A fluid model of the dispatch (`makespan`: a block spends its fixed part at its
own pace, then its steps at 1 / (1 + share (m - 1)) of a lone block's pace with m blocks resident on its SM;
the next block in launch order takes the slot a block frees) replays the chip's launch with those costs
(`chip_cycles`), which gives the chip's cycles. Which block a freed slot takes near the end decides whether
the last long blocks run alone or shared, so the replay is run with each block's cost moved a little and
averaged. Against --full on the FA2 grid's 24 such points it came within 1.9%; the sample's own end, scaled
by the ratio of the two replays (the earlier rule, which stretched the fixed part too), came within 3.7%.

A block's start and end are on its own clock (simulator/launch.py): the loop stretches left out inside it
count, the whole blocks left out meanwhile (periodic and unit skips) do not, as those cycles were other
blocks' work. A block running when heads were left out once counted their cycles, the fit failed, and the
run fell back to the sample's own end, up to 3% off.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence

# Below this many simulated blocks, or with a fit that leaves a block's cost rising by less than this per
# step, the sample says too little to replay from: the scale stays 1.
MIN_BLOCKS = 8
MIN_STEP_CYCLES = 1.0
# The fluid replay of a launch whose blocks end at nearly the same time is chaotic (which block a freed slot
# takes decides whether the last long blocks run alone or shared): it is run JITTER_RUNS times with each
# block's work moved by up to JITTER, and the ends averaged.
JITTER_RUNS = 8
JITTER = 0.01
EPS = 1e-6  # cycles: a part left smaller than this is done


def _others(records: Sequence[tuple]) -> list[float]:
    """Per record (cta, sm, start, end): the time-averaged number of other blocks resident on its SM."""
    by_sm: dict[int, list[tuple[int, int]]] = {}
    for _, sm, t0, t1 in records:
        by_sm.setdefault(sm, []).append((t0, t1))
    out = []
    for _, sm, t0, t1 in records:
        overlap = sum(max(0, min(t1, b1) - max(t0, b0)) for b0, b1 in by_sm[sm]) - (t1 - t0)
        out.append(overlap / max(1, t1 - t0))
    return out


def fit(records: Sequence[tuple], steps: Callable[[tuple], int]) -> dict | None:
    """(fixed, per_step, share) with cycles = fixed + per_step k (1 + share x) for a block of k steps that
    shared its SM with x other blocks on average, fitted to the records; None where they cannot say."""
    if len(records) < MIN_BLOCKS:
        return None
    import numpy as np  # here, not at the top: runs of equal blocks never replay, and numpy takes ~40 ms to load

    k = np.array([steps(r[0]) for r in records], dtype=float)
    x = np.array(_others(records))
    cycles = np.array([r[3] - r[2] for r in records], dtype=float)
    a = np.stack([np.ones_like(k), k, k * x], axis=1)
    (fixed, per_step, extra), *_ = np.linalg.lstsq(a, cycles, rcond=None)
    if per_step < MIN_STEP_CYCLES or extra < 0 or fixed < 0:
        return None
    rms = float(np.sqrt(np.mean((a @ (fixed, per_step, extra) - cycles) ** 2)) / cycles.mean())
    return {"fixed": float(fixed), "per_step": float(per_step), "share": float(extra / per_step),
            "blocks": len(records), "rms": rms}


def makespan(blocks: Sequence[tuple[float, float]], sms: int, slots: int, share: float) -> float:
    """When the last of `blocks` (each (fixed, work): cycles alone, in launch order) ends on `sms` SMs of `slots`
    slots each: the first blocks fill every SM's first slot, then the second, as the simulator's workers take
    them; each later block takes the slot the earliest ending block frees. A block first spends its fixed
    cycles (its launch and prologue: latency, which a neighbour does not stretch), then does its work at
    1 / (1 + share (m - 1)) of its pace alone, m the blocks resident on its SM."""
    pace = [0.0] + [1.0 / (1.0 + share * (m - 1)) for m in range(1, slots + 1)]
    left: list[list[list[float]]] = [[] for _ in range(sms)]  # [fixed, work] left of each SM's resident blocks
    since = [0.0] * sms  # when each SM's blocks were last brought up to date
    version = [0] * sms
    queue = iter(blocks)
    for _ in range(slots):
        for s in range(sms):
            b = next(queue, None)
            if b is None:
                break
            left[s].append(list(b))
    heap: list[tuple[float, int, int]] = []

    def plan(s: int, now: float) -> None:
        """The SM's next event: a resident block ending its fixed part, or its work."""
        version[s] += 1
        if left[s]:
            rate = pace[len(left[s])]
            heapq.heappush(heap, (now + min(f if f > 0 else w / rate for f, w in left[s]), s, version[s]))

    for s in range(sms):
        plan(s, 0.0)
    end = 0.0
    while heap:
        now, s, v = heapq.heappop(heap)
        if v != version[s]:
            continue
        elapsed, rate = now - since[s], pace[len(left[s])]
        rest = []
        for block in left[s]:
            if block[0] > 0:
                block[0] -= elapsed
            else:
                block[1] -= elapsed * rate
            if block[0] <= EPS and block[1] <= EPS:  # done: the freed slot takes the next block
                end = now
                b = next(queue, None)
                if b is not None:
                    rest.append(list(b))
            else:
                block[0] = block[0] if block[0] > EPS else 0.0
                rest.append(block)
        left[s], since[s] = rest, now
        plan(s, now)
    return end


def chip_cycles(records: Sequence[tuple], steps: Callable[[tuple], int], chip: Sequence[tuple], chip_sms: int,
                slots: int) -> dict | None:
    """When the chip's launch of `chip` (its blocks in launch order) on `chip_sms` SMs ends, by the fluid replay
    with block costs fitted to the sample's `records`; None where the launch deals nothing or the fit says too
    little."""
    if len(chip) <= chip_sms * slots:  # one wave: every block starts at once, nothing is dealt
        return None
    cost = fit(records, steps)
    if cost is None:
        return None
    import numpy as np

    fixed = np.full(len(chip), cost["fixed"])
    work = cost["per_step"] * np.array([steps(c) for c in chip], dtype=float)
    rng = np.random.default_rng(0)  # the same jitter every run: a prediction is reproducible
    ends = []
    for _ in range(JITTER_RUNS):
        moved = 1 + JITTER * rng.uniform(-1, 1, len(chip))
        ends.append(makespan(list(zip(fixed * moved, work * moved, strict=True)), chip_sms, slots, cost["share"]))
    return {**cost, "cycles": float(np.mean(ends)), "spread": float(np.std(ends) / np.mean(ends))}
