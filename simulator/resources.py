"""Hardware units as small resources with one way to ask for service.

Every unit is a FIFO server with a rate: a request of `work` units at cycle t starts when the unit is free,
occupies it for ceil(work / rate) cycles, and the caller is told the cycle it completes. Contention is the
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
        """Queue `work` at cycle t; returns the cycle it is done."""
        if work <= 0:
            return t
        duration = math.ceil(work / self.rate)
        start = t if t > self.next_free else self.next_free
        self.next_free = start + duration
        self.busy += duration
        self.work += work
        return self.next_free


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
