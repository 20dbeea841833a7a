"""Hardware units as small resources with one way to ask for service.

Every unit is a FIFO server with a rate: a request of `work` units at cycle t starts when the unit is free,
occupies it for work / rate cycles, and the caller is told the (whole) cycle it completes. Contention is the
queueing that results; nothing else decides time. Barriers count arrivals and wake waiters.
"""

from __future__ import annotations

import math

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


class SharedUnit:
    """A unit that serves every outstanding request at once, each at rate / n (processor sharing).

    This is how an SM's pipes behave under warp schedulers that issue from all ready warps in turn: two
    thread blocks' GEMMs issued together both progress at half speed and finish together, so their softmax
    phases coincide too, unless the schedule staggers them (FA3's ping-pong). A request may carry a cap, the
    largest fraction of the rate it can use (warps bound to fewer than all of an SM's sub-partitions); the
    rate its cap leaves unused goes to the others (water-filling). estimate() is the finish cycle if nothing
    else arrives: later arrivals can only delay it, so a waiter sleeps until the estimate and asks again."""

    __slots__ = ("name", "rate", "active", "caps", "t0", "done", "work", "_next_id", "_detached")

    def __init__(self, name: str, rate: float):
        if rate <= 0:
            raise ValueError(f"{name}: rate must be positive")
        self.name = name
        self.rate = rate
        self.active: dict[int, float] = {}  # request -> work left
        self.caps: dict[int, float] = {}  # request -> largest rate it may use (capped requests only)
        self.t0 = 0.0  # time the `active` amounts refer to
        self.done: dict[int, float] = {}  # finished request -> finish time (until its waiter reads it)
        self.work = 0.0
        self._next_id = 0
        self._detached: set[int] = set()  # requests nobody waits for (copy-engine traffic)

    def _shares(self, work: dict[int, float]) -> dict[int, float]:
        """Each request's rate: equal shares, except that a capped request takes at most its cap and the
        rest is shared among the others."""
        caps = self.caps
        left, n = self.rate, len(work)
        out = {}
        for k in sorted(work, key=lambda k: caps.get(k, left)):
            out[k] = min(caps.get(k, left), left / n)
            left -= out[k]
            n -= 1
        return out

    def _finish(self, k: int, t: float) -> None:
        del self.active[k]
        self.caps.pop(k, None)
        if k in self._detached:
            self._detached.discard(k)
        else:
            self.done[k] = t

    def _advance(self, now: float) -> None:
        active = self.active
        while active and self.t0 < now:
            if self.caps:  # water-filling; without caps every request runs at rate / n (the fast path below)
                rates = self._shares(active)
                dt = min(w / rates[k] for k, w in active.items())
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
                continue
            n = len(active)
            least = min(active.values())
            t_free = self.t0 + least * n / self.rate
            if t_free > now:
                served = (now - self.t0) * self.rate / n
                for k in active:
                    active[k] -= served
                self.t0 = now
                return
            for k in list(active):
                active[k] -= least
                if active[k] <= 1e-9:
                    self._finish(k, t_free)
            self.t0 = t_free
        if not active:
            self.t0 = now

    def submit(self, now: float, work: float, cap: float = 1.0) -> int:
        """Start serving `work`, at most `cap` x the unit's rate; returns a request id for estimate()."""
        if not 0 < cap <= 1:
            raise ValueError(f"{self.name}: a request's cap must be in (0, 1], got {cap}")
        self._advance(now)
        rid = self._next_id
        self._next_id += 1
        if work <= 0:
            self.done[rid] = now
            return rid
        if not self.active:
            self.t0 = now
        self.active[rid] = work
        if cap < 1.0:
            self.caps[rid] = cap * self.rate
        self.work += work
        return rid

    def estimate(self, now: float, rid: int) -> float:
        """Finish cycle of a request if nothing else arrives (its real finish time once it is done)."""
        self._advance(now)
        if rid in self.done:
            return self.done[rid]
        if self.caps:  # play the requests forward, sharing again as each leaves
            t, work = self.t0, dict(self.active)
            while True:
                rates = self._shares(work)
                if work[rid] / rates[rid] <= min(w / rates[k] for k, w in work.items()) + 1e-12:
                    return t + work[rid] / rates[rid]
                dt = min(w / rates[k] for k, w in work.items())
                t += dt
                work = {k: w - dt * rates[k] for k, w in work.items() if w - dt * rates[k] > 1e-9}
                if rid not in work:  # it finished within rounding of the one that left first
                    return t
        # play the current requests forward: the smaller ones leave first, the rest speed up
        t, served = self.t0, 0.0
        left = sorted(self.active.values())
        n = len(left)
        target = self.active[rid]
        for i, w in enumerate(left):
            t += (w - served) * (n - i) / self.rate
            served = w
            if w >= target - 1e-12:
                return t
        return t

    def release(self, rid: int) -> None:
        """The waiter is done with this request (or never waits for it)."""
        if self.done.pop(rid, None) is None and rid in self.active:
            self._detached.add(rid)

    def busy_cycles(self, now: float) -> float:
        """Cycles of the whole rate spent serving: the work served so far over the rate."""
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

    def submit(self, now: float, work: float) -> int:
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

    __slots__ = ("env", "count", "waiters")

    def __init__(self, env: simpy.Environment):
        self.env = env
        self.count = 0
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
        if self.count >= target:
            return None
        event = self.env.event()
        self.waiters.append((target, event))
        return event

    def arrive_at(self, cycle: int, n: int = 1) -> None:
        """Arrive at a future cycle (an async copy landing)."""
        delay = cycle - self.env.now
        if delay <= 0:
            self.arrive(n)
        else:
            self.env.timeout(delay).callbacks.append(lambda _ev: self.arrive(n))
