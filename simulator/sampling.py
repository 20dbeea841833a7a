"""Which K/V heads a sampled run simulates, on how many SMs, and whether that sample is representative.

A sample of g of the chip's G (batch, K/V head) groups on n of its S SMs stands for the chip when the chip
is S/n copies of it. Two things of the sample decide how close it comes (experiments/sampling_exactness.py):

- the share: g / G against n / S. Blocks of unequal length (causal) are dealt to whichever slot frees
  first, so the time follows the work per SM: in v3's causal order a share 3% off is a time 3% off, which
  `HeadSample.time_scale` takes out (heads launched one after another show no such rule on the FA2 grid);
- the wave: the blocks resident at once. A chip's wave holds whole heads (all of a head's blocks read its
  K/V while it is in L2); a sample whose wave cuts heads fetches a head's K/V in one part of its blocks'
  time and not in the rest, each fetch standing for S/n of the chip's. Heads interleaved in sections (v3's
  causal order: a row of every head of a section, then the next row) need the same whole number of sampled
  heads in every section instead.

- the tail: equal blocks end a wave together, so a launch of few waves ends when its last wave does, a whole
  wave's time after it starts where that wave puts two blocks on some SM, about half that where it puts one on
  each. A sample of the chip's wave count whose last wave is shallower than the chip's came out 15% short
  (_tail_depth, SAME_DEPTH_UP_TO).

The selection takes the smallest sample, from the asked SM count up, whose share is within SHARE_TOLERANCE
and whose waves hold whole heads (or whole section rows): the check `HeadSample.representative`. It grows
while the sample simulates no more block steps than REPRESENTATIVE_WORK (or the asked sample's own, if
larger) on at most a quarter of the chip. Where none is that cheap (heads longer than a wave of a quarter
of the chip), it falls back to the nearest share with the chip's wave count and says it is not
representative. Where the launch interleaves heads in sections and the blocks differ (v3's causal order),
the sample's cycles are scaled by its share error (`HeadSample.time_scale`); where heads are dealt one after
another and the blocks differ (v2's causal launch), the chip's cycles are its dispatch replayed with what the
sample's blocks cost (simulator/replay.py, `HeadSample.replayed`). What none of this sees (the
bounds below): the L2's write-backs, which cost a sample more than the chip on some short-head points
(exact when they are free); a sample's fewer slots dealing a head's blocks further apart than the chip's,
so they find K/V lines landed where the chip's wait for them in flight; and whole-chip runs that are
bistable (their blocks in lockstep, or the two blocks of each SM staggered once the L2 starts evicting),
which a sample may resolve the other way. Nor what a chip in lockstep does where its waves cut heads (equal
blocks, heads one after another, slots no whole number of heads): every sample size comes out either slow
(its waves hold whole heads) or fast (they cut heads more often than the chip's), the chip between; such
samples are a kind of their own (`HeadSample.kind`) with the bound that kind has shown (BOUNDS). Grids of
little work run whole-chip instead of sampled (simulator/api.py WHOLE_CHIP_WORK), and grids of equal blocks up
to four times that work (LOCKSTEP_WORK_FACTOR), where such samples missed by the most.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# Largest accepted mismatch between a representative sample's share of the heads and its share of the SMs.
SHARE_TOLERANCE = 0.01
# Fallback (no representative sample affordable): the share within this, preferring the chip's wave count.
FALLBACK_TOLERANCE = 0.04
# A sample runs as many waves as the chip when the chip runs at most this many: past it, a last partial
# wave is at most 1/32 of the time, less than what a larger sample would cost to get exactly.
SAME_WAVES_UP_TO = 32
# Equal blocks on a chip of at most this many waves: the sample's last wave as deep as the chip's on its fullest
# SM (_tail_depth), since that wave is a quarter or more of the launch. (Over more waves the FA2 grid's A100 and
# d64 samples moved -4.8 .. +2.4% with the rule, as often away from the chip as toward it.)
SAME_DEPTH_UP_TO = 4
# Block steps (thread blocks x K/V steps each) a sample may grow to in order to be representative: those of
# the FA2 grid's longest point (one 16k head of 128 blocks of 128 steps), whose default sample takes ~0.4 s.
REPRESENTATIVE_WORK = 128 * 128
# ... and to at most this fraction of the chip's SMs (1/4: 33 of an H100's 132).
GROW_UP_TO_CHIP_FRACTION = 4


@dataclass(frozen=True)
class HeadSample:
    """g of `groups` K/V head groups on n of `sm_count` SMs, and what makes it (not) the chip in small."""

    g: int
    n: int
    groups: int
    sm_count: int
    whole_waves: bool  # its waves hold whole heads (or whole rows of each section), as the chip's do
    # its time follows its work per SM: blocks of unequal length (causal) from heads interleaved in sections
    follows_work: bool = False
    # equal blocks, heads one after another, and the chip's waves cut heads (its slots are no whole number of
    # heads): a sample's waves hold whole heads or cut them far more often, and either moves its time (below)
    chip_cuts_heads: bool = False
    # blocks of unequal length dealt head after head: the chip's dispatch replayed with what the sample's
    # blocks cost (simulator/replay.py)
    replayed: bool = False

    @property
    def time_scale(self) -> float:
        """The chip's cycles per sampled cycle. Where the launch deals a row of every head of a section before
        the next row and the blocks differ in length (v3's causal order), every SM's blocks come from every
        head of its section and are dealt to whichever slot frees first, so the time follows the work per SM:
        the sample, with (1 + share_error) times the chip's work per SM, takes that much longer. Elsewhere 1:
        heads launched one after another, or equal blocks in waves, follow their waves, not the share
        (experiments/sampling_exactness.py)."""
        return 1 / (1 + self.share_error) if self.follows_work else 1.0

    @property
    def share_error(self) -> float:
        """Sampled share of the heads over sampled share of the SMs, minus one."""
        return self.g * self.sm_count / (self.n * self.groups) - 1

    @property
    def representative(self) -> bool:
        return self.whole_waves and abs(self.share_error) <= SHARE_TOLERANCE + 1e-12

    @property
    def kind(self) -> str:
        """Which row of BOUNDS the sample falls in."""
        if self.follows_work:
            return "scaled by the share"
        if self.replayed:
            return "dispatch replayed"
        if self.chip_cuts_heads:
            return "chip's waves cut heads"
        return "representative" if self.representative else "not representative"

    def describe(self) -> str:
        why = "representative" if self.representative else (
            "waves cut heads" if not self.whole_waves else "head share off")
        if self.chip_cuts_heads:
            why += "; the chip's waves cut heads, in lockstep"
        scaled = "; time scaled by the share" if self.time_scale != 1.0 else ""
        if self.replayed:
            scaled += "; the chip's dispatch replayed"
        return (f"{self.g} of {self.groups} heads on {self.n} of {self.sm_count} SMs "
                f"(share {100 * self.share_error:+.1f}%, {why}{scaled})")


def _waves(blocks: int, sms: int, slots: int) -> int:
    return -(-blocks // (sms * slots))


def _tail_depth(blocks: int, sms: int, slots: int) -> int:
    """The slots of its fullest SM that the last wave fills: a last wave of more blocks than SMs puts a second
    block on some of them, and those end a wave's time after it starts, where a last wave of one block an SM
    ends sooner (each block alone on its SM)."""
    last = blocks - (_waves(blocks, sms, slots) - 1) * sms * slots
    return -(-last // sms)


def _whole_waves(g: int, n: int, groups: int, blocks_per_group: int, slots: int, section: int) -> bool:
    """Whether the sample's resident blocks are whole heads as the chip's: with heads launched one after
    another, a wave of the sample holds a whole number of heads; with heads interleaved in sections of
    `section` groups, every section holds the same whole number of sampled heads."""
    if not blocks_per_group:
        return False
    if section > 1:
        return (g * section) % groups == 0
    return (n * slots) % blocks_per_group == 0


def head_sample(groups: int, sm_count: int, sms: int, blocks_per_group: int = 0, slots: int = 1,
                section: int = 1, steps_per_block: float = 1.0, unequal_blocks: bool = False) -> HeadSample:
    """The sample for a grid of `groups` K/V head groups of `blocks_per_group` blocks each (`slots` per SM,
    each of about `steps_per_block` K/V steps; `unequal_blocks`: causal ones), from `sms` SMs up: the
    smallest representative one within the work budget, else the fallback (see the module's docstring)."""
    chip_waves = _waves(groups * blocks_per_group, sm_count, slots) if blocks_per_group else 0
    if chip_waves > SAME_WAVES_UP_TO:
        chip_waves = 0

    # equal blocks end a wave together, so a last wave's depth sets when the launch ends (causal blocks of
    # unequal length are dealt to whichever slot frees first, and have no such tail)
    chip_depth = (_tail_depth(groups * blocks_per_group, sm_count, slots)
                  if 0 < chip_waves <= SAME_DEPTH_UP_TO and not unequal_blocks else 0)

    def same_waves(g: int, n: int) -> bool:
        """As many waves as the chip, and for equal blocks the last as deep on its fullest SM."""
        return not chip_waves or (_waves(g * blocks_per_group, n, slots) == chip_waves
                                  and (not chip_depth or _tail_depth(g * blocks_per_group, n, slots) == chip_depth))

    chip_cuts = bool(blocks_per_group) and not unequal_blocks and section == 1 and (
        sm_count * slots) % blocks_per_group != 0

    def make(g: int, n: int) -> HeadSample:
        return HeadSample(g, n, groups, sm_count,
                          _whole_waves(g, n, groups, blocks_per_group, slots, section) and same_waves(g, n),
                          section > 1 and unequal_blocks, chip_cuts)

    def work(g: int) -> float:
        return g * blocks_per_group * steps_per_block

    budget = max(REPRESENTATIVE_WORK, work(max(1, round(sms * groups / sm_count))))
    for n in range(sms, max(sms, sm_count // GROW_UP_TO_CHIP_FRACTION) + 1):
        g = max(1, min(groups, round(n * groups / sm_count)))
        if work(g) > budget or g >= groups:
            break
        choice = make(g, n)
        if choice.representative:
            return choice
    return _fallback(groups, sm_count, sms, make, same_waves)


def _fallback(groups: int, sm_count: int, sms: int, make, same_waves) -> HeadSample:
    """The smallest sample whose share is within FALLBACK_TOLERANCE and that runs the chip's wave count,
    else the one nearest in share (groups from the asked SMs' share up to four times it)."""
    g0 = max(1, -(-sms * groups // sm_count))
    candidates = []  # (g, n, relative error), smallest samples first
    for g in range(g0, min(groups, 4 * g0) + 1):
        exact = g * sm_count / groups
        for n in sorted({max(1, math.floor(exact)), max(1, math.ceil(exact))}, key=lambda n: abs(n - exact)):
            candidates.append((g, min(n, sm_count), abs(n - exact) / exact))
    for g, n, err in candidates:
        if err <= FALLBACK_TOLERANCE and same_waves(g, n):
            return make(g, n)
    g, n, _ = min(candidates, key=lambda c: (not same_waves(c[0], c[1]), c[2]))
    return make(g, n)


# Worst difference from --full per kind of sample, measured on the FA2 grid's 64 sampled points (the other 56
# run whole-chip: simulator/api.py WHOLE_CHIP_WORK, LOCKSTEP_WORK_FACTOR) in
# experiments/results/sampling-exactness.json, and in the selections measured before (session 38's table among
# them), whose widest each bound keeps:
# - scaled by the share (v3's causal order): 0.7% (14 of 14 within 2%);
# - the chip's waves cut heads (equal blocks in lockstep): 0.9% on the grid's 26 past the whole-chip work, 4.6%
#   below it (h100 v3 B=8 H=16 N=2048 d128, now whole-chip). Its samples are bimodal
#   (experiments/results/sampling-alignment.json): whose waves hold whole heads come out 3-9% slow, the others
#   mostly 3-8% fast, the chip between; no sample size takes such a chip within 2%;
# - representative otherwise: 3.2% (a100 v2 B=8 H=16 N=2048 d128 causal, before the dispatch replay), 2.9% in
#   the table before this whole-chip work (a100 v2 B=16 H=16 N=1024 d128, now whole-chip);
# - not representative otherwise (long heads no affordable sample holds whole): 6.5% (a100 v2 16k d64 causal,
#   before the dispatch replay);
# - dispatch replayed (v2's causal launch, heads one after another): 1.9% (a100 v2 B=2 H=16 N=8192 d128 causal;
#   24 of 24), 4.2% off the grid at h200 v2 B=1 H=16 N=5000 d128 causal (few blocks per slot), and 4.9% under
#   the earlier replay rule.
BOUNDS = {"scaled by the share": 0.01, "chip's waves cut heads": 0.09, "representative": 0.04,
          "not representative": 0.09, "dispatch replayed": 0.05}


def sample_info(choice: HeadSample, replay: dict | None = None) -> dict:
    """The sample as the output reports it (--json: sim.sample), with the bound its kind has shown and, where
    the chip's dispatch was replayed, what the replay fitted and the chip's cycles it gave."""
    replayed = {"replay": {k: round(v, 6) if isinstance(v, float) else v for k, v in replay.items()}} if replay else {}
    return {**replayed, "heads": choice.g, "of_heads": choice.groups, "sms": choice.n, "of_sms": choice.sm_count,
            "share_error": round(choice.share_error, 6), "whole_waves": choice.whole_waves,
            "representative": choice.representative, "chip_cuts_heads": choice.chip_cuts_heads,
            "kind": choice.kind, "time_scale": round(choice.time_scale, 6), "bound": BOUNDS[choice.kind],
            "describe": choice.describe()}
