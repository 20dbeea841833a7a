"""Loop skip: leave out whole periods of the K/V loops that every running thread block is in.

A long kernel spends almost all its time with every resident block deep in its inner loop, each iteration
the same work on other tiles. Once the machine is periodic there, the rest of those loops is a time-shifted
copy of the period just watched, so whole periods can be left out of every running role at once.

Premise, checked before each skip: with a reference role's loop as the clock, the last two stretches of P
reference iterations (P <= MAX_PERIOD) took the same number of cycles, every running role issued the same
number of ops in each, and every counter (bytes, busy cycles) moved by the same amount; and every role's
next k x (its ops per stretch) ops repeat its last stretch op for op (same types, shapes, buffers, masks,
barriers; only tile coordinates and barrier targets differ). Then k stretches are left out: their cycles
and counter increments are added k times, each role's program moves past its left-out ops, barrier waits
count the arrivals those ops would have made, and the L2 sees their loads and stores in issue order (a
later block that reads the same K/V must find it there), without time. Where the L2 answers those reads
with other hits and misses than the watched stretch had, the bytes are the L2's and the time the
watched stretch's: `mismatch_bytes` says by how much the premise failed (0: it held). The lines of the
last stretches' tiles take the landing state of the tiles they stand for (a block a step behind another
reads them next, and waits for the same fetch).

The skip happens at the end of the cycle in which the premise was found to hold, not at once: SMs doing the
same work take the same op in the same cycle, one after another, and an op the reference role had taken
would otherwise run against the L2 state of the stretches its twins left out (lines their left-out loads
brought in at once), putting its SM ahead of theirs. Warp-specialized kernels (V3's producer feeding
consumer warpgroups through a ring) take it like one-role kernels. Causal grids gain little, since a block
ending somewhere on the sampled SMs every few iterations leaves few whole stretches between block ends.
Nor do the SMs of a causal sample keep one rhythm: on v2's causal GQA run (h200, 2 x 64 heads, 8 K/V heads,
64k, two blocks per SM on 8 SMs) the two blocks of some SMs do 10 to 11 iterations while the reference's do
12, others 12.9, and which SMs lag changes from stretch to stretch; 13 of the first 1,157 reference marks
found every role in phase. Over the whole run 1,268 short skips leave out 44% of the ops (22% of the cycles),
and the 5.3 M ops left go op by op (8.2 M events).

V3's three-consumer tiles, whose softmaxes share the schedulers' dependent dispatch: d96's (192 x 112) lock
into a whole number of cycles per iteration and are left out like the others; d64's (192 x 192) do not.
Their iteration takes a fraction of a cycle more or less than a whole number (6679.6 cycles on average on
the H100 at 2 x 16 x 8k), so stretches of one iteration alternate between 6679 and 6680 cycles and the
consumers' distance from their last op wanders by one or two cycles: no stretch of 1 to 8 iterations
repeats the one before it. The machine's state at the reference's marks first recurs after 18 iterations
(MAX_PERIOD reaches past it), which needs 37 marks watched with the same roles running: where tiles are long
enough for that (h100 1 x 32 x 16k d64: 86 iterations a tile, 17 SMs in step) such stretches are left out,
the cycles one off the plain run's and the bytes equal, as with the rare stretch of 2 to 10 iterations that
passes (the marks compare whole cycles and phases, not the units' fractions of a cycle); at 2 x 16 x 8k a
tile ending on one of the 8 sampled SMs changes the roles every 18 marks at most. A skip watched over fewer
roles (one SM's) would leave its traffic out of the ports and the L2 the other SMs share, so it would not be
the plain run either.
"""

from __future__ import annotations

import math
from itertools import compress, islice
from operator import attrgetter, not_
from types import GeneratorType

import simpy
from flashsim.algorithms.ir import AtomicAdd, Load, Store, Wait

from .l2 import L2Cache, held

# Stretches of up to MAX_PERIOD reference iterations are recognised (V3's d64 tiles recur every 18); loops of
# up to MAX_BODY ops.
MAX_PERIOD = 24
MAX_BODY = 64
# Ops a role remembers (its last stretch must fit).
HISTORY = 1024
# Counters whose per-stretch increments must repeat to this relative precision.
REL_TOL = 1e-9
# Left-out stretches, from the last, whose lines take the state of the lines they stand for.
MIRRORED = 2
# The evicting skip: stretches in which the L2 evicts (a head's K/V larger than it) are left out too, once
# the watched ones evicted alike; their loads are replayed into the L2, which evicts as they go, and the
# replay stops after the first stretch whose HBM bytes differ from the watched one's by more than this.
EVICTING_TOL = 1e-3
LINE_BYTES = 2048  # a line's size at 16 bits, to express a line evicted by a replay in bytes


_LIST_ITER = type(iter([]))
_SRC = attrgetter("src")


# Op types whose signature is not the op itself.
KEYED = frozenset((Load, Wait, Store, AtomicAdd))


def signature(op):
    """What of an op decides its timing: all of it, except the coordinates of the tile it moves and a
    barrier wait's target."""
    kind = type(op)
    if kind is Load:
        s = op.src
        return (kind, s.tensor, s.rows, s.cols, s.elem_bytes, op.dst, op.level, op.via, op.barrier, op.dst_row,
                op.issue, op.warps, op.in_flight)
    if kind is Wait:
        return kind, op.barrier
    if kind is Store or kind is AtomicAdd:
        return kind, object()  # never repeats: loops that write global memory are not left out
    return op


def signatures(ops: list, out: list, memo: dict) -> None:
    """Append each op's signature to `out`, memoised by op id (the ops are alive while the memo is used)
    and equal signatures made one object, so that stretches compare by identity."""
    sigs = list(map(memo.get, map(id, ops)))  # no Python code per op where every one is known
    if not all(sigs):  # signatures and ops are never falsy: None marks an op not seen yet
        for k in compress(range(len(sigs)), map(not_, sigs)):
            sigs[k] = _signature(ops[k], memo)
    out += sigs


def _signature(op, memo: dict):
    sig = signature(op) if type(op) in KEYED else op
    sig = memo[id(op)] = memo.setdefault(("same", sig), sig)
    return sig


def take(source, count: int, memo: dict) -> tuple[list, list]:
    """The next `count` ops of a program (fewer at its end), taken from it as its own next() would, and
    their signatures (memo as for `signatures`). A program suspended in `yield from` a list (a block's K/V
    loop) hands on that list's items one by one: they are sliced from the list at once and its iterator
    moved past them (and their signatures made as the list says they repeat)."""
    inner = source
    while type(inner) is GeneratorType:
        inner = inner.gi_yieldfrom
    ops: list = []
    sigs: list = []
    state = inner.__reduce__() if type(inner) is _LIST_ITER else ()
    if len(state) == 3:  # (iter, (items,), position); (iter, ((),)) once exhausted
        items, at = state[1][0], state[2]
        ops = items[at : at + count]
        inner.__setstate__(at + len(ops))
        _list_signatures(items, at, ops, sigs, memo)
    if len(ops) < count:
        more = list(islice(source, count - len(ops)))
        ops += more
        signatures(more, sigs, memo)
    return ops, sigs


def _list_signatures(items: list, at: int, ops: list, out: list, memo: dict) -> None:
    """Append the signatures of ops = items[at:at + len(ops)]. Where the list says that its ops repeat every
    `period` places but for their counts (OpList.repeat), those of one period, repeated: no work per op."""
    repeat = getattr(items, "repeat", None)
    if repeat is not None:
        start, stop, period = repeat
        a, b = max(at, start), min(at + len(ops), stop)
        if b - a >= 2 * period:
            signatures(ops[: a - at], out, memo)
            one: list = []
            signatures(ops[a - at : a - at + period], one, memo)
            out += (one * -(-(b - a) // period))[: b - a]
            signatures(ops[b - at :], out, memo)
            return
    signatures(ops, out, memo)


class LoopSkip:
    """One launch's loop skip; RoleTimers register with it and the reference role calls step()."""

    def __init__(self, gpu, counters, evicting: bool = True):
        self.gpu, self.counters = gpu, counters
        self.roles: dict = {}  # running RoleTimers, in start order
        self.ref = None
        self.sigs: list = []  # the reference role's op signatures until its loop body is found
        self.body = 0  # ops in the reference role's loop body (0: not found yet)
        self.phase = 0
        self.marks: list = []  # (virtual cycle, {role: ops pulled}, counters) every `body` reference ops
        self.stuck: frozenset | None = None  # running roles when a skip last found nothing to leave out
        self.pending = False  # a skip waits for the end of the cycle (_defer)
        self.evicting = evicting  # stretches that evict lines may be left out too (EVICTING_TOL)
        self.skips = 0
        self.evicting_skips = 0  # of them, skips of stretches that evict (within EVICTING_TOL)
        self.ops_left_out = 0
        self.cycles_left_out = 0
        self.mismatch_bytes = 0.0

    # -- roles ---------------------------------------------------------------------------------------
    def enter(self, role) -> None:
        self.roles[role] = None
        if self.ref is None:
            self._reference(role)

    def leave(self, role) -> None:
        del self.roles[role]
        if role is self.ref:
            self._reference(next(iter(self.roles), None))
        else:
            self.marks.clear()

    def _reference(self, role) -> None:
        self.ref, self.sigs, self.body, self.marks, self.stuck = role, [], 0, [], None
        if role is not None and role.history:
            # a role that is already deep in its loop (the reference's block ended) shows its body at once
            self.sigs = [signature(op) for op in list(role.history)[-3 * MAX_BODY:]]
            self._find_body()

    def _find_body(self) -> None:
        """The reference's loop body: the shortest run of ops its last ops repeat three times over."""
        sigs = self.sigs
        n = len(sigs)
        for body in range(1, min(MAX_BODY, n // 3) + 1):
            if sigs[-1] == sigs[-1 - body] and sigs[-body:] == sigs[-2 * body:-body] == sigs[-3 * body:-2 * body]:
                self.body, self.phase, self.sigs = body, self.ref.pulled % body, []
                return
        if n > 4 * MAX_BODY:
            del sigs[:MAX_BODY]

    # -- watching ------------------------------------------------------------------------------------
    def step(self, op) -> None:
        """The reference role has pulled `op`."""
        if not self.body:
            self.sigs.append(signature(op))
            self._find_body()
            return
        if self.ref.pulled % self.body != self.phase or self.pending:
            return
        gpu = self.gpu
        marks = self.marks
        now = gpu.env._now
        # each role's ops so far and how long ago it took its last one (its phase against the reference)
        roles = {r: (r.pulled, now - r.pulled_at) for r in self.roles}
        marks.append((now + gpu.skipped_cycles, roles, self.counters(), gpu.l2.evictions))
        if len(marks) > 2 * MAX_PERIOD + 1:
            del marks[0]
        if self.stuck is not None and self.stuck == frozenset(self.roles):
            return
        for period in range(1, MAX_PERIOD + 1):
            if len(marks) < 2 * period + 1:
                break
            a, b, c = marks[-1 - 2 * period], marks[-1 - period], marks[-1]
            if b[0] - a[0] != c[0] - b[0] or not a[1].keys() == b[1].keys() == c[1].keys():
                continue  # another length, or other roles
            evicted = c[3] - b[3]
            if evicted != b[3] - a[3] or evicted and not self.evicting:
                continue  # lines evicted unevenly (or at all, without the evicting skip): no steady L2
            ops = {r: c[1][r][0] - b[1][r][0] for r in c[1]}
            if any(ops[r] != b[1][r][0] - a[1][r][0] or ops[r] <= 0 or not a[1][r][1] == b[1][r][1] == c[1][r][1]
                   for r in ops):
                continue
            delta = {key: c[2][key] - b[2][key] for key in c[2]}
            if all(math.isclose(delta[key], b[2][key] - a[2][key], rel_tol=REL_TOL, abs_tol=1e-6) for key in delta):
                self._defer(c[0] - b[0], ops, delta, evicted)
                return

    def _settle(self, cycles: int, ops: dict, delta: dict, evicted: int) -> None:
        if self._skip(cycles, ops, delta, evicted):
            self.marks.clear()
        else:
            self.stuck = frozenset(self.roles)

    def _defer(self, cycles: int, ops: dict, delta: dict, evicted: int) -> None:
        """Skip once the cycle is over. The reference role has just taken its op; other SMs' roles doing the
        same work take theirs later in the same cycle. Left out now, the reference's op would run against the
        L2 state of the stretch left out (a line its twins' left-out loads brought in at once), putting its
        SM ahead of theirs; at the next cycle's start every role has taken this cycle's ops."""
        env = self.gpu.env
        self.pending = True

        def skip(_event) -> None:
            self.pending = False
            if set(ops) == set(self.roles):  # no block began or ended meanwhile
                self._settle(cycles, ops, delta, evicted)

        event = simpy.Event(env)
        event._ok, event._value = True, None
        event.callbacks.append(skip)
        env.schedule(event, simpy.core.URGENT, 1)

    # -- skipping ------------------------------------------------------------------------------------
    def _skip(self, cycles: int, ops: dict, delta: dict, evicted: int = 0) -> bool:
        """Leave out as many whole stretches as every role's program repeats; False if none. `evicted`: lines
        each watched stretch evicted (the evicting skip, EVICTING_TOL)."""
        reps = None
        memo: dict = {}
        for role, n in ops.items():
            reps = role.repeats_ahead(n, reps, memo)
            if not reps:
                return False
        gpu = self.gpu
        l2 = gpu.l2
        copies, default = gpu.copies, gpu.private_copies
        # each left-out stretch's loads, role by role, the last move of each tile only; every stretch of a
        # role has its loads at the same places (its ops repeat the watched stretch's), so a place's loads
        # over all stretches are one strided slice of the ops ahead
        columns = _last_columns(
            [role.loads_at(place, n, reps) for role, n in ops.items() for place in role.load_places(n)]
        )
        stretches = _Stretches(columns)
        held_stretches = 0
        if not evicted:
            reps, held_stretches = _fits(l2, stretches, reps, delta["hbm_read"], copies, default)
            if not reps:
                return False
        now = gpu.env._now
        before = (l2.read_bytes, l2.miss_bytes, l2.evictions)
        for n in range(reps):
            missed_before = l2.miss_bytes
            l2.replay(stretches[n], now, copies, default, n < held_stretches)
            if evicted and not math.isclose(l2.miss_bytes - missed_before, delta["hbm_read"], rel_tol=EVICTING_TOL):
                reps = n + 1  # the L2 left its steady state: this stretch is the last left out
                break
        # the dirty lines the replay evicted are written back once: their bytes, not the watched stretch's
        # (the dirty lines are the finished tiles' outputs, evicted once, not a per-stretch flow)
        written = l2.take_evicted() if evicted else None
        # after the skip, the lines of the last stretches' tiles are where those of the tiles they stand
        # for are now: still on their way from HBM, or landing at a later cycle (a block one step behind
        # another reads them next)
        for role, n in ops.items():
            for left_out, issued in role.counterparts(reps, n, MIRRORED):
                _mirror(l2, left_out.src, issued.src)
        for role, n in ops.items():
            role.arrivals(n, reps)
        # the L2's own count of the left-out bytes against the watched stretch's (0 while the premise holds)
        self.mismatch_bytes += abs(l2.miss_bytes - before[1] - reps * delta["hbm_read"])
        self.mismatch_bytes += abs(l2.evictions - before[2] - reps * evicted) * LINE_BYTES
        l2.read_bytes, l2.miss_bytes = before[0], before[1]
        for role, n in ops.items():
            role.drop(reps * n)
        skipped = gpu.skipped
        for key, value in delta.items():
            if evicted and key == "hbm_write":  # the dirty lines the replay evicted, written back once
                value = written
            else:
                value *= reps
            skipped[key] = skipped.get(key, 0.0) + value
        gpu.skipped_cycles += reps * cycles
        self.skips += 1
        self.evicting_skips += bool(evicted)
        self.ops_left_out += reps * sum(ops.values())
        self.cycles_left_out += reps * cycles
        return True


def _last_columns(columns: list) -> list:
    """The columns of loads (one per role and place), in issue order, without those that the same ops
    issue again in a later column, stretch for stretch (roles in step share their K/V load ops): in every
    stretch each of their loads is a tile's earlier move, which _last_moves would drop."""
    last = {tuple(map(id, column)): k for k, column in enumerate(columns)}
    if len(last) == len(columns):
        return columns
    return [columns[k] for k in sorted(last.values())]


def _last_moves(loads: list) -> list:
    """The loads in issue order, each tile's last one only. Blocks of a head share their K/V load ops, so
    the ops are told apart by identity first (cheap) and by tile then."""
    last_of_op = dict(zip(map(id, loads), range(len(loads)), strict=True))
    if len(last_of_op) < len(loads):
        loads = [loads[j] for j in sorted(last_of_op.values())]
    last = dict(zip(map(_SRC, loads), range(len(loads)), strict=True))
    if len(last) == len(loads):
        return loads
    return [loads[j] for j in sorted(last.values())]


class _Stretches:
    """The left-out stretches' loads (columns: _last_columns), each stretch's in issue order with each tile's
    last move only (_last_moves), made when first asked for: a skip often leaves out fewer stretches than
    its roles repeat (the L2 check stops it)."""

    def __init__(self, columns: list):
        self.rows = zip(*columns, strict=True) if columns else None  # no loads: nothing to fit or replay
        self.made: list = []

    def __getitem__(self, k: int) -> list:
        made = self.made
        while len(made) <= k:
            made.append(_last_moves(list(next(self.rows))) if self.rows is not None else [])
        return made[k]


def _fits(l2: L2Cache, stretches: _Stretches, count: int, misses: float, copies: dict,
          default: float) -> tuple[int, int]:
    """How many of the `count` stretches, from the first, the L2 answers as the watched one: the same bytes
    from HBM, and room for the lines they bring without evicting any (the L2 is looked at, not changed); and
    how many of them, from the first, find every line they read there (their replay only moves lines)."""
    lines, tiles = l2.lines, l2._tiles
    get = lines.get
    added: dict = {}  # line -> presence bits the stretches so far brought
    room = l2.capacity - l2.used
    all_held = 0
    for n in range(count):
        miss = 0.0
        for op in stretches[n]:
            tile = op.src
            got = tiles.get(id(tile))  # the L2's own record of the tile's lines (l2._tile, inlined)
            if got is None or got[0] is not tile:
                got = l2._tile(tile)
            if held(list(map(get, got[3])), got[4]):
                continue  # all there already (the usual case): nothing to add
            scale = copies.get(tile.tensor, default)
            for key, mask, slice_bytes in got[1]:
                entry = lines.get(key)
                if entry is not None and not mask & ~entry[3]:
                    continue  # all there already (the usual case): nothing to add
                present = (entry[3] if entry is not None else 0) | added.get(key, 0)
                absent = mask & ~present
                if absent:
                    nbytes = absent.bit_count() * slice_bytes
                    miss += nbytes
                    room -= nbytes * scale
                    added[key] = present | absent
        if room < 0 or not math.isclose(miss, misses, rel_tol=REL_TOL, abs_tol=1e-6):
            return n, all_held
        if all_held == n and not added:
            all_held = n + 1
    return count, all_held


def _mirror(l2: L2Cache, tile, like) -> None:
    """Give `tile`'s lines the landing state of `like`'s (the tile it stands for after a skip)."""
    lines = l2.lines
    mine, theirs = l2._lines(tile), l2._lines(like)
    if len(mine) != len(theirs):
        return
    for (key, _, _), (other, _, _) in zip(mine, theirs, strict=True):
        entry, model = lines.get(key), lines.get(other)
        if entry is None or model is None:
            continue
        ready = model[2]
        if ready is not None and type(ready) is not int:  # a fetch on its way: land with it
            ready.entries.append(entry)
        entry[2] = ready
