"""Hardware units as small resources with one way to ask for service.

SM pipes share their rate among the requests in service (SharedUnit); the wgmma queue serves in arrival
order (QueueUnit); the chip-wide HBM and L2 ports share theirs too (Port), since a tile's bytes travel as
sectors spread over many channels and slices, interleaved with every other SM's. Contention is the
queueing that results; nothing else decides time. Barriers count arrivals and wake waiters.
"""

from __future__ import annotations

import heapq
import math
from collections import deque

import simpy


class Server:
    """A unit that processes `rate` units of work per cycle, one request after another."""

    __slots__ = ("name", "rate", "next_free", "busy", "work")

    def __init__(self, name: str, rate: float):
        if rate <= 0:
            raise ValueError(f"{name}: rate must be positive")
        self.name = name
        self.rate = rate
        self.next_free = 0
        self.busy = 0  # cycles spent serving
        self.work = 0.0  # units served (bytes, FLOPs, ops)

    def reserve(self, t: int, work: float) -> int:
        """Queue `work` at cycle t; returns the (whole) cycle it is done. The unit's own clock keeps the
        fraction: a 64-byte request on a port that moves 4 KB a cycle holds it for 1/64 of a cycle, not one."""
        if work <= 0:
            return t
        duration = work / self.rate
        start = t if t > self.next_free else self.next_free
        self.next_free = start + duration
        self.busy += duration
        self.work += work
        return math.ceil(self.next_free - 1e-9)


class Port:
    """A chip-wide port (HBM, L2): its rate is shared equally among the requesters with requests outstanding
    (an SM's TMA engine, a block's warps, an SM's write-backs: `flow`), and each requester's requests are
    served in the order it issued them.

    A requester walks one tile's sectors before the next tile's, so its own requests queue behind each
    other; the sectors of different requesters' tiles spread over the same channels and slices and
    interleave, so requesters share. Virtual time V counts the bytes each requester in service has
    received; a request of w bytes reaching the head of its requester's queue at V0 leaves when V reaches
    V0 + w, so departures come in order of those tags (a heap) at O(log n) each. Identical requesters
    issuing alike leave alike.

    rate is the chip's; a sample of it passes `copies`, the chip's SMs per simulated SM, and each of its
    requesters gets rate / (n x copies): the very numbers the chip's n x copies requesters would get. A
    request's callback runs with the cycle it is announced: the whole cycle it leaves in, plus its latency.

    requester_rate caps each requester's share (HBM: what one block's outstanding requests carry per round
    trip), so a few requesters cannot draw the whole rate; under load the equal share is the smaller one.

    A request may stand for `weight` requesters' identical requests (a fold of twin SMs, Gpu.fold: its SM's
    requests for its twins' too, weight 1; a fetch of lines the twins share, which only one of them makes,
    1 / twins): the rate is shared per requester, W = the weights in service, and a request of w bytes per
    requester leaves when V reaches V0 + w, as each of the requesters it stands for would."""

    __slots__ = ("env", "name", "rate", "copies", "requester_rate", "V", "t", "heap", "queues", "serving", "work",
                 "owed", "departed", "weight", "_seq", "_timer", "_timer_at")

    def __init__(self, env: simpy.Environment, name: str, rate: float, copies: float = 1.0,
                 requester_rate: float = math.inf):
        if rate <= 0 or requester_rate <= 0:
            raise ValueError(f"{name}: rates must be positive")
        self.env, self.name, self.rate, self.copies = env, name, rate, copies
        self.requester_rate = requester_rate
        self.V = 0.0  # bytes served to each requester in service so far
        self.t = 0.0  # time V refers to
        self.heap: list = []  # (departure tag, seq, requester, callback, latency, weight) of the requests in service
        self.weight = 0.0  # the weights of the requests in service (W)
        self.queues: dict = {}  # requester -> deque of (bytes, callback, latency, weight) behind its request in service
        self.serving: set = set()  # requesters with a request in service
        self.work = 0.0  # bytes accepted (times their weight)
        self.owed = 0.0  # bytes accepted (times their weight), not yet served, apart from the requests in service
        self.departed: list = []  # (announcement cycle, seq, callback) of requests served, not yet announced
        self._seq = 0
        self._timer = None  # the pending wake-up event, and the cycle it fires
        self._timer_at = -1

    def _advance(self, now: float) -> None:
        """Move V to `now`; departures on the way are queued for announcement, and their requesters' next
        requests enter service."""
        heap = self.heap
        rate, copies, cap = self.rate, self.copies, self.requester_rate
        while heap:
            share = min(rate / (self.weight * copies), cap)  # _share, inlined
            tag = heap[0][0]
            t_out = self.t + (tag - self.V) / share
            if t_out > now + 1e-9:
                self.V += (now - self.t) * share
                self.t = now
                return
            _, seq, flow, callback, latency, weight = heapq.heappop(heap)
            self.weight -= weight
            self.V, self.t = tag, t_out
            if callback is not None:
                heapq.heappush(self.departed, (math.ceil(t_out - 1e-9) + latency, seq, callback))
            queue = self.queues.get(flow)
            if queue:
                work, callback, latency, weight = queue.popleft()
                self.owed -= work * weight
                heapq.heappush(heap, (tag + work, self._seq, flow, callback, latency, weight))
                self.weight += weight
                self._seq += 1
            else:
                self.serving.discard(flow)
        self.V, self.t, self.weight = 0.0, now, 0.0  # idle: restart the tags (keeps them small)

    def _share(self) -> float:
        """Bytes per cycle each requester in service receives."""
        return min(self.rate / (self.weight * self.copies), self.requester_rate)

    def _announce(self, now: int) -> None:
        """Run the callbacks of the departed requests whose announcement cycle has come."""
        departed = self.departed
        while departed and departed[0][0] <= now:
            at, _, callback = heapq.heappop(departed)
            callback(at)

    def submit(self, now: int, work: float, callback=None, flow=None, latency: int = 0, weight: float = 1.0) -> None:
        """Serve `work` bytes for requester `flow` from cycle `now`, after its earlier requests;
        callback(cycle) runs at the cycle they are through plus `latency` (None: nobody waits, as for
        write-backs). `weight`: the requesters whose identical requests this one stands for (see the class)."""
        if work <= 0:
            if callback is not None:
                callback(now + latency)
            return
        if self.heap:
            self._advance(now)
        else:  # _advance of an idle port
            self.V, self.t = 0.0, now
        departed = self.departed
        if departed and departed[0][0] <= now:
            self._announce(now)
        self.work += work * weight
        if flow in self.serving:
            self.queues.setdefault(flow, deque()).append((work, callback, latency, weight))
            self.owed += work * weight
            return
        self.serving.add(flow)
        heapq.heappush(self.heap, (self.V + work, self._seq, flow, callback, latency, weight))
        self.weight += weight
        self._seq += 1
        self._wake()

    def _wake(self) -> None:
        """Make sure a timer fires at the next announcement (or departure, which may announce sooner than
        one already queued)."""
        departed, heap = self.departed, self.heap
        at = departed[0][0] if departed else math.inf
        if heap:
            at = min(at, math.ceil(self.t + (heap[0][0] - self.V) / self._share() - 1e-9))
            if at == math.inf:
                return
        elif not departed:
            return
        now = self.env._now
        if at < now:
            at = now
        if self._timer is not None and self._timer_at <= at:
            return  # an earlier (or the same) wake-up is pending: it re-arms when it fires
        self._timer_at = at
        timer = self.env.timeout(at - now)
        self._timer = timer
        timer.callbacks.append(self._fire)

    def _fire(self, event) -> None:
        if event is not self._timer:
            return  # superseded by an earlier wake-up
        self._timer, self._timer_at = None, -1
        now = self.env._now
        self._advance(now)
        if self.departed:
            self._announce(now)
        self._wake()

    def busy_cycles(self, now: float) -> float:
        """Cycles of the whole rate spent serving: the bytes served so far over the rate."""
        self._advance(now)
        owed = self.owed + sum(entry[0] * entry[5] for entry in self.heap) - self.weight * self.V
        return (self.work - owed) * self.copies / self.rate


class SharedUnit:
    """A unit that serves every outstanding request at once, each at rate / n (processor sharing).

    This is how an SM's pipes behave under warp schedulers that issue from all ready warps in turn: two
    thread blocks' GEMMs issued together both progress at half speed and finish together, so their softmax
    phases coincide too, unless the schedule staggers them (FA3's ping-pong). A request may carry a cap, the
    largest fraction of the rate it can use (warps bound to fewer than all of an SM's sub-partitions); the
    rate its cap leaves unused goes to the others (water-filling). estimate() is the finish cycle if nothing
    else arrives: later arrivals can only delay it, so a waiter sleeps until the estimate and asks again.

    The common cases share one rate among all requests in service: none capped (rate / n each), or all
    capped alike (min(cap, rate / n) each; block shares give every block's request the same cap). Those
    take a path without water-filling; mixed caps take the general one."""

    __slots__ = ("name", "rate", "active", "caps", "capn", "t0", "done", "work", "_next_id", "_detached",
                 "_memo")

    def __init__(self, name: str, rate: float):
        if rate <= 0:
            raise ValueError(f"{name}: rate must be positive")
        self.name = name
        self.rate = rate
        self.active: dict[int, float] = {}  # request -> work left
        self.caps: dict[int, float] = {}  # request -> largest rate it may use (capped requests only)
        self.capn: dict[float, int] = {}  # cap -> capped requests in service with it
        self.t0 = 0.0  # time the `active` amounts refer to
        self.done: dict[int, float] = {}  # finished request -> finish time (until its waiter reads it)
        self.work = 0.0
        self._next_id = 0
        self._detached: set[int] = set()  # requests nobody waits for (copy-engine traffic)
        # request -> (requests submitted so far, its estimate then): an estimate holds until another arrives
        self._memo: dict[int, tuple[int, float]] = {}

    def _shares(self, work: dict[int, float]) -> dict[int, float]:
        """Each request's rate: equal shares, except that a capped request takes at most its cap and the
        rest is shared among the others."""
        caps = self.caps
        if len(work) == 2:  # the common case, unrolled
            (a, _, ra), (b, _, rb) = self._two(work)
            return {a: ra, b: rb}
        left, n = self.rate, len(work)
        out = {}
        limit = {k: caps.get(k, left) for k in work}
        for k in sorted(work, key=limit.__getitem__):  # by cap, the uncapped at the rate (a stable sort)
            out[k] = min(caps.get(k, left), left / n)
            left -= out[k]
            n -= 1
        return out

    def _two(self, work: dict[int, float]) -> tuple[tuple, tuple]:
        """Water-filling for two requests: ((request, work, rate), ...), the lower cap (the first on a tie)
        served first and the other taking the rest up to its cap."""
        caps, rate = self.caps, self.rate
        (a, wa), (b, wb) = work.items()
        ca, cb = caps.get(a, rate), caps.get(b, rate)
        if cb < ca:
            a, b, ca, cb, wa, wb = b, a, cb, ca, wb, wa
        ra = min(ca, rate / 2)
        return (a, wa, ra), (b, wb, min(cb, rate - ra))

    def _common_cap(self) -> float | None:
        """The cap every request in service shares (None when they are not all capped alike)."""
        if len(self.capn) == 1 and len(self.caps) == len(self.active):
            for cap in self.capn:
                return cap
        return None

    def _finish(self, k: int, t: float) -> None:
        del self.active[k]
        cap = self.caps.pop(k, None)
        if cap is not None:
            left = self.capn[cap] - 1
            if left:
                self.capn[cap] = left
            else:
                del self.capn[cap]
        if k in self._detached:
            self._detached.discard(k)
        else:
            self.done[k] = t

    def _advance(self, now: float) -> None:
        active, caps = self.active, self.caps
        if len(active) == 1 and self.t0 < now:  # the loops below for one request, unrolled
            ((k, w),) = active.items()
            t0 = self.t0
            t_free = t0 + w / caps.get(k, self.rate)
            if t_free > now:
                active[k] = w - (now - t0) * caps.get(k, self.rate)
            else:
                self._finish(k, t_free)
            self.t0 = now
            return
        capn = self.capn
        while caps and active and self.t0 < now:  # until the capped requests are done
            if len(capn) == 1 and len(caps) == len(active):  # all capped alike: one rate for all
                cap = next(iter(capn))
                r = min(cap, self.rate / len(active))
                dt = min(active.values()) / r
                if self.t0 + dt > now:
                    served = (now - self.t0) * r
                    for k, w in active.items():
                        active[k] = w - served
                    self.t0 = now
                    return
                self.t0 += dt
                served = dt * r
                for k, w in list(active.items()):
                    if w - served <= 1e-9:
                        self._finish(k, self.t0)
                    else:
                        active[k] = w - served
                continue
            if len(active) == 2:  # water-filling for two, without the loop's dictionaries
                (a, wa, ra), (b, wb, rb) = self._two(active)
                dt = min(wa / ra, wb / rb)
                if self.t0 + dt > now:
                    active[a] = wa - (now - self.t0) * ra
                    active[b] = wb - (now - self.t0) * rb
                    self.t0 = now
                    return
                self.t0 += dt
                for k in list(active):
                    w = active[k] - dt * (ra if k == a else rb)
                    active[k] = w
                    if w <= 1e-9:
                        self._finish(k, self.t0)
                continue
            rates = self._shares(active)  # water-filling
            dt = min([w / rates[k] for k, w in active.items()])
            if self.t0 + dt > now:
                for k in active:
                    active[k] -= (now - self.t0) * rates[k]
                self.t0 = now
                return
            self.t0 += dt
            for k in list(active):
                active[k] -= dt * rates[k]
                if active[k] <= 1e-9:
                    self._finish(k, self.t0)
        # without caps every request runs at rate / n (caps only empty from here on)
        t0, rate, done, detached = self.t0, self.rate, self.done, self._detached
        while active and t0 < now:
            n = len(active)
            least = min(active.values())
            t_free = t0 + least * n / rate
            if t_free > now:
                served = (now - t0) * rate / n
                for k, w in active.items():
                    active[k] = w - served
                self.t0 = now
                return
            for k, w in list(active.items()):
                w -= least
                if w <= 1e-9:  # _finish, inlined
                    del active[k]
                    if k in detached:
                        detached.discard(k)
                    else:
                        done[k] = t_free
                else:
                    active[k] = w
            t0 = t_free
        self.t0 = t0 if active else now

    def submit(self, now: float, work: float, cap: float = 1.0) -> int:
        """Start serving `work`, at most `cap` x the unit's rate; returns a request id for estimate()."""
        if not 0 < cap <= 1:
            raise ValueError(f"{self.name}: a request's cap must be in (0, 1], got {cap}")
        if self.t0 < now:
            if self.active:
                self._advance(now)
            else:  # _advance of an idle unit
                self.t0 = now
        rid = self._next_id
        self._next_id += 1
        if work <= 0:
            self.done[rid] = now
            return rid
        if not self.active:
            self.t0 = now
        self.active[rid] = work
        if cap < 1.0:
            cap *= self.rate
            self.caps[rid] = cap
            self.capn[cap] = self.capn.get(cap, 0) + 1
        self.work += work
        return rid

    def estimate(self, now: float, rid: int) -> float:
        """Finish cycle of a request if nothing else arrives (its real finish time once it is done). The
        requests' work refers to t0, the last arrival (or later): played forward from there, the finish
        times need no advance to `now`, and hold until the next arrival."""
        memo = self._memo.get(rid)
        if memo is not None and memo[0] == self._next_id:
            return memo[1]
        finish = self.done.get(rid)
        if finish is None:
            active = self.active
            if len(active) == 1:  # alone: at its cap, or the whole rate
                finish = self.t0 + active[rid] / self.caps.get(rid, self.rate)
            elif len(active) == 2 and (not self.caps or self._common_cap() is not None):
                finish = self._play_pair(rid)
            else:
                finish = self._play_all(rid) if self.caps else self._play_equal(rid)
        self._memo[rid] = (self._next_id, finish)
        return finish

    def _play_pair(self, rid: int) -> float:
        """_play_all and _play_equal for two requests sharing one rate (none capped, or both capped alike):
        the same arithmetic without their sort and loop. The smaller leaves first at half the rate (at most
        the cap), the other runs on alone."""
        (_, a), (_, b) = self.active.items()
        if b < a:
            a, b = b, a
        rate, caps = self.rate, self.caps
        if caps:
            cap = next(iter(self.capn))
            t = self.t0 + a / min(cap, rate / 2)
            if a >= self.active[rid] - 1e-12:
                return t
            return t + (b - a) / min(cap, rate)
        t = self.t0 + a * 2 / rate
        if a >= self.active[rid] - 1e-12:
            return t
        return t + (b - a) / rate

    def _play_all(self, rid: int) -> float:
        """estimate() with caps: alike, one rate min(cap, rate / n) for all; else water-filling."""
        active = self.active
        target = active[rid]
        if len(active) == 1:
            return self.t0 + target / self.caps.get(rid, self.rate)
        cap = self._common_cap()
        if cap is None:
            return self._play(rid)
        # the smaller requests leave first, the rest speed up to their cap
        t, served, rate = self.t0, 0.0, self.rate
        left = sorted(active.values())
        n = len(left)
        for i, w in enumerate(left):
            t += (w - served) / min(cap, rate / (n - i))
            served = w
            if w >= target - 1e-12:
                return t
        return t

    def _play_equal(self, rid: int) -> float:
        """estimate() without caps."""
        active = self.active
        target = active[rid]
        if len(active) == 1:
            return self.t0 + target / self.rate
        # play the current requests forward: the smaller ones leave first, the rest speed up
        t, served = self.t0, 0.0
        left = sorted(active.values())
        n = len(left)
        for i, w in enumerate(left):
            t += (w - served) * (n - i) / self.rate
            served = w
            if w >= target - 1e-12:
                return t
        return t

    def _play(self, rid: int) -> float:
        """estimate() under mixed caps: water-fill again as each request leaves."""
        if len(self.active) == 2:
            finish = self._play_two(rid)
            if finish is not None:
                return finish
        return self._play_loop(rid)

    def _play_loop(self, rid: int) -> float:
        t, work = self.t0, dict(self.active)
        while True:
            rates = self._shares(work)
            mine = work[rid] / rates[rid]
            dt = min([w / rates[k] for k, w in work.items()])  # the first to leave
            if mine <= dt + 1e-12:
                return t + mine
            t += dt
            work = {k: w - dt * rates[k] for k, w in work.items() if w - dt * rates[k] > 1e-9}
            if rid not in work:  # it finished within rounding of the one that left first
                return t

    def _play_two(self, rid: int) -> float | None:
        """_play for two requests (two blocks' work on an SM unit), the same arithmetic without its loop: the
        one that finishes first leaves, and the other runs on alone at its cap. None where both would still be
        in service after the first leaves (rounding): the loop then plays it."""
        (a, wa, ra), (b, wb, rb) = self._two(self.active)
        ta, tb = wa / ra, wb / rb
        first = min(ta, tb)
        mine, w, r, w_other, r_other = (ta, wa, ra, wb, rb) if rid == a else (tb, wb, rb, wa, ra)
        if mine <= first + 1e-12:
            return self.t0 + mine
        if w_other - first * r_other > 1e-9:
            return None
        t = self.t0 + first
        w -= first * r
        if not w > 1e-9:
            return t
        return t + w / min(self.caps.get(rid, self.rate), self.rate)

    def release(self, rid: int) -> None:
        """The waiter is done with this request (or never waits for it)."""
        self._memo.pop(rid, None)
        if self.done.pop(rid, None) is None and rid in self.active:
            self._detached.add(rid)

    def busy_cycles(self, now: float) -> float:
        """Cycles of the whole rate spent serving: the work served so far over the rate."""
        if self.t0 < now:
            self._advance(now)
        return (self.work - sum(self.active.values())) / self.rate


class QueueUnit:
    """A Server behind the SharedUnit interface: requests are served one after another in arrival order
    (the wgmma queue). Its estimates never move, since later arrivals wait behind earlier ones."""

    __slots__ = ("server", "ends", "_next_id")

    def __init__(self, name: str, rate: float):
        self.server = Server(name, rate)
        self.ends: dict[int, int] = {}
        self._next_id = 0

    def submit(self, now: float, work: float, cap: float | None = None) -> int:
        """cap: as SharedUnit's, ignored (one request is served at a time, at the whole rate)."""
        rid = self._next_id
        self._next_id += 1
        self.ends[rid] = self.server.reserve(int(now), work)
        return rid

    def estimate(self, now: float, rid: int) -> float:
        return self.ends[rid]

    def release(self, rid: int) -> None:
        self.ends.pop(rid, None)

    def busy_cycles(self, now: float) -> float:
        return self.server.busy - max(0, self.server.next_free - now)

    @property
    def work(self) -> float:
        return self.server.work


class Barrier:
    """A counting barrier (mbarrier, named barrier): arrivals add, waiters wake at their target."""

    __slots__ = ("env", "count", "waiters", "skipped")

    def __init__(self, env: simpy.Environment):
        self.env = env
        self.count = 0
        self.skipped = 0  # arrivals of ops a loop skip left out: waits issued after it count them as made
        self.waiters: list[tuple[int, simpy.Event]] = []

    def arrive(self, n: int = 1) -> None:
        self.count += n
        if self.waiters:
            ready = [w for w in self.waiters if w[0] <= self.count]
            self.waiters = [w for w in self.waiters if w[0] > self.count]
            for _, event in ready:
                event.succeed()

    def wait(self, target: int) -> simpy.Event | None:
        """None when already reached; else an event that fires when it is."""
        target -= self.skipped
        if self.count >= target:
            return None
        event = self.env.event()
        self.waiters.append((target, event))
        return event
