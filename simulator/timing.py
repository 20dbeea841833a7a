"""The timing interpreter: each tile op of a warp role becomes requests to the SM's and the chip's units.

It reads the same programs as the numeric interpreter and never computes a time itself beyond
work / rate of the unit serving it; waiting, overlap and contention come out of the simulation.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections import deque

from flashsim.algorithms.ir import (
    RMEM,
    SMEM,
    Arrive,
    AtomicAdd,
    BlockSetup,
    Code,
    Fill,
    Gemm,
    GemmWait,
    Load,
    LseExp,
    MergeSplits,
    Normalize,
    OnlineSoftmax,
    Quantize,
    Rescale,
    RescaleMerge,
    RowDot,
    RowMax,
    RowSoftmax,
    SoftmaxGrad,
    Store,
    StoreShared,
    SyncThreads,
    Wait,
    WarpReduce,
)
from flashsim.simulator.gemm_replay import FRAGMENT_BYTES, exposed_cycles, warp_tile
from flashsim.simulator.instructions import (
    HMMA_FLOPS,
    HMMA_K,
    WARP,
    exp2f_issue,
    lower_gemm,
    lower_phases,
    per_pipe,
    phase_chain,
    total,
)

from .icache import CODE_LINE_BYTES
from .loopskip import HISTORY, signatures, take

OPERAND_BYTES = {"fp8": 1, "fp16": 2, "bf16": 2, "fp32": 4}
_ELEMENTWISE = frozenset(
    (OnlineSoftmax, RowMax, Normalize, Rescale, RescaleMerge, RowSoftmax, Quantize, MergeSplits, RowDot, LseExp,
     SoftmaxGrad)
)


def gemm_smem_bytes(op: Gemm) -> int:
    """Operand bytes a GEMM reads from shared memory. mma.sync loads fragments per warp: with split-Q
    ('m') every warp reads all of B, with 'n' all of A; wgmma reads each operand once per warpgroup."""
    e = OPERAND_BYTES[op.dtype]
    a = op.m * op.k * e if op.a_level == SMEM else 0
    b = op.k * op.n * e if op.b_level == SMEM else 0
    if op.instr == "mma_sync" and op.warps > 1:
        if "x" in op.split:  # a grid of warps (counting.operand_reads)
            rows, cols = map(int, op.split.split("x"))
            a, b = a * cols, b * rows
        elif op.split == "m":
            b *= op.warps
        elif op.split == "n":
            a *= op.warps
    return a + b


def pipe_share(warps: int, sub_partitions: int) -> float:
    """The largest fraction of an SM's tensor, SFU and ALU rate that `warps` warps can use: each warp is
    bound to one sub-partition, an op's work is split evenly over its warps, so it finishes with the
    sub-partition holding the most of them (1 warp: a quarter of a 4-way SM; 6 warps: 6 / 8)."""
    return warps / (sub_partitions * -(-warps // sub_partitions))


class RoleTimer:
    """Runs one role of one thread block on one SM as a simpy process."""

    def __init__(self, gpu, sm, barriers, trace=None, track: str = "", slot: int = 0):
        self.gpu, self.sm, self.barriers = gpu, sm, barriers
        # the SM's TMA engine walks one copy after another; loads and stores the warps issue (cp.async,
        # ld, st) interleave with other blocks' warps, so each block's queue behind its own at the ports
        self.flow = (sm.index, slot)
        self.env = gpu.env
        self.p = gpu.profile
        self.tokens: dict[str, int] = {}
        self.trace = trace
        self.track = track
        # the loop skip (simulator/loopskip.py) reads a role's last ops and the ops it will issue next
        self.skip = gpu.loop_skip
        self.pulled = 0  # ops taken from the program
        self.pulled_at = 0  # the cycle the last of them was taken
        self.history: deque = deque(maxlen=HISTORY)
        self.ahead: list = []  # ops taken from the program early, not yet issued (from `at` on)
        self.ahead_sigs: list = []
        self.at = 0
        self.source = None
        self.windows: dict[str, deque] = {}  # buffer -> its parts' plain loads still holding registers
        self.code_ready = 0  # fetch_model 1: the cycle the last line of the stretch the warps run has come
        self.front_left = 0  # fetch_model 2: lines of the stretch the warps run that the SM lacks, not yet reached
        self.front_hidden = 0  # ... and the cycles its bookkeeping takes to issue, under which the rest can come

    def _mark(self, name: str, start: int, end: int) -> None:
        if self.trace is not None and end > start:
            self.trace.append((self.track, name, start, end))

    def _until(self, reqs, extra: int = 0, lags: tuple | None = None):
        """Sleep until every (unit, request) is served, plus `extra` cycles of latency counted from the last
        one's end: a wait for work that ended long enough ago (an asynchronous GEMM waited for after the
        softmax it overlapped) does not sleep. Shared units can only push an estimate later, so wake at the
        estimate and ask again. lags: per request, cycles past its own end that the wait lasts at least."""
        env = self.env
        if lags is None and len(reqs) == 1:  # the common case: the loop below for one request
            unit, rid = reqs[0]
            while True:
                now = env._now
                served = math.ceil(max(0, unit.estimate(now, rid)) - 1e-9)
                if served + extra <= now:
                    break
                yield env.timeout(served + extra - now)
                if env._now >= served + extra:
                    extra = 0
            unit.release(rid)
            return
        while True:
            now = env._now  # simpy's `now` property, read directly: this loop runs for most ops
            t = now if not reqs else 0
            if lags is None:
                for unit, rid in reqs:
                    finish = unit.estimate(now, rid)
                    if finish > t:
                        t = finish
            else:
                for (unit, rid), lag in zip(reqs, lags, strict=True):
                    finish = unit.estimate(now, rid) + lag
                    if finish > t:
                        t = finish
            served = math.ceil(t - 1e-9)
            if served + extra <= now:
                break
            yield env.timeout(served + extra - now)
            if env._now >= served + extra:
                extra = 0
        for unit, rid in reqs:
            unit.release(rid)

    def _steal(self, steal: tuple, tensor_req) -> None:
        """From the start of a wgmma's tensor work (its queue's end less the work), the pipe capacity it
        takes from the SM's other warps; nobody waits for it."""
        tensor, taken = steal
        unit, rid = tensor_req
        env = self.env

        def submit(_event=None):
            now = env._now
            for u, work, cap in taken:
                u.release(u.submit(now, work, cap))

        delay = math.ceil(unit.estimate(env._now, rid) - tensor) - env._now
        if delay > 0:
            env.timeout(delay).callbacks.append(submit)
        else:
            submit()

    def run(self, program):
        env, gpu, sm, p = self.env, self.gpu, self.sm, self.p
        tracing = self.trace is not None
        inflight: dict[str, object] = {}  # register or SMEM buffer -> event: a plain load into it landed
        plans = sm.plans  # op id -> its requests to this SM's units (_gemm_plan, _elementwise_plan)
        reductions = []  # events: an atomic add the L2 has performed (the block ends after the last)
        skip = self.skip
        if skip is not None:
            skip.enter(self)
        source = self.source = iter(program)
        ahead, history = self.ahead, self.history
        block_share = p.block_share_model
        # branches in order of how often schedules issue them (barrier waits and arrivals first)
        while True:
            if self.at < len(ahead):
                op = ahead[self.at]
                self.at += 1
            else:
                if ahead:
                    ahead.clear()
                    self.ahead_sigs.clear()
                    self.at = 0
                op = next(source, None)
                if op is None:
                    break
            if skip is not None:
                self.pulled += 1
                self.pulled_at = env._now
                history.append(op)
                if skip.ref is self:
                    skip.step(op)
            gpu.ops += 1
            kind = type(op)
            if inflight:
                for event in _waits(op, kind, inflight):
                    if not event.processed:
                        yield event
            now = env._now
            if kind is Wait:
                event = self.barriers[op.barrier].wait(op.target)
                if event is not None:
                    yield event
                    if tracing:
                        self._mark(f"wait {op.barrier}", now, env.now)
            elif kind is Arrive:
                self.barriers[op.barrier].arrive(op.count)
            elif kind is Gemm:
                plan = plans.get(id(op))
                if plan is None:
                    plan = _gemm_plan(op, sm, p)
                wants = plan[1] if not block_share or sm.blocks < 2 else _block_share(plan[1], sm.blocks)
                reqs = [(unit, unit.submit(now, work, cap)) for unit, work, cap in wants]
                if plan[3]:
                    self._steal(plan[3], reqs[0])
                if op.async_token:
                    self.tokens[op.async_token] = (reqs, plan[2], now)
                    yield env.timeout(1)
                elif plan[4]:  # ldsm_model 1 and 2: the loads' latency the warps of the SM's GEMMs leave exposed
                    lags = _load_lags(plan, len(reqs), sm, p)
                    sm.mma_warps += op.warps
                    yield from self._until(reqs, plan[2], lags)
                    sm.mma_warps -= op.warps
                    if tracing:
                        self._mark(f"gemm {op.dst}", now, env.now)
                else:
                    yield from self._until(reqs, plan[2])
                    if tracing:
                        self._mark(f"gemm {op.dst}", now, env.now)
                if self.front_left:
                    yield from self._front(op, now)
            elif kind is GemmWait:
                pending = self.tokens.pop(op.token, None)
                if pending is not None:
                    reqs, latency, issued = pending
                    yield from self._until(reqs, latency)
                    if tracing:
                        self._mark(f"gemm {op.token}", issued, env.now)
            elif kind is Load:
                to_smem = op.level == SMEM
                if op.via == "ld":
                    # plain loads are in flight together; the warp stalls at the first op that reads one
                    event = env.event()
                    if op.in_flight > 1 and op.dst_row is not None:
                        # parts of one buffer rotating through in_flight registers: wait for the part that
                        # held this one's register
                        window = self.windows.setdefault(op.dst, deque(maxlen=op.in_flight))
                        if len(window) == op.in_flight and not window[0].processed:
                            yield window[0]
                        window.append(event)
                    earlier = inflight.get(op.dst) if op.dst_row is not None else None
                    # parts of one buffer: a reader waits for all of them
                    inflight[op.dst] = event if earlier is None else env.all_of([earlier, event])
                    landed = self._landing(event.succeed, "load", op.src, now)
                    gpu.load(op.src, now, to_smem, sm, landed, flow=self.flow)
                else:
                    tma = op.via == "tma"
                    landed = self._landing(self.barriers[op.barrier].arrive, "load", op.src, now, op.via)
                    gpu.load(op.src, now, to_smem, sm, landed, p.tma_latency_cycles if tma else 0,
                             None if tma else self.flow, tma)
                    if op.issue and not tma:
                        # the warps issue the copy's instructions and their address arithmetic, sharing
                        # the SM's warp schedulers with other blocks' copies
                        share = pipe_share(op.warps, p.sub_partitions_per_sm)
                        if block_share and sm.blocks > 1:
                            share /= sm.blocks
                        yield from self._until([(sm.issue, sm.issue.submit(now, op.issue * op.warps, share))])
                    else:
                        yield env.timeout(p.tma_issue_cycles if tma else p.cp_async_issue_cycles)
            elif kind in _ELEMENTWISE:
                plan = plans.get(id(op))
                if plan is None:
                    plan = _elementwise_plan(op, sm, p)
                blocks = sm.blocks if block_share else 1
                wants = plan[1] if blocks < 2 else _block_share(plan[1], blocks)
                reqs = [(unit, unit.submit(now, work, cap)) for unit, work, cap in wants]
                floor = now + plan[3]
                yield from self._until(reqs, plan[2])
                if floor > env._now:
                    yield env.timeout(floor - env._now)
                for phase, least in plan[6]:  # the issue model's later phases, one after another
                    start = env._now
                    wants = phase if blocks < 2 else _block_share(phase, blocks)
                    yield from self._until([(unit, unit.submit(start, work, cap)) for unit, work, cap in wants])
                    if start + least > env._now:
                        yield env.timeout(start + least - env._now)
                if plan[4]:
                    # exp2f's instructions wait on no chain: the warps' schedulers issue them, one per cycle
                    # each, shared with the other blocks' warps
                    yield from self._until([(sm.issue, sm.issue.submit(env._now, plan[4], plan[5] / blocks))])
                if tracing:
                    name = "softmax" if kind in (OnlineSoftmax, RowSoftmax) else kind.__name__.lower()
                    self._mark(name, now, env.now)
                if self.front_left:
                    yield from self._front(op, now)
            elif kind is SyncThreads:
                yield env.timeout(p.smem_latency_cycles)
            elif kind is Store:
                if op.fragments:
                    # the warp waits for its registers to leave: through the SM's store path at its rate and
                    # the L2's rate for partial-sector writes, which every SM storing so shares
                    taken = env.event()
                    gpu.partial_writes.submit(now, op.nbytes, taken.succeed, self.flow)  # succeed(cycle)
                    yield from self._until([(sm.stores, sm.stores.submit(now, op.nbytes))], 1)
                    if not taken.triggered:
                        yield taken
                    gpu.store(op.dst, env.now, False, sm)
                elif op.via == "tma":
                    gpu.store(op.dst, now, op.level == SMEM, sm)
                    yield env.timeout(p.tma_issue_cycles)
                else:
                    event = env.event()
                    landed = self._landing(event.succeed, "store", op.dst, now)
                    gpu.store(op.dst, now, op.level == SMEM, sm, landed, self.flow)
                    if p.store_path_model:
                        # beside the L2 port, the bytes leave through the SM's store path and the chip's store
                        # rate, which every SM storing shares
                        taken = env.event()
                        gpu.plain_writes.submit(now, op.nbytes, taken.succeed, self.flow)
                        yield from self._until([(sm.plain_stores, sm.plain_stores.submit(now, op.nbytes))])
                        if not taken.triggered:
                            yield taken
                    yield event
                    floor = now + op.chained * p.l2_hit_latency_cycles
                    if floor > env.now:
                        yield env.timeout(floor - env.now)
            elif kind is WarpReduce:
                share = pipe_share(op.warps, p.sub_partitions_per_sm)
                reqs = [(sm.smem, sm.smem.submit(now, op.smem_bytes)),
                        (sm.alu, sm.alu.submit(now, op.parts * op.rows * op.cols, share))]
                yield from self._until(reqs, 2 * p.smem_latency_cycles)
                if tracing:
                    self._mark("reduce", now, env.now)
            elif kind is Fill:
                yield from self._until([(sm.alu, sm.alu.submit(now, op.rows * op.cols))], 1)
            elif kind is StoreShared:
                yield from self._until([(sm.smem, sm.smem.submit(now, op.nbytes))], p.smem_latency_cycles)
            elif kind is AtomicAdd:
                tma = op.via == "tma"
                event = env.event()
                reductions.append(event)
                landed = self._landing(event.succeed, "atomic", op.dst, now)
                gpu.atomic(op.dst, now, tma, sm, landed, None if tma else self.flow)
                yield env.timeout(p.tma_issue_cycles if tma else max(1, op.chained * p.l2_hit_latency_cycles))
            elif kind is Code:
                yield from self._stretch(op, now)
            elif kind is BlockSetup:
                yield env.timeout(setup_cycles(op, p))
                if tracing:
                    self._mark("set-up", now, env.now)
            else:
                raise TypeError(f"timing interpreter has no rule for {kind.__name__}")
        for event in [*inflight.values(), *reductions]:
            if not event.processed:
                yield event
        if self.code_ready > env._now:  # fetch_model 1: the last stretch's code has all come
            yield env.timeout(self.code_ready - env._now)
        if self.front_left:  # fetch_model 2: the last stretch's lines no op reached (its bookkeeping)
            yield from self._front(None, env._now)
        if skip is not None:
            skip.leave(self)

    def _stretch(self, op: Code, now: int):
        """The warps go on to a stretch of code: wait until the SM has it (simulator/icache.py), then for the
        fetch redirects of the stretch's taken branches (every pass, kept code too), a far one's target line
        fetched as a line the SM lacks. With fetch_model 1 the stretch streams in while the warps run it: they
        wait, at the next stretch (or the program's end), for the last line of this one. A stretch whose
        instructions issue faster than its lines come (_fetch_paced) streams in under either fetch model, and
        its warps wait for its last line at once. With issue_model 1
        the warps first issue the stretch's bookkeeping instructions, sharing the SM's schedulers."""
        p = self.p
        if op.issue and p.issue_model:
            share = pipe_share(op.warps, p.sub_partitions_per_sm)
            if op.alone and p.bookkeeping_issue_cycles > 1:
                # nothing else to issue beside them: each warp issues its own at the pace of its dependencies
                slots = p.sub_partitions_per_sm * p.warp_issue_per_clk_per_sub_partition
                share = min(share, op.warps / (p.bookkeeping_issue_cycles * slots))
            yield from self._until([(self.sm.issue, self.sm.issue.submit(now, op.issue * op.warps, share))])
            now = self.env._now
        paced = op.instructions and _fetch_paced(op, p)
        if p.fetch_model == 2 and op.streamed and not paced:
            if self.front_left:  # the previous stretch's lines no op reached (its bookkeeping)
                yield from self._front(None, now)
                now = self.env._now
            self.front_left = self.sm.code.front(op.name, op.nbytes, now)
            # a warp issues its bookkeeping one a cycle beside the stretch's ops, at its dependencies' pace alone
            pace = p.bookkeeping_issue_cycles if op.alone else 1
            self.front_hidden = op.issue * pace * -(-op.warps // p.sub_partitions_per_sm)
            if op.branches and p.icache_branch_cycles:
                yield self.env.timeout(math.ceil(op.branches * p.icache_branch_cycles
                                                 + op.far * p.icache_miss_cycles_per_line))
            return
        if p.fetch_model == 1 or paced:
            if self.code_ready > now:
                yield self.env.timeout(self.code_ready - now)
                self._mark("fetch wait", now, self.code_ready)
                now = self.code_ready
            self.code_ready = self.sm.code.stream(op.name, op.nbytes, now, p.icache_fetch_cycles_per_line)
            if paced and self.code_ready > now:  # the warps run it as its lines come
                yield self.env.timeout(self.code_ready - now)
                self._mark(f"fetch {op.name}", now, self.code_ready)
                now = self.code_ready
            if op.branches and p.icache_branch_cycles:
                yield self.env.timeout(math.ceil(op.branches * p.icache_branch_cycles
                                                 + op.far * p.icache_miss_cycles_per_line))
            return
        if op.streamed:
            return
        ready = self.sm.code.fetch(op.name, op.nbytes, now)
        if op.branches and self.p.icache_branch_cycles:
            p = self.p
            ready += math.ceil(op.branches * p.icache_branch_cycles + op.far * p.icache_miss_cycles_per_line)
        if ready > now:
            yield self.env.timeout(ready - now)
            self._mark(f"fetch {op.name}", now, ready)

    def _front(self, op, start: int):
        """fetch_model 2: the lines of the op the warps ran from `start` (the stretch's rest for None) that the SM
        lacks come one after another as the warps reach them, behind the SM's other fetches; the op ends no
        sooner than its last line (the fetch microbenchmark: a line takes max(its issue, its fetch))."""
        lines = self.front_left if op is None else min(self.front_left, _op_lines(op))
        if lines <= 0:
            return
        self.front_left -= lines
        f = self.p.icache_fetch_cycles_per_line
        if not f:
            return
        if op is None:  # the lines no op reached hold the stretch's bookkeeping, which issues as they come
            lines = max(0.0, lines - self.front_hidden / f)
            if not lines:
                return
        ready = self.sm.code.queue(lines, start, f)
        if ready > self.env._now:
            self._mark("fetch wait", self.env._now, ready)
            yield self.env.timeout(ready - self.env._now)

    # -- loop skip (simulator/loopskip.py) -----------------------------------------------------------
    def smem_work(self, op) -> float:
        """The bytes an op itself asks of the SM's shared-memory port (its loads' fills aside), as its plan asks
        them: the loop skip moves that counter by the ops it leaves out."""
        kind, sm = type(op), self.sm
        if kind is Gemm:
            plan = sm.plans.get(id(op)) or _gemm_plan(op, sm, self.p)
        elif kind in _ELEMENTWISE:
            plan = sm.plans.get(id(op)) or _elementwise_plan(op, sm, self.p)
        elif kind is WarpReduce:
            return op.smem_bytes
        elif kind is StoreShared:
            return op.nbytes
        else:
            return 0.0
        return sum(work for unit, work, _ in plan[1] if unit is sm.smem)

    def repeats_ahead(self, n: int, most: int | None, memo: dict) -> int:
        """How many times (up to `most`) the program's next ops repeat the last `n` issued, op for op.
        memo: signatures by op id, for ops alive while it is used (blocks of a head share their K/V loads)."""
        history = self.history
        if n > len(history):
            return 0
        ahead, sigs, at = self.ahead, self.ahead_sigs, self.at
        last: list = []
        signatures([history[i] for i in range(len(history) - n, len(history))], last, memo)
        reps = 0
        whole = True  # the stretches pulled last may repeat all at once
        while most is None or reps < most:
            end = at + (reps + 1) * n
            if end > len(ahead):
                # take the next periods' ops from the program: as many as `most` stretches need at once, else
                # a few periods more than held, doubling (each take and compare has its own cost)
                want = at + most * n if most is not None else 2 * len(ahead) - at + 16 * n
                more, more_sigs = take(self.source, max(want, end + 15 * n) - len(ahead), memo)
                ahead += more
                sigs += more_sigs
                whole = True
                if end > len(ahead):
                    break
            if reps == 0:
                if sigs[at:end] != last:
                    break
                reps = 1
                continue
            # every whole stretch pulled so far at once: each repeats the one before it where the ops from
            # here on equal those one stretch back (else stretch by stretch, up to the first that differs)
            if whole:
                k = (len(ahead) - at) // n - reps
                if most is not None:
                    k = min(k, most - reps)
                start = at + reps * n
                if sigs[start:start + k * n] == sigs[start - n:start + (k - 1) * n]:
                    reps += k
                    continue
                whole = False
            if sigs[end - n:end] != sigs[end - 2 * n:end - n]:
                break
            reps += 1
        return reps

    def load_places(self, n: int) -> list[int]:
        """Where the loads are among the next n ops ahead."""
        ahead, at = self.ahead, self.at
        return [k for k in range(n) if type(ahead[at + k]) is Load]

    def loads_at(self, place: int, n: int, reps: int) -> list:
        """The load at `place` (load_places) of each of the next `reps` stretches of n ops ahead."""
        start = self.at + place
        return self.ahead[start : start + reps * n : n]

    def counterparts(self, reps: int, n: int, stretches: int) -> list:
        """(left-out load, issued load) pairs: the last `stretches` of `reps` stretches of n ops ahead, each
        with the load as many stretches back in the ops issued that it stands for after the skip."""
        history, ahead, at = self.history, self.ahead, self.at
        pairs = []
        for q in range(min(reps, stretches, len(history) // n)):
            left_out = ahead[at + (reps - 1 - q) * n:at + (reps - q) * n]
            issued = [history[i] for i in range(len(history) - (q + 1) * n, len(history) - q * n)]
            pairs += [(a, b) for a, b in zip(left_out, issued, strict=True) if type(a) is Load]
        return pairs

    def arrivals(self, n: int, reps: int) -> None:
        """Count the arrivals the next reps stretches of n ops ahead would have made on the block's barriers
        (their waits after a skip count them as made). The stretches repeat each other's barriers and
        counts, so the first one's, reps times."""
        barriers = self.barriers
        for op in self.ahead[self.at:self.at + n]:
            kind = type(op)
            if kind is Load:
                if op.via != "ld":
                    barriers[op.barrier].skipped += reps
            elif kind is Arrive:
                barriers[op.barrier].skipped += reps * op.count

    def drop(self, n: int) -> None:
        self.at += n
        self.pulled += n

    def _landing(self, action, what: str, tile, start: int, via: str | None = None):
        """Callback for a load or store's landing cycle: `action()` (succeed the event the warp waits on, or
        arrive on the copy's barrier), with the interval traced as `what` of the tile, on the SM's copy
        engine's track for `via`, else this role's (the names are made only when tracing)."""
        if self.trace is None:
            return lambda _cycle: action()
        name = f"{what} {tile.tensor}"
        track = f"SM{self.sm.index} {via}" if via is not None else self.track

        def landed(cycle: int) -> None:
            if cycle > start:
                self.trace.append((track, name, start, cycle))
            action()

        return landed


def _load_lags(plan: tuple, requests: int, sm, p) -> tuple:
    """Per request of an ldmatrix-fed mma.sync GEMM (plan from _gemm_plan, ldsm_model 1), the cycles its wait
    lasts past that request's end: none past the products and the issue, past the loads the part of their
    latency the warps leave exposed. Each k-step's products wait for that k-step's fragments; a sub-partition's
    other warps in a GEMM at the same time fill the wait with their own loads and products, so n warps per
    sub-partition expose mma_sync_ldsm_latency_cycles / n^2 per k-step (`calibrate --only ldsm_form`: our
    kernels' k-steps at 4 to 16 warps per SM take max(products alone, loads alone + that)). n counts the warps
    of every mma.sync GEMM in flight on the SM when this one starts, another block's too; with block shares
    (block_share_model 1), where each block runs as on its own 1/k of the SM, those of its own GEMM only, so
    that, as measured, the blocks' phase apart does not change what they cost (and the run stays periodic).
    On the FA2 grid's development set that takes our v2 / SDPA flash / our v1 to 5.6 / 4.6 / 8.0% (every
    block's GEMM warps counted: 3.9 / 6.0 / 12.8%; those in flight, phase-dependent: 5.0 / 5.5 / 5.7%)."""
    if isinstance(plan[4], tuple):
        return (0.0, _replayed_lag(plan, sm, p)) + (0.0,) * (requests - 2)
    if p.block_share_model:
        n = max(1.0, plan[0].warps / p.sub_partitions_per_sm)
    else:
        n = max(1.0, (sm.mma_warps + plan[0].warps) / p.sub_partitions_per_sm)
    return (0.0, plan[4] * p.mma_sync_ldsm_latency_cycles / (n * n)) + (0.0,) * (requests - 2)


def _replayed_lag(plan: tuple, sm, p) -> float:
    """ldsm_model 2: the cycles an ldmatrix-fed GEMM lasts past its loads alone, from its warps' instructions
    replayed (simulator/gemm_replay.py) with every warp of the SM's mma.sync GEMMs at once: with block shares
    (block_share_model 1) the resident blocks' warps in the same GEMM, as each runs on its own 1/k of the SM;
    else those in flight when it starts."""
    op, tile = plan[0], plan[4]
    warps = op.warps * max(1, sm.blocks) if p.block_share_model else sm.mma_warps + op.warps
    # the same op with as many warps gives the same lag: kept per SM (with the op, whose id it is keyed by)
    kept = sm.lags.get((id(op), warps))
    if kept is not None and kept[0] is op:
        return kept[1]
    port = FRAGMENT_BYTES / p.smem_bandwidth_bytes_per_clk_per_sm
    hmma = HMMA_FLOPS[op.dtype] * p.sub_partitions_per_sm / p.tensor_flops_per_clk_per_sm(op.instr, op.dtype)
    lag = exposed_cycles(tile, warps, p.ldsm_prefetch_loads, port, hmma, p.ldsm_data_latency_cycles)
    if len(sm.lags) >= PLANS_MAX:
        sm.lags.clear()
    sm.lags[id(op), warps] = (op, lag)
    return lag


def _ldsm_unhidden(tensor: float, smem_bytes: int, share: float, p) -> tuple[float, int]:
    """An ldmatrix-fed mma.sync GEMM's tensor cycles and shared-memory bytes with the part of the shorter of
    its loads and its products that the longer does not hide added to the longer: each warp's products wait
    for its own loads, so a sub-partition's tensor pipe or the SM's read path idles now and then
    (`calibrate --only ldsm_form`: the v2 kernels' k-steps at 8 warps per SM take the longer of the two
    plus mma_sync_ldsm_unhidden_fraction of the shorter)."""
    loads = smem_bytes / p.smem_bandwidth_bytes_per_clk_per_sm
    products = tensor / share  # alone, at the warps' share of the pipe
    unhidden = p.mma_sync_ldsm_unhidden_fraction * min(loads, products)
    if loads >= products:
        return tensor, smem_bytes + round(unhidden * p.smem_bandwidth_bytes_per_clk_per_sm)
    return tensor + unhidden * share, smem_bytes


# Plans kept per SM before the cache starts again (ops made per step, masked softmaxes, would pile up).
PLANS_MAX = 1 << 14


def _keep(plans: dict, op, plan: tuple) -> tuple:
    """Keep an op's plan by its id; the plan holds the op, so the id stays its own while kept."""
    if len(plans) >= PLANS_MAX:
        plans.clear()
    plans[id(op)] = plan
    return plan


def _block_share(wants: tuple, blocks: int) -> list:
    """Requests (unit, work, cap) capped at 1/blocks of what they may take (block_share_model 1: each of the
    SM's resident blocks takes at most its share of a unit; a queue's requests, cap None, keep their order)."""
    return [(unit, work, cap if cap is None else cap / blocks) for unit, work, cap in wants]


def _gemm_plan(op: Gemm, sm, p) -> tuple:
    """(op, ((unit, work, cap) of each request, in issue order), latency) of a GEMM on this SM: the same for
    every issue of the op, so worked out once."""
    share = pipe_share(op.warps, p.sub_partitions_per_sm)
    tensor = op.flops / p.tensor_flops_per_clk_per_sm(op.instr, op.dtype)  # cycles of the whole tensor pipe
    smem_bytes = gemm_smem_bytes(op)
    # ldsm_model 1: k-steps whose products wait on their ldmatrix fragments; 2: the warp tile replayed
    # (_load_lags)
    ksteps = 0
    if smem_bytes and op.instr == "mma_sync":
        if p.ldsm_model == 2:
            ksteps = warp_tile(op.m, op.n, op.k, op.warps, op.split, op.a_level == SMEM, HMMA_K[op.dtype]) or 0
        if p.ldsm_model == 1 or (p.ldsm_model == 2 and not ksteps):
            ksteps = math.ceil(op.k / HMMA_K[op.dtype])
        elif not p.ldsm_model and p.mma_sync_ldsm_unhidden_fraction:
            tensor, smem_bytes = _ldsm_unhidden(tensor, smem_bytes, share, p)
    # wgmma is asynchronous: the tensor cores take warpgroups' instructions in issue order
    tensor_req = (sm.wgmma_queue, tensor, None) if op.instr == "wgmma" else (sm.tensor, tensor, share)
    reqs = [tensor_req, (sm.smem, smem_bytes, 1.0)]
    if op.a_scale or op.b_scale:  # scaled products accumulate outside the tensor core
        reqs.append((sm.alu, 2 * op.m * op.n, share))
    steal = ()
    if p.issue_model:  # the HMMA / HGMMA and ldmatrix instructions take issue slots too
        reqs.append((sm.issue, _gemm_issue(op, p.mma_sync_issue_cycles) * op.warps, share))
        steal = _wgmma_steal(op, tensor, sm, p) if op.instr == "wgmma" else _mma_sync_steal(tensor, sm, p)
    latency = p.wgmma_latency_cycles if op.instr == "wgmma" else p.mma_sync_latency_cycles
    return _keep(sm.plans, op, (op, tuple(reqs), latency, steal, ksteps))


def _taken(fraction: float, tensor: float, sm, schedulers: bool = True) -> tuple:
    """(unit, work, cap) of `fraction` of each elementwise pipe over `tensor` cycles (and of the schedulers')."""
    units = (sm.issue, sm.alu, sm.int_alu, sm.sfu, sm.shfl) if schedulers else (sm.alu, sm.int_alu, sm.sfu, sm.shfl)
    return tuple((unit, fraction * tensor * unit.rate, 1.0) for unit in units)


def _wgmma_steal(op: Gemm, tensor: float, sm, p) -> tuple:
    """(tensor cycles, the pipe requests) of the elementwise capacity a wgmma takes from the SM's other warps
    while it runs: its accumulators, and an RS product's A fragments, go through the register file
    (wgmma_ss/rs_pipe_steal_fraction, measured by kernels/microbench/softmax_gemm.cu). The product does not
    wait for them; RoleTimer._steal serves them from its start."""
    rs = op.a_level == RMEM
    fraction = (p.wgmma_rs_pipe_steal_fraction if rs else p.wgmma_ss_pipe_steal_fraction) or 0.0
    return (tensor, _taken(fraction, tensor, sm)) if fraction else ()


def _mma_sync_steal(tensor: float, sm, p) -> tuple:
    """(tensor cycles, the pipe requests) of what a running mma.sync GEMM takes from the elementwise pipes of
    the other warps on its SM: mma_sync_pipe_steal_fraction of the FMA, ALU, MUFU and shuffle pipes (its
    operands and accumulators go through the register file; measured by kernels/microbench/softmax_gemm.cu
    beside ldmatrix-fed mma.sync). The scheduler's side is the HMMA's issue cycles (_gemm_issue)."""
    fraction = p.mma_sync_pipe_steal_fraction
    return (tensor, _taken(fraction, tensor, sm, schedulers=False)) if fraction else ()


def _elementwise_plan(op, sm, p) -> tuple:
    """(op, requests as in _gemm_plan, cycles after the last is served, the op's least cycles from its issue,
    then the scheduler work of instructions off the dependent stream (exp2f's) and its share) of an
    elementwise op on this SM."""
    share = pipe_share(op.warps, p.sub_partitions_per_sm)
    off_chain = 0.0
    phases = ()
    # the pre-pass's SIMT code (a Quantize in chunks) is issued as instructions whatever the schedule's GEMMs
    if p.issue_model or (type(op) is Quantize and op.chunks):
        (reqs, floor), *later = _issued(op, sm, share, p)
        phases = tuple(later)
    else:
        # each warp issues its share of the elementwise instructions as a dependent stream, at least the
        # dependent-issue interval apart, and its scheduler takes turns among the streams of the warps it holds
        stream = op.alu_flops - getattr(op, "exp2_ops", 0) + op.exps
        reqs = [(sm.sfu, op.exps, share), (sm.alu, op.alu_flops, share), (sm.dispatch, stream / WARP, share)]
        floor = math.ceil(stream / (WARP * op.warps) * p.fp32_dependent_issue_cycles)
        off_chain = _exp2f_issue(op) * op.warps
    extra = 1
    if type(op) is OnlineSoftmax and op.cross_warp > 1:
        # row max and sum exchanged through shared memory, with a barrier each
        reqs.append((sm.smem, 2 * op.rows * op.cross_warp * 4, 1.0))
        if p.xwarp_model:
            extra = round(p.cross_warp_exchange_cycles + op.cross_warp * p.cross_warp_exchange_cycles_per_warp)
        else:
            extra = 2 * p.smem_latency_cycles
    return _keep(sm.plans, op, (op, tuple(reqs), extra, floor, off_chain, share, phases))


@functools.lru_cache(maxsize=4096)
def _lowered(op) -> tuple[tuple[float, dict[str, float], str], ...]:
    """(instructions, per pipe, phase name) of each phase of an op, in order."""
    return tuple((total(counts), per_pipe(counts), name) for counts, name in lower_phases(op))


@functools.lru_cache(maxsize=1024)
def _exp2f_issue(op) -> float:
    return exp2f_issue(op)


@functools.lru_cache(maxsize=1024)
def _gemm_issue(op: Gemm, hmma_cycles: float = 1.0) -> float:
    """Scheduler cycles per warp of a GEMM's instructions: an mma.sync HMMA takes hmma_cycles
    (mma_sync_issue_cycles), every other instruction one."""
    counts = lower_gemm(op)
    return total(counts) + (hmma_cycles - 1.0) * counts.get("hmma", 0.0)


def _issued(op, sm, share: float, p) -> list[tuple[list, int]]:
    """The instruction-issue model of an elementwise op: its warps' instructions (simulator/instructions.py)
    go to the SM's warp schedulers, and each class's lanes to its pipe (FP32 FMA, ALU, MUFU, shuffle), all
    shared with whatever else the SM runs. An online softmax issues in three phases one after another (a
    row's max before its exponentials, the conversion after them); each phase lasts at least one row's
    dependent chain through it (rows of a thread, and threads, overlap). Returns (requests, chain cycles) per
    phase."""
    lanes = WARP * op.warps
    out = []
    for instrs, pipes, name in _lowered(op):
        reqs = [(sm.issue, instrs * op.warps, share)]
        # an FP32 instruction's lane does one FFMA's work: two of the profile's FLOPs
        for unit, work in ((sm.alu, 2 * pipes.get("fma", 0)), (sm.int_alu, pipes.get("alu", 0)),
                           (sm.sfu, pipes.get("mufu", 0)), (sm.shfl, pipes.get("shfl", 0))):
            if work:
                reqs.append((unit, work * lanes, share))
        chain = phase_chain(name, op, p.fp32_dependent_issue_cycles, p.mufu_latency_cycles, p.shfl_latency_cycles)
        out.append((reqs, math.ceil(chain)))
    return out


@functools.cache
def _op_lines(op) -> float:
    """128-byte lines of SASS an op's lowering issues per warp (eight instructions a line)."""
    from .instructions import lower, lower_gemm, total

    return total(lower_gemm(op) if type(op) is Gemm else lower(op)) / 8


@functools.cache
def _fetch_paced(op: Code, p) -> bool:
    """Whether the warps issue stretch `op`'s instructions faster than its lines stream in: each sub-partition's
    scheduler issues its warps' share at its rate, against the lines' fetch, one every
    icache_fetch_cycles_per_line (the mask's eight instructions a line take 8 cycles to issue, a line 16)."""
    per_scheduler = math.ceil(op.warps / p.sub_partitions_per_sm)
    issue = op.instructions * per_scheduler / p.warp_issue_per_clk_per_sub_partition
    return issue < math.ceil(op.nbytes / CODE_LINE_BYTES) * p.icache_fetch_cycles_per_line


def setup_cycles(op: BlockSetup, p) -> int:
    """A producer's set-up before a tile's first copy, its dependent steps one after another
    (kernels/microbench/block_start.cu measures each): the barriers, setmaxnreg, the tile counter's atomic (a
    round trip to the L2), the parameter reads and the index arithmetic."""
    cycles = op.param_reads * (p.constant_cold_read_cycles if op.cold else p.constant_read_cycles)
    if op.mbarriers:
        cycles += p.mbarrier_setup_cycles + op.mbarriers * p.mbarrier_init_cycles
    if op.realloc:
        cycles += p.setmaxnreg_cycles
    if op.counter:
        cycles += p.l2_hit_latency_cycles
    if op.tile_index:
        cycles += p.tile_index_cycles
    return max(1, round(cycles))


def _waits(op, kind, inflight: dict) -> list:
    """The plain loads `op` must wait for (a scoreboard on buffer names): those into buffers it names; a
    load into a buffer still being filled, and a barrier, wait too (SyncThreads publishes shared memory, so
    every load into it must have landed)."""
    if kind is SyncThreads:
        events = list(inflight.values())
        inflight.clear()
        return events
    if kind is Load:
        if op.in_flight > 1 and op.dst_row is not None:
            return []  # a part of a buffer waits for its register's earlier part (RoleTimer.run)
        names = [op.dst]
    else:
        names = [getattr(op, f) for f in _str_fields(kind)]
    return [e for e in [inflight.pop(name, None) for name in names] if e is not None]


_FIELDS: dict[type, tuple[str, ...]] = {}
# string fields that name a kind, a type or a barrier, not a buffer
_NOT_BUFFERS = {
    "level", "a_level", "b_level", "via", "instr", "dtype", "p_dtype", "split", "mode",
    "barrier", "async_token", "name",
}


def _str_fields(kind: type) -> tuple[str, ...]:
    """The fields of an op type that name buffers (its string-valued fields)."""
    if kind not in _FIELDS:
        _FIELDS[kind] = tuple(
            f.name for f in dataclasses.fields(kind) if "str" in str(f.type) and f.name not in _NOT_BUFFERS
        )
    return _FIELDS[kind]


__all__ = ["RMEM", "RoleTimer", "gemm_smem_bytes"]
