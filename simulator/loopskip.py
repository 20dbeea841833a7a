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
found every role in phase. With the exact premise alone the run leaves out 1.2% of its ops in 22 skips and
takes 27 M events (with the drift skip below, 5.5 M).

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

Drift skip (causal and variable-length kernels whose blocks are one role; within a tolerance, `--no-drift-skip`
leaves it out). Where the premise fails only because the roles' rhythms are no whole multiples of each other
(on that causal GQA run most roles take 5,174 cycles a K/V step, those of some SMs 5,109, so their phase at
the marks wanders), each role is timed on its own: over the last 2 x DRIFT_WINDOW marks with the same roles, no
line evicted and no global memory written, its cycles per loop body measured between its ops at the same place
in its body must hold to DRIFT_TOL. Then k reference iterations' cycles are left out, k as large as every role
still repeats its body (at least DRIFT_LEAST): each role drops the whole bodies its own rate gives, rounded to
the nearest with the remainder carried to its next drift skip, and its barriers count their arrivals. The
left-out loads enter the L2 in the order the rates issue them, as far as they fit without evicting; the L2
counts their L2 and HBM bytes, the shared-memory port the bytes the left-out ops ask of it themselves (a GEMM's
operands), and the other counters move as over the watched marks, per load byte for the loads' own (ports,
shared-memory fills) and per op for the rest. A warp-specialised block's roles would have to
drop the same iterations (their barriers pair their ops), so such kernels keep the exact skip only. Not exact:
each skip leaves every role within half a body of where its rate puts it (forked runs: role ends -60 +- 20
cycles on average, spread 1,000-2,000 cycles, against the plain run from the same state), and where a grid
ends hangs on which blocks meet on an SM at its tail, which any nudge reshuffles: the plain causal GQA runs at
8k-32k move by up to 0.9% when the odd slots start 3-50 cycles late, and drift-skipped runs scatter alike (at
16k around the same mean; at 32k 0.06-0.10% above the plain run with the same nudge). Measured against the
exact-only runs: docs/MODEL.md, Shortcuts.
"""

from __future__ import annotations

import math
from functools import partial
from itertools import compress, islice, pairwise
from operator import attrgetter, itemgetter, not_

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
# The drift skip (LoopSkip._watch_drift): 2 x DRIFT_WINDOW reference iterations watched, in which every role's
# cycles per loop body held to DRIFT_TOL; the loads left out may miss in the L2 a share of their bytes within
# DRIFT_MISS_TOL of the watched iterations' share.
DRIFT_WINDOW = 2
DRIFT_TOL = 0.02
DRIFT_MISS_TOL = 0.02
DRIFT_LOOK = 32  # loop bodies ahead of each role first looked at
# The fewest reference iterations a drift skip leaves out: a shorter one saves less than it costs (the L2's
# look at its loads), and each skip nudges the run off its exact course (see _watch_drift).
DRIFT_LEAST = 4
# Counters that loops left out never move (their ops write no global memory): a window that moved them held
# other work, and is not watched.
WRITTEN = ("l2_write", "hbm_write", "hbm_write_flush", "l2_atomic", "busy_l2_atomic")


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
    # down the programs' `yield from`s: Python's generators and, where a schedule runs compiled, Cython's
    # (another type, with the same gi_yieldfrom)
    while (below := getattr(inner, "gi_yieldfrom", None)) is not None:
        inner = below
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

    def __init__(self, gpu, counters, evicting: bool = True, drift: bool = False):
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
        self.drift = drift  # the drift skip may leave out stretches where the exact premise fails (_watch_drift)
        self.drift_stuck: frozenset | None = None  # running roles when a drift skip last found nothing to leave out
        self.carry: dict = {}  # role -> loop bodies it owes (+) or is ahead by (-) after its drift skips
        self.skips = 0
        self.drift_skips = 0  # of them, drift skips
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
        self.carry.pop(role, None)
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
        if self.stuck is None or self.stuck != frozenset(self.roles):
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
                if any(ops[r] != b[1][r][0] - a[1][r][0] or ops[r] <= 0
                       or not a[1][r][1] == b[1][r][1] == c[1][r][1] for r in ops):
                    continue
                delta = {key: c[2][key] - b[2][key] for key in c[2]}
                if all(math.isclose(delta[key], b[2][key] - a[2][key], rel_tol=REL_TOL, abs_tol=1e-6)
                       for key in delta):
                    self._defer(partial(self._settle, c[0] - b[0], ops, delta, evicted), ops)
                    return
        if self.drift:
            self._watch_drift()

    def _settle(self, cycles: int, ops: dict, delta: dict, evicted: int) -> None:
        if self._skip(cycles, ops, delta, evicted):
            self.marks.clear()
        else:
            self.stuck = frozenset(self.roles)

    def _defer(self, settle, ops: dict) -> None:
        """Skip (settle()) once the cycle is over, if the roles of `ops` still run. The reference role has just
        taken its op; other SMs' roles doing the same work take theirs later in the same cycle. Left out now, the
        reference's op would run against the L2 state of the stretch left out (a line its twins' left-out loads
        brought in at once), putting its SM ahead of theirs; at the next cycle's start every role has taken
        this cycle's ops."""
        env = self.gpu.env
        self.pending = True

        def skip(_event) -> None:
            self.pending = False
            if set(ops) == set(self.roles):  # no block began or ended meanwhile
                settle()

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
        if gpu.fold > 1 and any(op.src.tensor not in gpu.copies for column in columns for op in column):
            return False  # a fold's twins read tiles of their own, which a replay for the folded SM would not
        stretches = _Stretches(columns)
        held_stretches = 0
        if not evicted:
            reps, held_stretches = _fits(l2, stretches, reps, delta["hbm_read"], copies, default)
            if not reps:
                return False
        now = gpu.env._now
        before = (l2.read_bytes, l2.miss_bytes, l2.evictions)
        if held_stretches:
            # every line those stretches read is there, so their replay only moves lines to the LRU end: the
            # order each tile's last move gives, one move per tile (its read bytes are put back below)
            l2.replay(_last_moves([op for n in range(held_stretches) for op in stretches[n]]), now, copies, default,
                      True)
        for n in range(held_stretches, reps):
            missed_before = l2.miss_bytes
            l2.replay(stretches[n], now, copies, default)
            if evicted and not math.isclose(l2.miss_bytes - missed_before, delta["hbm_read"], rel_tol=EVICTING_TOL):
                reps = n + 1  # the L2 left its steady state: this stretch is the last left out
                break
        # the dirty lines the replay evicted are written back once: their bytes, not the watched stretch's
        # (the dirty lines are the finished tiles' outputs, evicted once, not a per-stretch flow)
        written = l2.take_evicted() * gpu.hbm_weight if evicted else None
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

    # -- the drift skip ------------------------------------------------------------------------------
    def _watch_drift(self) -> None:
        """The fallback where the exact premise fails only because roles drift: each role keeps its own
        steady rhythm, but the rhythms are no whole multiples of each other, so a role's phase against the
        reference wanders from mark to mark (and now and then it takes one op more or less between two).
        Once the last 2 x DRIFT_WINDOW reference iterations ran with the same roles, no line evicted and no
        global memory written, and each role's cycles per loop body held to DRIFT_TOL (_body_cycles),
        every role moves on at its own rate (_drift_skip)."""
        marks = self.marks
        if len(marks) < 2 * DRIFT_WINDOW + 1 or self.drift_stuck == frozenset(self.roles):
            return
        watched = marks[-1 - 2 * DRIFT_WINDOW:]
        a, c = watched[0], watched[-1]
        if a[1].keys() != c[1].keys() or c[3] != a[3]:
            return  # other roles (a role that left clears the marks), or lines evicted
        delta = {key: c[2][key] - a[2][key] for key in c[2]}
        if any(delta.get(key) for key in WRITTEN):
            return
        rates = {}
        for role in c[1]:
            cycles = _body_cycles(role, watched, self.body)
            if cycles is None:
                return
            rates[role] = 1.0 / cycles
        ops = {role: (a[1][role][0], c[1][role][0] - a[1][role][0]) for role in c[1]}
        self._defer(partial(self._drift, rates, ops, delta), ops)

    def _drift(self, rates: dict, ops: dict, delta: dict) -> None:
        done = self._drift_skip(rates, ops, delta)
        if done:
            self.marks.clear()
        elif done is not None:
            self.drift_stuck = frozenset(self.roles)

    def _drift_skip(self, rates: dict, ops: dict, delta: dict) -> bool | None:
        """Leave out k reference iterations' cycles (`span`): each role the whole loop bodies its rate (`rates`:
        role -> bodies a cycle) gives in them, rounded to the nearest with what it owes from its earlier drift
        skips carried (so that it never strays more than half a body from where its rate puts it), and never
        past its loop's repeating part. The L2 sees the left-out loads in the order the rates issue them; k
        shrinks until they fit without evicting, and they must miss a share of their bytes within
        DRIFT_MISS_TOL of the watched iterations' share. The L2 counts the HBM and L2 bytes of every
        left-out load, the shared-memory port the bytes each left-out op asks of it (RoleTimer.smem_work); the
        other counters move as the watched iterations' did, per load byte for the loads' own (ports,
        shared-memory fills) and per op for the rest. `ops`: role -> (its ops at the first mark,
        its ops since). None: a role is not in its loop yet; False: nothing to leave out before a role
        changes."""
        body, gpu, carry = self.body, self.gpu, self.carry
        memo: dict = {}
        for role, (start, _) in ops.items():
            history = role.history
            since = role.pulled - start
            if since > len(history):
                return None
            kinds = list(map(type, islice(history, len(history) - since, None)))
            if kinds[body:] != kinds[:-body]:
                return None  # not every op since the first mark was the loop's (a block's first ops differ)
        # the bodies ahead of each role that repeat its last one, looked for up to `most` at a time (a role
        # may have thousands ahead, each to be pulled from its program): enough once the role that allows
        # the fewest cycles has fewer
        most = DRIFT_LOOK
        while True:
            reps = {role: role.repeats_ahead(body, most, memo) for role in ops}
            limits = {r: (reps[r] + 0.5 - carry.get(r, 0.0)) / rates[r] for r in ops}
            least = min(limits, key=limits.get)
            if reps[least] < most:
                break
            most *= 2
        per = 1.0 / rates[self.ref]  # cycles of a reference iteration
        # the most reference iterations that keep every role within its repeating bodies
        k = math.floor(limits[least] / per)
        l2 = gpu.l2
        copies, default = gpu.copies, gpu.private_copies
        while k >= DRIFT_LEAST:
            span = round(k * per)
            drops = {r: math.floor(span * rates[r] + carry.get(r, 0.0) + 0.5) for r in ops}
            if any(drops[r] > reps[r] for r in ops):
                k -= 1
                continue
            # the left-out loads, each at the cycle its role's rate issues it
            timed = []
            for order, (role, d) in enumerate(drops.items()):
                for place in role.load_places(body):
                    timed += [((j + place / body) / rates[role], order, place, op)
                              for j, op in enumerate(role.loads_at(place, body, d))]
            timed.sort(key=itemgetter(0, 1, 2))
            loads = [t[3] for t in timed]
            seen: set = set()
            first = [t for t in timed if not (id(t[3]) in seen or seen.add(id(t[3])))]  # each op's first issue
            miss, _, fit = _brought(l2, [t[3] for t in first], {}, l2.capacity - l2.used, copies, default,
                                    fitting=True)
            if fit == len(first):
                break
            k = min(k - 1, math.floor(first[fit][0] / per))  # end before the first load that would evict
        else:
            return False
        read = sum(op.src.nbytes for op in loads)
        watched = delta["hbm_read"] / delta["l2_read"] if delta["l2_read"] else 0.0
        if abs((miss / read if read else 0.0) - watched) > DRIFT_MISS_TOL:
            return False
        # the shared-memory bytes the ops ask for themselves (a GEMM's operands), in the watched iterations and
        # in the left-out bodies: a role rarely stands at the same place in its body at both ends of the window
        own, own_left_out = 0.0, 0.0
        for role, (start, n) in ops.items():
            history = role.history
            first = len(history) - (role.pulled - start)
            own += sum(map(role.smem_work, islice(history, first, first + n)))
            own_left_out += drops[role] * sum(map(role.smem_work, islice(history, len(history) - body, None)))
        read_before, missed_before = l2.read_bytes, l2.miss_bytes
        l2.replay(_last_moves(loads), gpu.env._now, copies, default, not miss)
        l2.read_bytes = read_before + read  # every left-out load, those of a tile moved again later too
        missed = l2.miss_bytes - missed_before
        for role, d in drops.items():
            for left_out, issued in role.counterparts(d, body, MIRRORED):
                _mirror(l2, left_out.src, issued.src)
        for role, d in drops.items():
            role.arrivals(body, d)
            role.drop(d * body)
            carry[role] = span * rates[role] + carry.get(role, 0.0) - d
        # the counters besides the L2's own (hbm_read, l2_read)
        dropped = body * sum(drops.values())
        per_op = dropped / sum(n for _, n in ops.values())
        per_load = read / delta["l2_read"] if delta["l2_read"] else per_op
        hbm = gpu.hbm
        fill = delta.get("smem_fill_port", 0.0)
        rate = gpu.sms[0].smem.rate
        moved = {"hbm_read": 0.0, "l2_read": 0.0,
                 "busy_hbm": (delta["busy_hbm"] * missed / delta["hbm_read"] if delta["hbm_read"]
                              else missed * hbm.copies / hbm.rate),
                 "smem": own_left_out + (delta["smem"] - fill - own) * per_op + fill * per_load,
                 "busy_smem": ((own_left_out + (delta["busy_smem"] * rate - fill - own) * per_op + fill * per_load)
                               / rate)}
        for key in ("busy_l2", "smem_write", "smem_fill_port"):
            moved[key] = delta[key] * per_load
        skipped = gpu.skipped
        for key, value in delta.items():
            value = moved.get(key, value * per_op)
            if value:
                skipped[key] = skipped.get(key, 0.0) + value
        gpu.skipped_cycles += span
        self.skips += 1
        self.drift_skips += 1
        self.ops_left_out += dropped
        self.cycles_left_out += span
        return True


def _body_cycles(role, marks: list, body: int) -> float | None:
    """A role's cycles per loop body over the watched marks: between marks at which it stood at the same
    place in its body, the cycles between its ops there (not between the marks: its phase moves). None if it
    took no op between two marks, if fewer than half of the intervals are such, or if they differ from their
    mean by more than DRIFT_TOL (the role is not in a steady rhythm yet)."""
    spans = []
    for m, n in pairwise(marks):
        (p, phase), (q, later) = m[1][role], n[1][role]
        if q == p:
            return None
        if not (q - p) % body:
            spans.append(((n[0] - later) - (m[0] - phase)) * body / (q - p))
    if 2 * len(spans) < len(marks) - 1:
        return None
    mean = sum(spans) / len(spans)
    if any(abs(x - mean) > DRIFT_TOL * mean for x in spans):
        return None
    return mean


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
    added: dict = {}  # line -> presence bits the stretches so far brought
    seen: set = set()  # the tiles looked at so far: all their pieces are there or added since
    room = l2.capacity - l2.used
    all_held = 0
    for n in range(count):
        miss, room, _ = _brought(l2, stretches[n], added, room, copies, default, seen=seen)
        if room < 0 or not math.isclose(miss, misses, rel_tol=REL_TOL, abs_tol=1e-6):
            return n, all_held
        if all_held == n and not added:
            all_held = n + 1
    return count, all_held


def _brought(l2: L2Cache, loads: list, added: dict, room: float, copies: dict, default: float,
             fitting: bool = False, seen: set | None = None) -> tuple[float, float, int]:
    """The bytes `loads` would bring from HBM, beside the lines `added` (line -> presence bits, which takes
    theirs) that earlier loads brought, the room left after them, and how many loads that is (the L2 is looked
    at, not changed). fitting: only as many loads, from the first, as leave room. seen: the ids of tiles that
    earlier loads read (beside `added`), which bring nothing more; the tiles of these loads join them."""
    lines, tiles = l2.lines, l2._tiles
    get = lines.get
    miss = 0.0
    for n, op in enumerate(loads):
        tile = op.src
        if seen is not None:
            if id(tile) in seen:
                continue  # read before: every piece of it is there or added since
            seen.add(id(tile))
        got = tiles.get(id(tile))  # the L2's own record of the tile's lines (l2._tile, inlined)
        if got is None or got[0] is not tile:
            got = l2._tile(tile)
        if held(list(map(get, got[3])), got[4]):
            continue  # all there already (the usual case): nothing to add
        scale = copies.get(tile.tensor, default)
        weight = l2.miss_weights.get(tile.tensor, 1.0)  # as the L2 counts its misses (a fold's shared lines)
        before = miss, room
        for key, mask, slice_bytes in got[1]:
            entry = lines.get(key)
            if entry is not None and not mask & ~entry[3]:
                continue  # all there already (the usual case): nothing to add
            present = (entry[3] if entry is not None else 0) | added.get(key, 0)
            absent = mask & ~present
            if absent:
                nbytes = absent.bit_count() * slice_bytes
                miss += nbytes * weight
                room -= nbytes * scale
                added[key] = present | absent
        if fitting and room < 0:
            return *before, n
    return miss, room, len(loads)


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
