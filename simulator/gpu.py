"""The chip: SMs with their units, the shared L2 and HBM, and the thread-block scheduler.

Sampling: a run may simulate `sms` of the chip's SMs, with the thread blocks the hardware would send to
them; at the chip's HBM and L2 ports and in its L2 each sampled SM stands for `copies` identical SMs. With
sms = sm_count it is the plain, whole-chip run.

Folding: where a sample's SMs are twins, every op of theirs starting and ending at the same cycles (equal
blocks of one head in lockstep waves: simulator/api.py _twins), `fold` of them run as one SM, which stands for
all of them at the ports (the same requests, the same share). The L2 is the plain run's: the lines the twins
share (K, V) are read once, as the plain run's first twin fetches them and the others find them there or on
their way; each twin's own tiles (Q, O) are read and written as its own (Gpu._twin), and what that evicts is
written back on the twin's own flow. After each event the twins' copies of its L2 calls are made, twin after
twin, as the plain run's twins make theirs (Gpu._flush_twins). The counters are the folded SM's, so each counts
one twin's share.
"""

from __future__ import annotations

import gc
import math
from collections import defaultdict
from dataclasses import replace
from heapq import heappop, heappush

import simpy
from flashsim.algorithms.ir import GTile
from flashsim.errors import FlashsimError

from .icache import CodeCache
from .l2 import FLUSH, L2Cache
from .launch import Launch
from .resources import Port, QueueUnit, SharedUnit

NORMAL = simpy.core.NORMAL
# Twin tiles a folded run keeps by the id of the tile they stand beside (Gpu._twin) before it starts again.
TWIN_TILES_KEPT = 1 << 14
# Objects allocated between two collections of the youngest generation while a launch runs (Python's default: 700).
GC_YOUNG_THRESHOLD = 50_000


class EventLimitReached(FlashsimError):
    """A run stopped at its limit of simulated events."""


class Timeout:
    """A timeout event with the fields simpy's process loop (Process._resume) and Environment.run_until read,
    and no instance dictionary: simpy's Timeout has one, and a run makes one timeout for most ops. A timeout
    is only ever yielded or given callbacks."""

    __slots__ = ("env", "callbacks", "_value", "_delay", "_ok", "_defused")


class Process(simpy.Process):
    """simpy's process with its resume loop here, where it is compiled: every event a process waits on ends in
    this loop. It keeps simpy's protocol: an event that succeeded sends its value into the generator, one that
    failed throws a copy of its exception in (the generator may catch it); the event yielded next is waited on,
    or taken at once if already processed; a generator that returns or raises triggers the process with its
    value or exception. The callback it leaves on an event is made once, not at every wait."""

    def __init__(self, env, generator) -> None:
        super().__init__(env, generator)
        self._wake = self._resume

    def _resume(self, event) -> None:
        env = self.env
        env._active_proc = self
        generator = self._generator
        while True:
            try:
                if event._ok:
                    event = generator.send(event._value)
                else:
                    event._defused = True
                    failure = event._value
                    copy = type(failure)(*failure.args)
                    copy.__cause__ = failure
                    event = generator.throw(copy)
            except StopIteration as done:
                self._ok, self._value = True, done.value
                env.schedule(self)
                event = None
                break
            except BaseException as error:
                self._ok, self._value = False, error
                env.schedule(self)
                event = None
                break
            try:
                callbacks = event.callbacks
            except AttributeError:
                raise RuntimeError(f"a process yielded {event!r}, which is not an event") from None
            if callbacks is not None:  # not processed yet: wait for it
                callbacks.append(self._wake)
                break
        self._target = event
        env._active_proc = None


class Environment(simpy.Environment):
    """simpy's environment, counting the events it schedules (a run's size, reported as sim.events); with
    `max_events`, the run stops with EventLimitReached once it has scheduled that many."""

    def __init__(self, max_events: int | None = None) -> None:
        super().__init__()
        self.events = 0
        # a fold's twins' L2 calls of the event being processed, made once it is (Gpu._flush_twins)
        self.pending_twins = None
        self.flush_twins = None
        self.max_events = max_events if max_events is not None else -1
        # simpy binds its event classes to the instance only for its own class, not a subclass: without this
        # every env.event() goes through a descriptor
        for name in ("event", "all_of", "any_of"):
            setattr(self, name, getattr(self, name))

    def process(self, generator) -> Process:
        return Process(self, generator)

    def timeout(self, delay, value=None) -> Timeout:
        """A Timeout (the most frequent event), made without simpy's constructor and its extra calls."""
        if delay < 0:
            raise ValueError(f"Negative delay {delay}")
        event = Timeout()
        event.env, event.callbacks, event._value, event._delay, event._ok = self, [], value, delay, True
        # schedule() inlined (a call less per event); the same count, limit and order
        self.events += 1
        if self.events == self.max_events:
            self._stop_now()
        heappush(self._queue, (self._now + delay, NORMAL, next(self._eid), event))
        return event

    def schedule(self, event, priority=simpy.core.NORMAL, delay=0) -> None:
        self.events += 1
        if self.events == self.max_events:
            self._stop_now()
        heappush(self._queue, (self._now + delay, priority, next(self._eid), event))

    def _stop_now(self) -> None:
        """Stop before anything else happens this cycle: an urgent event whose callback raises."""
        stop = simpy.Event(self)
        stop._ok, stop._value = True, None
        stop.callbacks.append(self._stop)
        heappush(self._queue, (self._now, simpy.core.URGENT, next(self._eid), stop))

    def run_until(self, until: simpy.Event) -> None:
        """simpy's run(until=event) with its step() inlined (the same events in the same order): the loop
        that every event of a run goes through."""
        queue = self._queue
        # a run makes and drops millions of small objects (events, requests) in few cycles: the collector,
        # run every 700 new objects by default, walks the young ones each time for little garbage
        threshold = gc.get_threshold()
        gc.set_threshold(max(threshold[0], GC_YOUNG_THRESHOLD), *threshold[1:])
        try:
            while until.callbacks is not None:  # an event's callbacks are set to None once it is processed
                try:
                    self._now, _, _, event = heappop(queue)
                except IndexError:
                    raise RuntimeError("no events left before the launch ended") from None
                callbacks, event.callbacks = event.callbacks, None
                for callback in callbacks:
                    callback(event)
                if self.pending_twins:
                    self.flush_twins()
                if not event._ok and not hasattr(event, "_defused"):
                    exc = type(event._value)(*event._value.args)
                    exc.__cause__ = event._value
                    raise exc
        finally:
            gc.set_threshold(*threshold)

    def _stop(self, _event) -> None:
        raise EventLimitReached(
            f"stopped after {self.max_events:,} simulated events, at cycle {self._now:,} (the run's event limit): "
            "raise --max-events, or leave it out, to let the run finish"
        )


class Fetch:
    """Lines on their way from HBM: the cycle they land is known once HBM is through with them; loads that
    find them in flight (listeners) land no earlier."""

    __slots__ = ("entries", "listeners")

    def __init__(self, entries: list):
        self.entries = entries
        self.listeners: list = []

    def land(self, cycle: int) -> None:
        for entry in self.entries:
            if entry[2] is self:
                entry[2] = cycle
        for listener in self.listeners:
            listener(cycle)


class Landing:
    """One load's parts (the L2 port, its own HBM fetch, other loads' fetches): when the last is known,
    then(cycle) is scheduled for the latest of them (and `floor`, lines already landing), plus `extra`."""

    __slots__ = ("env", "then", "extra", "at", "parts")

    def __init__(self, env: simpy.Environment, then, extra: int, floor: int):
        self.env, self.then, self.extra, self.at, self.parts = env, then, extra, floor, 0

    def part(self, cycle: int) -> None:
        if cycle > self.at:
            self.at = cycle
        self.parts -= 1
        if self.parts:
            return
        at = self.at + self.extra
        delay = at - self.env.now
        if delay <= 0:
            self.then(self.env.now)
        else:
            then = self.then
            self.env.timeout(delay).callbacks.append(lambda _ev: then(at))


class Sm:
    """One SM: tensor cores (work in cycles), SFU (MUFU ops), FP32 ALUs (FLOPs) and shared memory (bytes)."""

    def __init__(self, index: int, profile):
        self.index = index
        # mma.sync is issued warp by warp, so concurrent GEMMs interleave; wgmma goes through a queue.
        self.tensor = SharedUnit(f"SM{index}.tensor", 1.0)
        self.wgmma_queue = QueueUnit(f"SM{index}.wgmma", 1.0)
        self.sfu = SharedUnit(f"SM{index}.sfu", profile.mufu_ops_per_clk_per_sm)
        self.alu = SharedUnit(f"SM{index}.alu", profile.fp32_flops_per_clk_per_sm)
        self.smem = SharedUnit(f"SM{index}.smem", profile.smem_bandwidth_bytes_per_clk_per_sm)
        # the path stores from accumulator fragments take out of the warps' registers (ir.Store.fragments)
        self.stores = SharedUnit(f"SM{index}.stores", profile.fragment_store_bytes_per_clk_per_sm)
        # and the path the warps' plain coalesced stores leave by (store_path_model 1)
        self.plain_stores = SharedUnit(f"SM{index}.plain_stores", profile.store_bytes_per_clk_per_sm)
        # the instruction-issue model's units (profile.issue_model): warp schedulers (warp instructions), the
        # ALU pipe (lanes of compares, min/max, selects, packing) and the shuffle path (lanes)
        self.issue = SharedUnit(f"SM{index}.issue",
                                profile.sub_partitions_per_sm * profile.warp_issue_per_clk_per_sub_partition)
        # the dependent streams of elementwise ops (issue_model 0): each scheduler dispatches at most
        # dependent_issue_per_clk_per_sub_partition of its warps' chained instructions per cycle
        self.dispatch = SharedUnit(f"SM{index}.dispatch",
                                   profile.sub_partitions_per_sm * profile.dependent_issue_per_clk_per_sub_partition)
        self.int_alu = SharedUnit(f"SM{index}.int_alu", profile.alu_ops_per_clk_per_sm)
        self.shfl = SharedUnit(f"SM{index}.shfl", profile.shfl_ops_per_clk_per_sm)
        self.code = CodeCache(profile.icache_bytes_per_sm, profile.icache_miss_cycles_per_line)
        self.plans: dict = {}  # op id -> its requests to these units (simulator/timing.py, _gemm_plan)
        self.lags: dict = {}  # (op id, warps) -> (op, its replayed lag) (simulator/timing.py, _replayed_lag)
        self.mma_warps = 0  # warps of the mma.sync GEMMs in flight (ldsm_model 1: simulator/timing.py _load_lags)
        self.blocks = 0  # thread blocks resident (block_share_model 1: each takes at most 1/blocks of a unit)


def blocks_per_sm(kernel, profile) -> int:
    """Occupancy: thread blocks an SM holds at once, limited by SMEM, registers, threads and blocks."""
    limits = profile.occupancy_limits(kernel.threads, kernel.regs_per_thread, kernel.smem_bytes)
    slots = min(limits.values())
    if slots < 1:
        worst = min(limits, key=limits.get)
        raise FlashsimError(
            f"kernel {kernel.name} does not fit on an SM of {profile.name}: not enough {worst} "
            f"({kernel.smem_bytes} B SMEM, {kernel.regs_per_thread} registers x {kernel.threads} threads)"
        )
    return slots


def _turned_over(l2_marks: list, period: int, capacity: float) -> bool:
    """Whether the L2 has evicted a whole capacity of room since the periods that evict alike began (walking
    back from the last one): then every line left from before them is gone, and its state is theirs."""
    last = l2_marks[-1]
    per = (last[2] - l2_marks[-1 - period][2], last[3] - l2_marks[-1 - period][3])
    j = len(l2_marks) - 1 - period
    while j - period >= 0:
        a, b = l2_marks[j - period], l2_marks[j]
        if b[2] - a[2] != per[0] or not math.isclose(b[3] - a[3], per[1], rel_tol=1e-9, abs_tol=1e-6):
            break
        j -= period
    return last[4] - l2_marks[j][4] >= capacity


class Gpu:
    """heads: the sampled (batch, K/V head) pairs, or None for the whole problem; with `group` query heads per
    K/V head. A sample runs on `sms` SMs; each of its SMs and lines stands for `copies` of the chip's (groups
    / sampled groups; by default the chip's SMs per simulated SM). `lockstep`: whether the chip's blocks run in
    lockstep waves (equal blocks), so that a sample's copies store together with it (the partial-write port)."""

    def __init__(
        self,
        profile,
        sms: int | None = None,
        trace: list | None = None,
        heads: set | None = None,
        group: int = 1,
        copies: float | None = None,
        lockstep: bool = True,
        fold: int = 1,
    ):
        self.profile = profile
        self.sms_total = profile.sm_count
        self.fold = fold
        # what an HBM request and a byte written back count: one twin's share of what the twins ask for
        self.hbm_weight = 1 / fold
        self._twins: dict = {}  # (id of a tile, twin) -> (the tile, that twin's tile) (_twin)
        self.n_sms = min(sms or profile.sm_count, profile.sm_count) // fold
        self._calls: list = []  # the folded SM's L2 calls in the event being processed (_flush_twins)
        self.heads = heads
        self.group = group
        self.groups_total = 1
        # room in L2 a sampled line takes: the chip holds `copies` times as many private lines; tensors that
        # a head's blocks share (K, V) get their own ratio per kernel, from `sharing`
        self.private_copies = copies if copies is not None else self.sms_total / (self.n_sms * fold)
        self.copies: dict[str, float] = {}
        # at the ports each simulated SM stands for its twins too
        port_copies = self.private_copies * fold
        self.env = Environment()
        self.env.flush_twins = self._flush_twins
        self.hbm = Port(self.env, "hbm", profile.hbm_bytes_per_clk, port_copies,
                        profile.hbm_requester_bandwidth_bytes_per_s / profile.sm_clock_hz)
        self.write_cost = profile.hbm_bandwidth_bytes_per_s / profile.hbm_write_bandwidth_bytes_per_s
        self.tma_read_cost = 1 / profile.hbm_tma_read_fraction  # port bytes per byte a TMA copy misses
        self.clock_hz = profile.sm_clock_hz
        self.l2_port = Port(self.env, "l2", profile.l2_bandwidth_bytes_per_s / profile.sm_clock_hz, port_copies)
        self.l2 = L2Cache(profile.l2_bytes, profile.l2_dirty_max_bytes)
        # the L2 slices' reduce units (fp32 atomics of the backward's dQ): their own rate, beside the port's
        self.l2_atomic = Port(self.env, "l2_atomic", profile.l2_atomic_bytes_per_s / profile.sm_clock_hz,
                              port_copies)
        # the L2's rate for partial-sector writes (stores from accumulator fragments, 16 bytes per row), which
        # every SM storing so shares. It binds when most SMs store at once: blocks that run in lockstep waves
        # do, and a sample's copies store with it; blocks that drift apart (causal) do not, and there a sample
        # takes its SMs as themselves
        self.partial_writes = Port(self.env, "partial_writes", profile.fragment_store_chip_bytes_per_s
                                   / profile.sm_clock_hz, port_copies if lockstep else 1.0)
        # the chip's rate for the warps' plain stores (store_path_model 1), shared by every SM storing, as above
        self.plain_writes = Port(self.env, "plain_writes", profile.store_chip_bytes_per_s / profile.sm_clock_hz,
                                 port_copies if lockstep else 1.0)
        self.atomic_bytes = 0
        self.sms = [Sm(i, profile) for i in range(self.n_sms)]
        self.trace = trace
        self.hbm_write_bytes = 0
        self.smem_write_bytes = 0
        self.smem_fill_port_bytes = 0.0  # of the port's work, what fills took (smem_read leaves it out)
        self.ops = 0  # tile ops interpreted
        self.dirty_scale = 1.0  # dirty lines at the end of the last launch per dirty line simulated
        self.extrapolated_blocks = 0
        self.periodic_skips = 0  # stretches of blocks left out
        self.carried_skips = 0  # of them, stretches of tiles that blocks running on from tile to tile left out
        self.unit_skips = {"skips": 0, "units_left_out": 0, "worst": 0.0}  # whole heads left out (unitskip.py)
        self.loop_skip = None  # the running launch's LoopSkip (None: every op is simulated)
        self.loop_skips = {"skips": 0, "ops_left_out": 0, "cycles_left_out": 0, "mismatch_bytes": 0.0,
                           "evicting_skips": 0, "drift_skips": 0}
        self.drift_skip = True  # the loop skip may leave out stretches whose roles drift (loopskip._watch_drift)
        self.skipped_cycles = 0  # cycles of loop periods left out, all launches so far
        # of them, those of whole blocks left out (periodic and unit skips): no block that ran lived through them
        self.blocks_skipped_cycles = 0
        self.skipped: dict[str, float] = {}  # counter increments of the loop periods left out
        self.kv_head_bytes = 0.0  # K and V of one K/V head (the evicting loop skip's premise; 0: unknown)
        self.on_block = None  # progress: on_block(blocks done or left out, blocks) after each block of a launch
        # what-if: the first block of each SM's odd slots starts this many cycles late, as kernels/v2.cu's
        # start_stagger_cycles makes the second block to start on an SM wait (experiments/stagger.py)
        self.start_stagger = 0
        self.block_log = None  # (cta, SM, start, end) of each block run, where the dispatch replay asks for it
        self.replay_kernel = None  # the launch whose dispatch is replayed
        self.replay = None  # what the replay fitted and the scale it gave (simulator/replay.py)

    # -- memory --------------------------------------------------------------------------------------
    def load(self, tile, now: int, to_smem: bool, sm: Sm, then, extra: int = 0, flow=None, tma: bool = False) -> None:
        """Read a tile through L2 (and HBM on a miss); then(cycle) runs at the cycle its bytes have landed,
        `extra` cycles after the last of them (TMA's own latency). `flow`: whose requests it queues behind
        at the ports (default: the SM's). `tma`: a tensor-map copy, whose misses take the HBM port at
        hbm_tma_read_fraction of its rate."""
        if flow is None:
            flow = sm.index
        p = self.profile
        copies = self.copies.get(tile.tensor)
        private = copies is None
        if private:
            copies = self.private_copies
        pending, fetching, miss, missed = self.l2.read(tile, now, copies)
        landing = Landing(self.env, then, extra, pending)
        landing.parts = 1 + bool(miss) + len(fetching)
        for fetch in fetching:  # lines that another load is still bringing in from HBM
            fetch.listeners.append(landing.part)
        if miss:
            self._fetch(now, missed, miss * self.tma_read_cost if tma else miss, flow).listeners.append(landing.part)
        nbytes = tile.nbytes
        self.l2_port.submit(now, nbytes, landing.part, flow, p.l2_hit_latency_cycles)
        if self.l2.evicted_dirty_bytes != self.l2._charged:
            self._charge_evictions(now, sm.index)
        if self.fold > 1:
            self._calls.append(("load", tile, now, flow, sm.index, tma, private))
            self.env.pending_twins = True
        if to_smem:
            # the copy engine's writes land through the banks' own write path and take smem_fill_port_fraction
            # of the port the warps' loads read through, as measured (fill_model 1); fill_model 0: every byte
            self.smem_write_bytes += nbytes
            share = p.smem_fill_port_fraction if p.fill_model else 1.0
            if share:
                self.smem_fill_port_bytes += nbytes * share
                sm.smem.release(sm.smem.submit(now, nbytes * share))

    def store(self, tile, now: int, from_smem: bool, sm: Sm, then=None, flow=None) -> None:
        """Write a tile into L2 (write-back; evicted dirty lines go to HBM); then(cycle) runs when L2 has
        taken it (None: nobody waits, as for a TMA store). `flow` as for load()."""
        if flow is None:
            flow = sm.index
        copies = self.copies.get(tile.tensor)
        self.l2.write(tile, self.private_copies if copies is None else copies)
        self._charge_evictions(now, sm.index)
        self.l2_port.submit(now, tile.nbytes, then, flow)
        if from_smem:
            sm.smem.release(sm.smem.submit(now, tile.nbytes))
        if self.fold > 1:
            self._calls.append(("store", tile, now, flow, sm.index, False, copies is None))
            self.env.pending_twins = True

    def _fetch(self, now: int, missed: list, port_bytes: float, flow) -> Fetch:
        """Bring the missed lines from HBM (`port_bytes` of its port's work, on `flow`'s queue): they land when
        the port is through with them, and the loads that find them on their way (its listeners) with them."""
        fetch = Fetch(missed)
        for entry in missed:
            entry[2] = fetch
        self.hbm.submit(now, port_bytes, fetch.land, flow, self.profile.hbm_latency_cycles, self.hbm_weight)
        return fetch

    def _twin(self, tile, i: int):
        """Twin i's tile standing where `tile` is for the folded SM: the same shape in lines of its own (a
        tensor named apart), which no other block reads."""
        key = (id(tile), i)
        got = self._twins.get(key)
        if got is None or got[0] is not tile:
            if len(self._twins) >= TWIN_TILES_KEPT:
                self._twins.clear()
            got = self._twins[key] = (tile, replace(tile, tensor=f"{tile.tensor}~{i}"))
        return got[1]

    def _flush_twins(self) -> None:
        """After each event: the twins' L2 calls of it, twin after twin, each in the order the folded SM made
        them. The plain run's twins take their copies of an event one after another, so twin 0's K/V read and
        its own store come before twin 1's: where the L2 evicts, that order decides which lines survive."""
        calls, self._calls = self._calls, []
        self.env.pending_twins = None
        l2 = self.l2
        for i in range(1, self.fold):
            for kind, tile, now, flow, sm_index, tma, private in calls:
                if kind == "store":
                    written = l2.write_bytes
                    if private:
                        l2.write(self._twin(tile, i), self.private_copies)
                    else:
                        l2.write(tile, self.copies[tile.tensor])
                    l2.write_bytes = written  # the counters are the folded SM's
                    self._charge_evictions(now, (sm_index, "twin", i))
                elif private:
                    self._twin_load(tile, i, now, flow, sm_index, tma)
                else:  # a shared tile: found where the first twin's read left it (moved to the LRU end)
                    read, missed_bytes = l2.read_bytes, l2.miss_bytes
                    l2.read(tile, now, self.copies[tile.tensor])
                    l2.read_bytes, l2.miss_bytes = read, missed_bytes

    def _twin_load(self, tile, i: int, now: int, flow, sm_index: int, tma: bool) -> None:
        """Twin i reads its own tile where the folded SM read `tile`: into the L2 and, what it misses, from HBM on
        its own flow (it asks the L2 port what the folded SM asked, for it)."""
        l2 = self.l2
        read, missed_bytes = l2.read_bytes, l2.miss_bytes
        _, _, miss, missed = l2.read(self._twin(tile, i), now, self.private_copies)
        l2.read_bytes, l2.miss_bytes = read, missed_bytes
        if miss:
            self._fetch(now, missed, miss * self.tma_read_cost if tma else miss, (flow, "twin", i))
        if l2.evicted_dirty_bytes != l2._charged:
            self._charge_evictions(now, (sm_index, "twin", i))

    def atomic(self, tile, now: int, from_smem: bool, sm: Sm, then=None, flow=None) -> None:
        """An fp32 reduce-add into a tile: its bytes cross the L2 port, then the L2 reads the lines (a miss
        fetches them from HBM), adds at the slices' atomic rate and keeps them dirty (written back to HBM when
        evicted). then(cycle) runs once the L2 has performed it: the warps go on at once (red.global and a TMA
        reduce-add are fire-and-forget), but a block is not done before its reductions are."""
        if flow is None:
            flow = sm.index
        copies = self.copies.get(tile.tensor, self.private_copies)
        l2 = self.l2
        reads, writes = l2.read_bytes, l2.write_bytes
        _, _, miss, missed = l2.read(tile, now, copies)
        if miss:
            self._fetch(now, missed, miss, flow)
        l2.write(tile, copies)
        l2.read_bytes, l2.write_bytes = reads, writes  # counted as atomics, not as loads and stores
        self.atomic_bytes += tile.nbytes
        self._charge_evictions(now, sm.index)
        self.l2_port.submit(now, tile.nbytes, None, flow)
        self.l2_atomic.submit(now, tile.nbytes, then, flow)
        if from_smem:
            sm.smem.release(sm.smem.submit(now, tile.nbytes))

    def flushed_l2(self) -> None:
        """Start from the L2 a large write leaves (validate's L2 flush before each timed call): every line
        taken, l2_dirty_max_bytes of them dirty and spread among the clean ones (L2Cache.spread_dirty), so
        the launch's misses evict dirty lines from the first one on and pay their write-backs beside its
        reads. The flush's own counts are not the launch's."""
        row_bytes = 1024
        rows = math.ceil(self.l2.capacity / self.private_copies / row_bytes)
        self.l2.write(GTile(FLUSH, 0, 0, 0, rows, 0, row_bytes, 1), self.private_copies)
        self.l2.spread_dirty()
        self.l2.write_bytes, self.l2.evicted_dirty_bytes, self.l2._charged, self.l2.evictions = 0, 0.0, 0.0, 0
        self.l2.flush_written_back = 0.0

    def _charge_evictions(self, now: int, flow: int) -> None:
        evicted = self.l2.take_evicted()
        if evicted:
            # the HBM server counts read bytes; a written byte holds it longer (read/write turnarounds)
            # the L2 writes back beside the SMs' reads, not behind them: a flow of its own per evicting SM
            self.hbm.submit(now, evicted * self.write_cost, None, (flow, "write-back"), 0, self.hbm_weight)
            self.hbm_write_bytes += evicted * self.hbm_weight

    # -- launches ------------------------------------------------------------------------------------
    def sample(self, kernel) -> list:
        """The thread blocks (or persistent work tiles) of the sampled K/V heads, in launch order."""
        if self.heads is None:
            return list(kernel.ctas)
        of = kernel.kv_head_of or (lambda c: (c[0], c[1] // self.group))
        # a fold runs one of each set of twins' blocks (equal blocks: which one does not matter)
        return [c for c in kernel.ctas if of(c) in self.heads][:: self.fold]

    def tensor_instr(self, kernel, probe_ops: int = 400) -> str | None:
        """The tensor-core instruction class a kernel issues (None: no GEMMs), from its first block."""
        for role in kernel.roles:
            for n, op in enumerate(role.program(kernel.ctas[0])):
                if type(op).__name__ == "Gemm":
                    return op.instr
                if n >= probe_ops:
                    break
        return None

    def sharing(self, kernel, slots: int, probe_blocks: int = 8, probe_ops: int = 200) -> dict[str, float]:
        """For a sampled run: the L2 room each line of a head-shared tensor takes.

        Tensors whose first tile two probed blocks both read are shared by a head's blocks. The probe takes
        the kernel's first blocks (neighbours share, say, a Q row block) and blocks spread over the first
        head's range (far apart ones share, say, a K column block of a GEMM's grid). The chip keeps such
        lines for the heads its blocks work on at once; the sample, for its own heads at once: each sampled
        line takes the room of (chip's active heads) / (sample's active heads) lines."""
        if self.heads is None:
            return {}
        per_group = len(kernel.ctas) / self.groups_total  # blocks per (batch, K/V head)
        step = max(1, int(per_group) // probe_blocks)
        spread = kernel.ctas[: int(per_group)][::step][:probe_blocks]
        probe = list(dict.fromkeys(kernel.ctas[:probe_blocks] + spread))
        first: defaultdict[str, defaultdict[tuple, int]] = defaultdict(lambda: defaultdict(int))
        for cta in probe:
            seen: set[str] = set()
            for role in kernel.roles:
                for n, op in enumerate(role.program(cta)):
                    tile = op.src if type(op).__name__ == "Load" else None
                    if tile is not None and tile.tensor not in seen:
                        seen.add(tile.tensor)
                        first[tile.tensor][(tile.batch, tile.head, tile.row, tile.col)] += 1
                    if n >= probe_ops:
                        break
        chip = min(self.groups_total, -(-self.sms_total * slots // max(1, round(per_group))))
        sample = min(len(self.heads), -(-self.n_sms * self.fold * slots // max(1, round(per_group))))
        ratio = chip / max(1, sample)
        return {t: ratio for t, keys in first.items() if max(keys.values()) > 1}

    def leave_out_blocks(self, cycles: float, delta: dict, reps: int) -> None:
        """Whole blocks left out (periodic and unit skips): `reps` copies of a period that took `cycles` and moved
        the counters by `delta`."""
        self.skipped_cycles += cycles * reps
        self.blocks_skipped_cycles += cycles * reps
        skipped = self.skipped
        for key, value in delta.items():
            skipped[key] = skipped.get(key, 0.0) + value * reps

    def _l2_state(self) -> tuple:
        l2 = self.l2
        return l2.used, l2.dirty_room, l2.evictions, l2.evicted_dirty_bytes, l2.evicted_room

    def _l2_regime(self, l2_marks: list, plan: dict, done: int, total: int) -> str | None:
        """The L2 regime of the two watched periods, if leaving out a plan's blocks keeps it: "evicting"
        (the same number of lines evicted, and dirty bytes written back, in each period since the L2 last
        turned over: the times watched already carry the write-backs) or "filling" (nothing evicted, and room
        and the dirty limit last until the launch ends: the dirty lines left at the end grow with the blocks).
        None otherwise: a run must not leave out the moment the L2 fills, and with it the state of every block
        after. A skip leaves the L2 as it found it, so an evicting one is exact only where the cache holds
        nothing from before its periods: lines from an earlier regime, still being evicted, run out within
        the periods left out in the plain run (v3 8 x 32 x 2k d64 on 22 SMs: rounds of 36,100 cycles while
        the lines of the L2's filling go, then 39,418; left out at the first, 4.2% short)."""
        period = plan["period"]
        first, mid, last = l2_marks[-1 - 2 * period], l2_marks[-1 - period], l2_marks[-1]
        evicted = (mid[2] - first[2], last[2] - mid[2])
        written = (mid[3] - first[3], last[3] - mid[3])
        if evicted[0] == evicted[1] and math.isclose(*written, rel_tol=1e-9, abs_tol=1e-6):
            if evicted[1] or written[1]:
                return "evicting" if _turned_over(l2_marks, period, self.l2.capacity) else None
            periods_left = (total - done) / (period * self.n_sms) + 1
            l2 = self.l2
            if (last[0] + (last[0] - mid[0]) * periods_left <= l2.capacity
                    and last[1] + (last[1] - mid[1]) * periods_left <= l2.dirty_max):
                return "filling"
        return None

    def set_clock(self, clock_hz: float) -> None:
        """Power management sets the SM clock by load; bandwidths given per second (HBM's and the L2's, each in
        its own clock domain) become per SM cycle."""
        self.clock_hz = clock_hz
        self.l2_port.rate = self.profile.l2_bandwidth_bytes_per_s / clock_hz
        self.l2_atomic.rate = self.profile.l2_atomic_bytes_per_s / clock_hz
        self.hbm.rate = self.profile.hbm_bandwidth_bytes_per_s / clock_hz
        self.hbm.requester_rate = self.profile.hbm_requester_bandwidth_bytes_per_s / clock_hz
        self.partial_writes.rate = self.profile.fragment_store_chip_bytes_per_s / clock_hz
        self.plain_writes.rate = self.profile.store_chip_bytes_per_s / clock_hz

    def launch_fixed_cycles(self) -> int:
        """A launch's busy cycles outside its blocks (the kernel's start and end, as the profiler times a
        kernel), beyond the first dispatch that each block's cta_launch_cycles already stands for."""
        p = self.profile
        return max(0, round(p.kernel_busy_overhead_s * self.clock_hz) - p.cta_launch_cycles)

    def run_kernel(self, kernel, counters, extrapolate: bool = True) -> tuple[int, int, dict]:
        """Run one launch (simulator/launch.py, with its shortcuts); returns (cycles, thread blocks or tiles
        it covers, counter increments). `counters()` snapshots the byte and busy counters."""
        env, p = self.env, self.profile
        self.set_clock(p.clock_hz(self.tensor_instr(kernel)))
        start = env.now + self.skipped_cycles  # cycles on the virtual clock (with the loop periods left out)
        slots = blocks_per_sm(kernel, p)
        self.copies = self.sharing(kernel, slots)
        # a fold's twins share these lines: its first twin fetches them for all
        self.l2.miss_weights = {t: self.hbm_weight for t in self.copies} if self.fold > 1 else {}
        launch = Launch(self, kernel, counters, extrapolate, slots, start)
        workers = [env.process(launch.worker(sm, slot)) for slot in range(slots) for sm in self.sms]
        # the kernel ends with its last block; write-backs still in flight carry on into the next launch
        env.run_until(simpy.AllOf(env, workers))
        after = counters()
        delta = {k: after[k] - launch.before[k] for k in after}
        cycles = env.now + self.skipped_cycles - start + self.launch_fixed_cycles()
        self._end_loop_skip()
        self.dirty_scale = launch.total / (launch.total - launch.filling)
        return cycles, launch.total, delta

    def _end_loop_skip(self) -> None:
        """Add the launch's loop skips to the run's."""
        done = self.loop_skip
        if done is None:
            return
        for key in ("skips", "ops_left_out", "cycles_left_out", "mismatch_bytes", "evicting_skips", "drift_skips"):
            self.loop_skips[key] += getattr(done, key)
        self.loop_skip = None
