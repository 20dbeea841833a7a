"""The L2 cache: LRU over lines of global tensors, write-back, with misses to HBM merged while in flight.

A line is a (tensor, batch, head, 16-row, 256-column) block of a global tensor, so a K/V tile that another
thread block already loaded is found again whatever tile shape reads it. Stores allocate dirty lines without
reading HBM; a dirty line costs an HBM write when it is evicted. Dirty lines left when the kernel ends are
reported separately: their write-back happens after the kernel (ncu's dram__bytes_write misses them too).
"""

from __future__ import annotations

from collections import OrderedDict

from algorithms.ir import GTile

LINE_ROWS = 16
LINE_COLS = 256


class L2Cache:
    """copies: in a sampled run each simulated line stands for `copies` lines of the whole chip (the
    unsimulated SMs' private data); it occupies and costs that many. Byte counters are in sample units
    (bytes x copies x share), which the caller scales back to the chip."""

    def __init__(self, capacity_bytes: float, share: float = 1.0):
        self.capacity = capacity_bytes
        self.share = share
        self.lines: OrderedDict[tuple, list] = OrderedDict()  # key -> [chip bytes, dirty, ready_cycle]
        self.used = 0
        self.read_bytes = 0  # bytes read by SMs through L2 (hits and misses)
        self.write_bytes = 0  # bytes stored into L2
        self.miss_bytes = 0  # bytes fetched from HBM
        self.evicted_dirty_bytes = 0  # written back to HBM during the kernel
        self._charged = 0

    @staticmethod
    def _lines(g: GTile):
        """(key, bytes) of every line a tile touches."""
        r_end, c_end = g.row + g.rows, g.col + g.cols
        r = g.row
        while r < r_end:
            r_next = min(r_end, (r // LINE_ROWS + 1) * LINE_ROWS)
            c = g.col
            while c < c_end:
                c_next = min(c_end, (c // LINE_COLS + 1) * LINE_COLS)
                yield (g.tensor, g.batch, g.head, r // LINE_ROWS, c // LINE_COLS), (r_next - r) * (c_next - c) * g.elem_bytes
                c = c_next
            r = r_next

    def read(self, g: GTile, now: int, copies: float = 1.0) -> tuple[int, float, list]:
        """Look a tile up. Returns (cycle that lines still in flight land, bytes to fetch from HBM in sample
        units, the missed line entries, whose ready cycle the caller sets)."""
        hit = miss = 0
        pending_ready = 0
        missed = []
        for key, nbytes in self._lines(g):
            entry = self.lines.get(key)
            if entry is None:
                miss += nbytes
                entry = [nbytes * copies, False, None]
                self._insert(key, entry)
                missed.append(entry)
            else:
                self.lines.move_to_end(key)
                hit += nbytes
                if entry[2] is not None and entry[2] > now and entry[2] > pending_ready:
                    pending_ready = entry[2]
        self.read_bytes += hit + miss
        fetched = miss * copies * self.share
        self.miss_bytes += fetched
        return pending_ready, fetched, missed

    def write(self, g: GTile, copies: float = 1.0) -> None:
        """Store a tile: its lines become dirty (allocated without reading HBM)."""
        for key, nbytes in self._lines(g):
            entry = self.lines.get(key)
            if entry is None:
                self._insert(key, [nbytes * copies, True, None])
            else:
                entry[1] = True
                self.lines.move_to_end(key)
        self.write_bytes += g.nbytes

    def _insert(self, key: tuple, entry: list) -> None:
        self.lines[key] = entry
        self.used += entry[0]
        while self.used > self.capacity and self.lines:
            _, old = self.lines.popitem(last=False)
            self.used -= old[0]
            if old[1]:
                self.evicted_dirty_bytes += old[0] * self.share

    def take_evicted(self) -> int:
        """Dirty bytes evicted since the last call (the HBM writes to charge now)."""
        n = self.evicted_dirty_bytes - self._charged
        self._charged = self.evicted_dirty_bytes
        return n

    @property
    def dirty_bytes(self) -> int:
        """Dirty bytes still in L2, in sample units."""
        return sum(e[0] for e in self.lines.values() if e[1]) * self.share
