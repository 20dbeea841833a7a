"""The L2 cache: LRU over lines of global tensors, write-back, with misses to HBM merged while in flight.

A line is a (tensor, batch, head, 16-row, 64-column) block of a global tensor, so a K/V tile that another
thread block already loaded is found again whatever tile shape reads it. Stores allocate dirty lines without
reading HBM; a dirty line costs an HBM write when it is evicted. Dirty lines left when the kernel ends are
reported separately: their write-back happens after the kernel (ncu's dram__bytes_write misses them too).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from functools import lru_cache
from operator import and_, invert, itemgetter

from flashsim.algorithms.ir import GTile

LINE_ROWS = 16  # a line key covers 16 rows x 64 columns (128 B rows at 16 bits, the hardware line width);
LINE_COLS = 64
SUB_ROWS = 4  # presence is tracked per 4-row slice, so row-block reads and writes (softmax) count exactly,
SEG_COLS = 16  # and per 16-column segment, so GEMM k-slices narrower than a line miss what they miss
SEGS = LINE_COLS // SEG_COLS
FLUSH = "L2_FLUSH"  # the tensor of the lines a flush leaves before the launch (Gpu.flushed_l2)


@lru_cache(maxsize=1 << 14)
def _pattern(row: int, rows: int, col: int, cols: int, elem_bytes: float) -> tuple:
    """The lines a tile covers, relative to its first line: (line row offset, line column offset, presence
    bits, bytes per bit) for a tile starting at (row, col) within its first line. Tiles of one shape at one
    alignment share it, so the split is computed once per shape."""
    out = []
    r_end, c_end = row + rows, col + cols
    r = row
    while r < r_end:
        line = r // LINE_ROWS
        r_next = min(r_end, (line + 1) * LINE_ROWS)
        first, last = (r % LINE_ROWS) // SUB_ROWS, ((r_next - 1) % LINE_ROWS) // SUB_ROWS
        rows_per_slice = (r_next - r) / (last - first + 1)
        c = col
        while c < c_end:
            c_next = min(c_end, (c // LINE_COLS + 1) * LINE_COLS)
            q0, q1 = (c % LINE_COLS) // SEG_COLS, ((c_next - 1) % LINE_COLS) // SEG_COLS
            segs = ((1 << (q1 - q0 + 1)) - 1) << q0
            bits = 0
            for s in range(first, last + 1):
                bits |= segs << (s * SEGS)
            out.append((line, c // LINE_COLS, bits, rows_per_slice * (c_next - c) / (q1 - q0 + 1) * elem_bytes))
            c = c_next
        r = r_next
    return tuple(out)


@lru_cache(maxsize=1 << 16)
def _tile_lines(g: GTile) -> tuple:
    r0, c0 = g.row // LINE_ROWS, g.col // LINE_COLS
    head = (g.tensor, g.batch, g.head)
    pattern = _pattern(g.row % LINE_ROWS, g.rows, g.col % LINE_COLS, g.cols, g.elem_bytes)
    return tuple(((*head, r0 + dr, c0 + dc), bits, nbytes) for dr, dc, bits, nbytes in pattern)


def _keys_and_masks(lines: tuple) -> tuple[tuple, tuple]:
    return tuple(key for key, _, _ in lines), tuple(mask for _, mask, _ in lines)


_PRESENT = itemgetter(3)  # a line entry's pieces present


def held(entries: list, masks: tuple) -> bool:
    """Whether every line entry (None: a line the L2 lacks) holds the pieces its mask asks for, without
    Python code per line."""
    return None not in entries and not any(map(and_, masks, map(invert, map(_PRESENT, entries))))

# Tiles whose lines an L2 keeps by id before it starts again.
TILES_KEPT = 1 << 16


class L2Cache:
    """LRU over lines. Each line records which 4-row x 16-column pieces it holds, whether it is dirty, and the cycle its
    fetch lands. copies: in a sampled run each simulated line occupies the room of `copies` lines of the
    chip (the cache is the chip's; the sample's lines stand for what the rest of the chip keeps there at the
    same time). Byte counters are the sample's own traffic, which the caller scales to the chip."""

    def __init__(self, capacity_bytes: float, dirty_max_bytes: float | None = None):
        self.capacity = capacity_bytes
        # at most this much dirty data stays in L2: beyond it the oldest dirty lines are written back (and
        # stay, clean)
        self.dirty_max = dirty_max_bytes if dirty_max_bytes is not None else capacity_bytes
        self.dirty: OrderedDict[tuple, list] = OrderedDict()  # dirty lines, oldest first
        self.dirty_room = 0.0
        # key -> [room taken (bytes x copies), dirty, ready cycle, pieces present (bits), copies]
        self.lines: OrderedDict[tuple, list] = OrderedDict()
        self.used = 0.0
        self.read_bytes = 0  # bytes read by SMs through L2 (hits and misses)
        self.write_bytes = 0  # bytes stored into L2
        self.miss_bytes = 0.0  # bytes fetched from HBM
        self.evicted_dirty_bytes = 0.0  # written back to HBM during the kernel
        self.flush_written_back = 0.0  # the part of it that the flush's dirty lines are
        self.evictions = 0  # lines evicted to make room
        self.evicted_room = 0.0  # the room they took (bytes x copies): a whole capacity of it turns the L2 over
        self._charged = 0.0
        self._tiles: dict = {}  # id -> (tile, its lines, its bytes, their keys, their masks) (_tile)
        # tensor -> what a missed byte of it counts in miss_bytes (a fold of twin SMs, Gpu.fold: lines the twins
        # share are fetched once for all of them); tensors not in it count 1
        self.miss_weights: dict = {}

    def _lines(self, g: GTile) -> tuple:
        """(key, presence bits, bytes per bit) of every line a tile touches (tiles recur: a head's K/V tiles
        are read by all its blocks, so the split is kept)."""
        return self._tile(g)[1]

    def _tile(self, g: GTile) -> tuple:
        """(the tile, its _lines, its bytes, the lines' keys, their masks, their bytes when wholly missed), kept by
        its id: schedules reuse tile
        values (a head's K/V), and an id costs less than a tile's hash. The kept entry holds the tile, so the id
        stays its own while kept."""
        got = self._tiles.get(id(g))
        if got is None or got[0] is not g:
            if len(self._tiles) >= TILES_KEPT:
                self._tiles.clear()
            lines = _tile_lines(g)
            # the last field: each line's bytes when all of it misses (what replay() brings in at once)
            got = self._tiles[id(g)] = (g, lines, g.nbytes, *_keys_and_masks(lines),
                                        tuple(mask.bit_count() * nbytes for _, mask, nbytes in lines))
        return got

    def read(self, g: GTile, now: int, copies: float = 1.0) -> tuple[int, list, float, list]:
        """Look a tile up. Returns (cycle that lines already landing land, fetches still on their way from
        HBM that hold lines it reads, bytes to fetch from HBM in sample units, the missed line entries, whose
        ready field the caller sets)."""
        miss = 0.0
        pending_ready = 0
        fetching = []
        missed = []
        lines = self.lines
        got = self._tiles.get(id(g))  # _tile's lookup, inlined: reads are the L2's most frequent call
        if got is None or got[0] is not g:
            got = self._tile(g)
        covered, tile_bytes = got[1], got[2]
        for key, mask, slice_bytes in covered:
            entry = lines.get(key)
            if entry is None:
                entry = [0.0, False, None, 0, copies]
                lines[key] = entry
            else:
                lines.move_to_end(key)
                ready = entry[2]
                if ready is not None and entry[3] & mask:
                    if type(ready) is int:
                        if ready > now and ready > pending_ready:
                            pending_ready = ready
                    elif ready not in fetching:
                        fetching.append(ready)
            absent = mask & ~entry[3]
            if absent:
                miss += self._fill(entry, absent, slice_bytes, copies)
                missed.append(entry)
        self.read_bytes += tile_bytes
        if miss and self.miss_weights:
            self.miss_bytes += miss * self.miss_weights.get(g.tensor, 1.0)
        else:
            self.miss_bytes += miss
        return pending_ready, fetching, miss, missed

    def replay(self, loads: list, now: int, copies: dict, default: float, all_held: bool = False) -> None:
        """Loads a loop skip leaves out, in issue order: each changes the L2 as read() would, without the
        answers (what it waits for) nobody reads, and the pieces it misses land at `now`. copies: the room
        each line of a tensor takes (default for tensors not in it). all_held: every line the loads read is
        known to be there (loopskip._fits looked), so they only move lines."""
        lines, tiles, capacity = self.lines, self._tiles, self.capacity
        get, to_end = lines.get, lines.move_to_end  # bound once: a replay touches millions of lines
        read_bytes, miss_bytes = self.read_bytes, self.miss_bytes  # summed in the same order as read()'s
        weights = self.miss_weights
        for op in loads:
            g = op.src
            got = tiles.get(id(g))  # _tile's lookup, inlined
            if got is None or got[0] is not g:
                got = self._tile(g)
            _, covered, tile_bytes, keys, masks, fills = got
            if all_held:
                deque(map(to_end, keys), 0)
                read_bytes += tile_bytes
                continue
            entries = list(map(get, keys))
            if held(entries, masks):
                # every piece there (the usual case): the lines only move to the LRU end, in order
                deque(map(to_end, keys), 0)
                read_bytes += tile_bytes
                continue
            scale = copies.get(g.tensor, default)
            if entries.count(None) == len(entries) and 2 * sum(fills) * scale <= capacity:
                # none of it there (a stream through an L2 too small for it): its lines go in at once, each
                # evicting as it grows, in the order and with the sums below; the evictions cannot reach the
                # tile's own lines, which take at most half the cache
                new = [[nbytes * scale, False, now, mask, scale] for nbytes, mask in zip(fills, masks, strict=True)]
                lines.update(zip(keys, new, strict=True))
                pop = lines.popitem
                for entry in new:
                    self.used += entry[0]
                    while self.used > capacity:  # _evict, inlined: the oldest lines, never this tile's
                        key, old = pop(last=False)
                        self.used -= old[0]
                        self.evictions += 1
                        self.evicted_room += old[0]
                        if old[1]:
                            self._evicted_dirty(key, old)
                read_bytes += tile_bytes
                miss_bytes += sum(fills, 0.0) * weights[g.tensor] if g.tensor in weights else sum(fills, 0.0)
                continue
            miss = 0.0
            for key, mask, slice_bytes in covered:
                entry = get(key)
                if entry is None:  # a line the L2 lacks: every piece of it misses
                    entry = lines[key] = [0.0, False, None, 0, scale]
                    absent = mask
                else:
                    to_end(key)
                    absent = mask & ~entry[3]
                if absent:  # _fill and _grow, inlined
                    nbytes = absent.bit_count() * slice_bytes
                    entry[3] |= absent
                    grow = nbytes * scale
                    entry[0] += grow
                    self.used += grow
                    if self.used > capacity:
                        self._evict(entry)
                    miss += nbytes
                    entry[2] = now
            read_bytes += tile_bytes
            miss_bytes += miss * weights[g.tensor] if miss and g.tensor in weights else miss
        self.read_bytes, self.miss_bytes = read_bytes, miss_bytes

    def write(self, g: GTile, copies: float = 1.0) -> None:
        """Store a tile: its slices become present and dirty (allocated without reading HBM)."""
        for key, mask, slice_bytes in self._lines(g):
            entry = self.lines.get(key)
            if entry is None:
                entry = [0.0, True, None, 0, copies]
                self.lines[key] = entry
                self.dirty[key] = entry
            else:
                if not entry[1]:
                    entry[1] = True
                    self.dirty[key] = entry
                    self.dirty_room += entry[0]
                self.lines.move_to_end(key)
            absent = mask & ~entry[3]
            if absent:
                entry[3] |= absent
                grow = absent.bit_count() * slice_bytes * copies
                self.dirty_room += grow
                self._grow(entry, grow)
        self.write_bytes += g.nbytes
        while self.dirty_room > self.dirty_max and self.dirty:
            key, old = self.dirty.popitem(last=False)
            old[1] = False
            self.dirty_room -= old[0]
            self._written_back(key, old)

    def _fill(self, entry: list, absent: int, slice_bytes: float, copies: float) -> float:
        """Bring a line's `absent` pieces in (their room taken, evicting what no longer fits); their bytes."""
        nbytes = absent.bit_count() * slice_bytes
        entry[3] |= absent
        self._grow(entry, nbytes * copies)
        return nbytes

    def _grow(self, entry: list, chip_bytes: float) -> None:
        entry[0] += chip_bytes
        self.used += chip_bytes
        if self.used > self.capacity:
            self._evict(entry)

    def _evict(self, entry: list) -> None:
        """Evict the least recently used lines until the room taken fits (`entry`: the line that grew)."""
        while self.used > self.capacity and self.lines:
            key, old = self.lines.popitem(last=False)
            self.used -= old[0]
            self.evictions += 1
            self.evicted_room += old[0]
            if old[1]:
                self._evicted_dirty(key, old)
            if old is entry:  # a line larger than the whole cache: it streams through
                break

    def _evicted_dirty(self, key: tuple, entry: list) -> None:
        """A dirty line left the cache: written back, and no longer counted dirty."""
        self._written_back(key, entry)
        self.dirty.pop(key, None)
        self.dirty_room -= entry[0]

    def _written_back(self, key: tuple, entry: list) -> None:
        nbytes = entry[0] / entry[4]
        self.evicted_dirty_bytes += nbytes
        if key[0] == FLUSH:
            self.flush_written_back += nbytes

    def spread_dirty(self) -> None:
        """Spread the dirty room evenly over the LRU order, as a streaming write leaves the H200's L2: its
        newest lines all stay but only about half of them dirty, interleaved with clean ones, so a later
        kernel's first misses already evict dirty lines in that proportion (the probe's short launches after
        the flush pay those write-backs: experiments/results/h200/decode-hbm/hbm-probe.json, "fixed")."""
        share = self.dirty_room / self.used if self.used else 0.0
        for entry in self.dirty.values():
            entry[1] = False
        self.dirty.clear()
        self.dirty_room = owed = 0.0
        for key, entry in self.lines.items():
            owed += share * entry[0]
            if owed >= entry[0]:
                owed -= entry[0]
                entry[1] = True
                self.dirty[key] = entry
                self.dirty_room += entry[0]

    def take_evicted(self) -> float:
        """Dirty bytes evicted since the last call (the HBM writes to charge now), in sample units."""
        n = self.evicted_dirty_bytes - self._charged
        self._charged = self.evicted_dirty_bytes
        return n

    @property
    def dirty_bytes(self) -> float:
        """Dirty bytes still in L2, in sample units."""
        return sum(e[0] / e[4] for e in self.dirty.values())
