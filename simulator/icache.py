"""An SM's instruction caches, as far as the timing interpreter needs them: which stretches of a kernel's code
(ir.Code) the SM keeps, least recently run dropped first, and when a stretch it lacks has arrived.

The instruction-fetch microbenchmark (experiments/ifetch_probe.py) finds code the SM keeps issuing at the
schedulers' rate and each 128-byte line it has to fetch adding a fixed number of cycles, the same for one
warp or four (the block's warps share a line) and for one block or one per SM (no contention between SMs);
a loop whose body fits is fetched on its first pass only, a larger one on every pass.
"""

from __future__ import annotations

import math
from collections import OrderedDict

CODE_LINE_BYTES = 128  # eight 16-byte SASS instructions


class CodeCache:
    def __init__(self, capacity_bytes: int, miss_cycles_per_line: float):
        self.capacity = capacity_bytes
        self.miss = miss_cycles_per_line
        self.kept: OrderedDict[str, tuple[int, int]] = OrderedDict()  # name -> (bytes, cycle it has arrived)
        self.held = 0

    def fetch(self, name: str, nbytes: int, now: int) -> int:
        """The cycle at which stretch `name` of nbytes is there for warps that reach it at `now`."""
        if not self.miss or nbytes <= 0:
            return now
        kept = self.kept.get(name)
        if kept is not None:
            self.kept.move_to_end(name)
            return max(now, kept[1])  # another block's warps may still be fetching it
        ready = now + math.ceil(math.ceil(nbytes / CODE_LINE_BYTES) * self.miss)
        if nbytes <= self.capacity:
            self.kept[name] = (nbytes, ready)
            self.held += nbytes
            while self.held > self.capacity:
                _, (size, _) = self.kept.popitem(last=False)
                self.held -= size
        return ready
