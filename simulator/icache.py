"""An SM's instruction caches, as far as the timing interpreter needs them: which stretches of a kernel's code
(ir.Code) the SM keeps, least recently run dropped first, and when a stretch it lacks has arrived.

The instruction-fetch microbenchmark (experiments/ifetch_probe.py) finds code the SM keeps issuing at the
schedulers' rate and each 128-byte line it has to fetch adding a fixed number of cycles, the same for one
warp or four (the block's warps share a line) and for one block or one per SM (no contention between SMs);
a loop whose body fits is fetched on its first pass only, a larger one on every pass.

With the profile's fetch_model 1 (`stream`), the lines a stretch lacks stream in through the SM's fetch, one
every icache_fetch_cycles_per_line cycles and one stretch after another, while the warps run it: code that
issues more slowly than its lines come (the attention kernels' products and softmax) waits for none of them
(session18/ifetch/: the attention-shaped fetch kernels). Making room evicts only the lines it needs, from the
stretches run least recently, as code a little larger than the cache runs only a little slower there.
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
        self.free_at = 0  # the cycle the SM's fetch is done with the lines asked for so far (stream)

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

    def stream(self, name: str, nbytes: int, now: int, cycles_per_line: float) -> int:
        """The cycle at which the last line of stretch `name` (nbytes) has come, for warps that reach it at
        `now` (fetch_model 1): its lines the SM no longer keeps queue behind the SM's earlier fetches, one every
        cycles_per_line; lines another block asked for are shared."""
        if not cycles_per_line or nbytes <= 0:
            return now
        have, arrived = self.kept.pop(name, (0, now))
        self.held -= have
        lines = math.ceil(max(0, nbytes - have) / CODE_LINE_BYTES)
        if lines:
            self.free_at = max(now, self.free_at) + math.ceil(lines * cycles_per_line)
            arrived = self.free_at
        size = min(nbytes, self.capacity)
        self.kept[name] = (size, max(now, arrived))
        self.held += size
        self._make_room(name)
        return max(now, arrived)

    def front(self, name: str, nbytes: int, now: int) -> int:
        """fetch_model 2: the lines of stretch `name` (nbytes) the SM lacks as the warps reach it, now kept (the
        least recently run stretches make room); the warps fetch them where they reach them (queue)."""
        have, _ = self.kept.pop(name, (0, now))
        self.held -= have
        lines = math.ceil(max(0, nbytes - have) / CODE_LINE_BYTES)
        size = min(nbytes, self.capacity)
        self.kept[name] = (size, now)
        self.held += size
        self._make_room(name)
        return lines

    def _make_room(self, name: str) -> None:
        """Drop lines of the stretches run least recently (not `name`'s) until the kept code fits the cache."""
        for other in list(self.kept):  # least recently run first
            if self.held <= self.capacity:
                break
            if other != name:
                left, at = self.kept[other]
                take = min(left, self.held - self.capacity)
                self.held -= take
                if left > take:
                    self.kept[other] = (left - take, at)
                else:
                    del self.kept[other]

    def queue(self, lines: float, now: int, cycles_per_line: float) -> int:
        """The cycle the SM's fetch has brought `lines` more lines asked for at `now`, behind its earlier ones."""
        self.free_at = max(now, self.free_at) + math.ceil(lines * cycles_per_line)
        return self.free_at
