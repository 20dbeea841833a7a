"""One launch on the simulated GPU (Gpu.run_kernel): its blocks in launch order, the workers (one per block slot
of each SM) that run them, and the shortcuts that leave blocks out on the way.

Periodic skip: a kernel whose blocks all do the same work (kernel.uniform) is watched each time one more block
per SM is done. Once the intervals repeat exactly twice over (periodic.skip_plan) and the L2 stays in one regime
(Gpu._l2_regime), whole periods of blocks that are copies of those running are left out: their time and every
counter are added period by period, watching starts again, and the rest of the launch, its tail included, runs
as usual (a launch over many heads leaves out a stretch of each, or whole heads). The unit skip (unitskip.py)
leaves out whole heads that the last two show to be copies, and blocks that run on from tile to tile are
watched where they take their tiles (periodic.CarriedSkip).
"""

from __future__ import annotations

from collections import defaultdict, deque

import simpy

from .loopskip import LoopSkip
from .periodic import CarriedSkip, counters_repeat, skip_plan
from .resources import Barrier
from .timing import RoleTimer
from .unitskip import UnitSkip


class Launch:
    """The state of one launch: what is queued, what is done, what was left out, and the watched marks."""

    def __init__(self, gpu, kernel, counters, extrapolate: bool, slots: int, start: int):
        self.gpu, self.kernel, self.counters = gpu, kernel, counters
        self.env, self.p = gpu.env, gpu.profile
        self.slots = slots
        if extrapolate and gpu.trace is None:
            # the evicting loop skip only where a K/V head, in the room its lines take, overflows the L2: its
            # K/V stream through it, and which lines survive does not hang on the exact order of reads
            # (where they partly fit, a run left 2-4% fewer HBM bytes than its plain run)
            room = gpu.kv_head_bytes * max(gpu.copies.values(), default=1.0)
            # the drift skip where blocks differ (causal, variable-length: the periodic skip takes uniform
            # kernels), and blocks are one role (a warp-specialised block's roles would have to leave out alike)
            drift = gpu.drift_skip and not kernel.uniform and len(kernel.roles) == 1 and kernel.carry is None
            gpu.loop_skip = LoopSkip(gpu, counters, evicting=room > gpu.l2.capacity, drift=drift)
        items = self.items = gpu.sample(kernel)
        wave = slots * gpu.n_sms
        total = self.total = len(items)
        # a block that runs on from tile to tile takes its next tile before the last has ended: no waves
        steady = extrapolate and kernel.uniform and total >= 4 * wave
        self.watch = steady and kernel.carry is None
        of = kernel.kv_head_of or (lambda c: (c[0], c[1] // gpu.group))
        self.heads = [of(c) for c in items] if steady else None
        # blocks that run on from tile to tile are watched where they take their tiles (periodic.py)
        self.tiles = CarriedSkip(gpu, self.heads, gpu.n_sms, slots, counters) if steady and not self.watch else None
        units = UnitSkip(items, wave, of) if extrapolate and gpu.trace is None and gpu.heads is not None else None
        self.units = units if units is not None and units.ok else None
        # the periodic skip queues blocks as they are dispatched; otherwise the queue holds them all, and the
        # unit skip (and the carried blocks' periodic skip) leaves out blocks from its front when a worker
        # asks whether any block is left
        if self.watch:
            self.queue = deque(items[:wave])
        elif self.units or self.tiles:
            self.queue = _Dispatch(items, self.asking)
        else:
            self.queue = deque(items)
        self.before = counters()
        self.run = {"done": 0, "next": len(self.queue), "skip": None, "left_out": 0, "filling": 0, "from": 0,
                    "unit": -1}
        self.skips: list[tuple[int, int]] = []  # (first block, blocks) of each stretch of blocks left out
        # (cycle, counters) each time n_sms more blocks are done
        self.marks: list[tuple[int, dict]] = [(start, self.before)]
        self.l2_marks = [gpu._l2_state()]

    def block_of(self, done: int) -> int:
        """The launch index of the `done`-th block to finish (blocks finish in launch order, but past the
        blocks left out)."""
        for at, blocks in self.skips:
            if done >= at:
                done += blocks
        return done

    def _watch_again(self) -> None:
        """The periodic skip watches again from the next whole round of blocks."""
        run, n = self.run, self.gpu.n_sms
        run["skip"] = None
        run["from"] = run["done"] + n - run["done"] % n
        self.marks.clear()
        self.l2_marks.clear()

    def leave_out(self, plan: dict) -> None:
        """Leave out a plan's blocks: their time and every counter, bytes included, move by what they moved in
        the watched period, once per period; watching starts again from here."""
        gpu, run, marks = self.gpu, self.run, self.marks
        k, period, reps = plan["mark"], plan["period"], plan["reps"]
        (t0, c0), (t1, c1) = marks[k - period], marks[k]
        gpu.leave_out_blocks(t1 - t0, {key: c1[key] - c0[key] for key in c1}, reps)
        if plan["regime"] == "filling":  # the left-out blocks' dirty lines would still be there too
            run["filling"] += plan["blocks"]
        self.skips.append((plan["at"], plan["blocks"]))
        run["next"] += plan["blocks"]
        run["left_out"] += plan["blocks"]
        gpu.extrapolated_blocks += plan["blocks"]
        gpu.periodic_skips += 1
        self._watch_again()

    def units_from(self, at: int) -> int:
        """Before block `at` is dispatched: if it is a head's first, the blocks of the heads from it on that
        the last two heads say are copies (unitskip.py), left out; how many."""
        gpu, run, units = self.gpu, self.run, self.units
        unit = units.unit_at(at)
        if unit is None or unit <= run["unit"]:
            return 0
        run["unit"] = unit  # marked once, however often the queue is asked
        plan = units.mark(unit, self.env.now + gpu.skipped_cycles, self.counters(), gpu._l2_state(), gpu.l2)
        if plan is None:
            return 0
        gpu.leave_out_blocks(plan["cycles"], plan["delta"], plan["reps"])
        if plan["filling"]:
            run["filling"] += plan["blocks"]
        self.skips.append((at, plan["blocks"]))
        if self.watch:
            run["next"] += plan["blocks"]
        run["left_out"] += plan["blocks"]
        gpu.extrapolated_blocks += plan["blocks"]
        gpu.unit_skips["skips"] += 1
        gpu.unit_skips["units_left_out"] += plan["units"]
        gpu.unit_skips["worst"] = max(gpu.unit_skips["worst"], units.worst)
        if self.watch:
            self._watch_again()
        return plan["blocks"]

    def asking(self, index: int) -> int:
        """A worker asks for block `index` (the queue holds every block): the blocks left out from it on."""
        tiles = self.tiles
        blocks = tiles.asking(index) if tiles is not None else 0
        self.run["left_out"] += blocks
        if not blocks and self.units is not None:
            blocks = self.units_from(index)
            if blocks and tiles is not None:
                tiles.restart(index + blocks)
        return blocks

    def block_done(self) -> None:
        gpu, run, total = self.gpu, self.run, self.total
        run["done"] += 1
        if gpu.on_block is not None:
            gpu.on_block(run["done"] + run["left_out"], total)
        if not self.watch:
            return
        if run["skip"] is None and run["done"] % gpu.n_sms == 0 and run["done"] >= run["from"]:
            self._look_for_a_period()
        plan = run["skip"]
        # the finishing worker takes the next block from the queue (one that finds it empty is done)
        if not self.queue and run["next"] < total:
            if plan and plan["at"] == run["next"]:
                self.leave_out(plan)
            if self.units is not None and run["next"] < total:
                self.units_from(run["next"])
            if run["next"] < total:
                self.queue.append(self.items[run["next"]])
                run["next"] += 1

    def _look_for_a_period(self) -> None:
        """A round of blocks is done: mark it, and plan a skip once the marks repeat (periodic.skip_plan) with
        the counters and the L2 in one regime."""
        gpu, run, marks = self.gpu, self.run, self.marks
        marks.append((self.env.now + gpu.skipped_cycles, self.counters()))
        self.l2_marks.append(gpu._l2_state())
        first = run["from"]
        plan = skip_plan(self.heads, gpu.n_sms, self.slots, [m[0] for m in marks], run["next"],
                         lambda n: self.block_of(first + n))
        regime = (plan and counters_repeat(marks, plan["period"])
                  and gpu._l2_regime(self.l2_marks, plan, run["done"] + run["left_out"], self.total))
        if regime:
            plan["mark"], plan["regime"] = len(marks) - 1, regime
            run["skip"] = plan

    def carried(self, sm, slot: int):
        """A block whose roles run on from tile to tile (Kernel.carry): the first role takes the next tile from
        the queue as it ends its part of the last one (as the kernel's producer takes it from the grid's
        counter), the others follow it tile by tile; one set of barriers keeps its counts."""
        env, gpu, kernel, queue, p = self.env, self.gpu, self.kernel, self.queue, self.p
        if not queue:
            return
        yield env.timeout(p.cta_launch_cycles)
        barriers = defaultdict(lambda: Barrier(env))
        tiles = []  # (cta, the block's state before it) of each tile taken, in order
        taken = [env.event()]  # taken[k] fires once tile k is taken or the queue was found empty
        unfinished = []  # roles still running each tile

        # a role's part of tile k: part() gives the generator to run, finished() follows it (two plain
        # functions, not one generator around it: one frame less for each of the run's resumptions)
        def part(role, k: int):
            cta, state = tiles[k]
            timer = RoleTimer(gpu, sm, barriers, gpu.trace, f"SM{sm.index}.{slot} {role.name}", slot)
            return timer.run(role.program(cta, state))

        def finished(k: int) -> None:
            unfinished[k] -= 1
            if not unfinished[k]:
                self.block_done()

        def lead(role):
            state = None
            while queue:
                cta = queue.popleft()
                if tiles and kernel.tile_counter:  # the next tile's index: an atomic on the L2's counter
                    yield env.timeout(p.l2_hit_latency_cycles)
                tiles.append((cta, state))
                unfinished.append(len(kernel.roles))
                state = kernel.carry(state, cta)
                taken[-1].succeed()
                taken.append(env.event())
                k = len(tiles) - 1
                yield from part(role, k)
                finished(k)
            taken[-1].succeed()

        def follow(role):
            k = 0
            while True:
                if not taken[k].processed:
                    yield taken[k]
                if k == len(tiles):
                    return
                yield from part(role, k)
                finished(k)
                k += 1

        yield simpy.AllOf(env, [env.process(lead(kernel.roles[0]))]
                          + [env.process(follow(role)) for role in kernel.roles[1:]])

    def worker(self, sm, slot: int):
        env, gpu, kernel, queue, p = self.env, self.gpu, self.kernel, self.queue, self.p
        if kernel.carry is not None:
            yield from self.carried(sm, slot)
            return
        first = True
        log = gpu.block_log
        while queue:
            cta = queue.popleft()
            # a block's own clock: the loop periods it left out count, the blocks left out while it ran do not
            start = env.now + gpu.skipped_cycles - gpu.blocks_skipped_cycles
            if first or not kernel.persistent:
                # the stagger experiment's odd slots start late (Gpu.start_stagger; 0 in every other run)
                late = gpu.start_stagger if first and slot % 2 else 0
                yield env.timeout(p.cta_launch_cycles + late)
                first = False
            barriers = defaultdict(lambda: Barrier(env))
            procs = []
            for role in kernel.roles:
                track = f"SM{sm.index}.{slot} {role.name}"
                timer = RoleTimer(gpu, sm, barriers, gpu.trace, track, slot)
                procs.append(env.process(timer.run(role.program(cta))))
            sm.blocks += 1
            yield simpy.AllOf(env, procs)
            sm.blocks -= 1
            if log is not None:  # the dispatch replay's record of what the block cost (simulator/replay.py)
                log.append((cta, sm.index, start, env.now + gpu.skipped_cycles - gpu.blocks_skipped_cycles))
            self.block_done()

    @property
    def filling(self) -> int:
        """Blocks left out while the L2 was filling (their dirty lines would still be there)."""
        return self.run["filling"] + (self.tiles.filling if self.tiles is not None else 0)


class _Dispatch(deque):
    """A launch's blocks in launch order, taken from the front by workers that first ask whether any is left
    (`while queue`): asking lets `first(index)` leave out blocks from the front one (launch index `index`)
    on; it returns how many. A block is left out before any worker takes it, wherever workers take blocks."""

    def __init__(self, items: list, first):
        super().__init__(items)
        self.total, self.first = len(items), first

    def __bool__(self) -> bool:
        if len(self):
            for _ in range(self.first(self.total - len(self))):
                self.popleft()
        return len(self) > 0
