"""Building a long loop's ops as one list, column by column.

The loop skip (simulator/loopskip.py) slices the ops it leaves out from a list a program yields from, where a
generator would have to be resumed once per op. A K/V loop's steps issue the same ops in the same places, except
for a few that move with a count (a barrier's fills, a turn's passes, the K/V block): such a loop is built as
columns, one per place in the step, each a slice of ops made once along the count or a short pattern repeated,
and the columns interleaved without Python code per op.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import chain


class Counted:
    """The ops (or tuples of ops) made for each value of a count that runs on: each made once, when first
    asked for, so a loop's run of them is a slice."""

    def __init__(self, make: Callable[[int], object]):
        self.make, self.made = make, []

    def slice(self, start: int, stop: int) -> list:
        made = self.made
        if stop > len(made):
            made += map(self.make, range(len(made), stop))
        return made[start:stop]

    def __getitem__(self, k: int):
        return self.slice(k, k + 1)[0]


def periodic(make: Callable[[int], object], start: int, stop: int, period: int) -> list:
    """make(j) for j in [start, stop), where make(j) == make(j + period): made once per phase."""
    count = max(0, stop - start)
    one = [make(j) for j in range(start, start + min(count, period))]
    return (one * -(-count // period))[:count] if one else []


class OpList(list):
    """A loop's ops, with what a reader may take from their order: `repeat` (start, stop, period) says that
    from start to stop each op is the one `period` places back but for what moves with a count (a barrier
    wait's target, a load's tile coordinates): the same type, shapes, buffers, masks and barriers."""

    repeat: tuple[int, int, int] | None = None


def interleave(columns: list[list], head: list = (), period: int = 0, regular: int = 0) -> OpList:
    """`head`, then the steps' ops in order: step j is the j-th item of every column, column by column. The
    first `regular` steps repeat every `period` steps but for their counts (OpList.repeat)."""
    ops = OpList(head)
    ops += chain.from_iterable(zip(*columns, strict=True))
    if period and regular >= 2 * period:
        ops.repeat = (len(head), len(head) + regular * len(columns), period * len(columns))
    return ops
