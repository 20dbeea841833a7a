"""The chip: SMs with their units, the shared L2 and HBM, and the thread-block scheduler.

Sampling: a run may simulate `sms` of the chip's SMs, with the thread blocks the hardware would send to
them and the chip-wide resources (HBM and L2 bandwidth, L2 capacity) scaled to their share. With
sms = sm_count it is the plain, whole-chip run.
"""

from __future__ import annotations

import math
from collections import defaultdict, deque

import simpy

from hw_profiles.errors import FlashsimError

from .l2 import L2Cache
from .resources import Barrier, QueueUnit, Server, SharedUnit
from .timing import RoleTimer

# Uniform kernels longer than this many waves (plus one) are simulated for this many and extrapolated.
EXTRAPOLATE_AFTER = 3


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

    def units(self) -> dict[str, SharedUnit]:
        return {"tensor": self.tensor, "wgmma": self.wgmma_queue, "sfu": self.sfu, "alu": self.alu, "smem": self.smem}


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


class Gpu:
    """heads: the sampled (batch, K/V head) pairs, or None for the whole problem; with `group` query heads per
    K/V head. A sample runs on `sms` SMs with `share` of the chip-wide resources."""

    def __init__(
        self,
        profile,
        sms: int | None = None,
        trace: list | None = None,
        heads: set | None = None,
        group: int = 1,
        share: float | None = None,
    ):
        self.profile = profile
        self.sms_total = profile.sm_count
        self.n_sms = min(sms or profile.sm_count, profile.sm_count)
        self.share = share if share is not None else self.n_sms / self.sms_total
        self.heads = heads
        self.group = group
        self.groups_total = 1
        # room in L2 a sampled line takes: the chip holds 1/share as many private lines at a time; tensors that
        # a head's blocks share (K, V) get their own ratio per kernel, from `sharing`
        self.private_copies = 1.0 / self.share
        self.copies: dict[str, float] = {}
        self.env = simpy.Environment()
        self.hbm = Server("hbm", profile.hbm_bytes_per_clk * self.share)
        self.write_cost = profile.hbm_bandwidth_bytes_per_s / profile.hbm_write_bandwidth_bytes_per_s
        self.clock_hz = profile.sm_clock_hz
        self.l2_port = Server("l2", profile.l2_bandwidth_bytes_per_clk * self.share)
        self.l2 = L2Cache(profile.l2_bytes, self.share, profile.l2_dirty_max_bytes)
        self.sms = [Sm(i, profile) for i in range(self.n_sms)]
        self.trace = trace
        self.hbm_write_bytes = 0
        self.smem_write_bytes = 0
        self.ops = 0  # tile ops interpreted
        self.extrapolated_blocks = 0

    # -- memory --------------------------------------------------------------------------------------
    def load(self, tile, now: int, to_smem: bool, sm: Sm) -> int:
        """Read a tile through L2 (and HBM on a miss); returns the cycle its bytes have landed."""
        p = self.profile
        pending, miss, missed = self.l2.read(tile, now, self.copies.get(tile.tensor, self.private_copies))
        done = self.l2_port.reserve(now, tile.nbytes) + p.l2_hit_latency_cycles
        if miss:
            t_hbm = self.hbm.reserve(now, miss) + p.hbm_latency_cycles
            for entry in missed:
                entry[2] = t_hbm
            done = max(done, t_hbm)
        done = max(done, pending)
        self._charge_evictions(now)
        if to_smem:
            # the copy engine's writes take their share of SMEM bandwidth from everyone else
            self.smem_write_bytes += tile.nbytes
            sm.smem.release(sm.smem.submit(now, tile.nbytes))
        return done

    def store(self, tile, now: int, from_smem: bool, sm: Sm) -> int:
        """Write a tile into L2 (write-back); evicted dirty lines go to HBM. Returns when L2 took it."""
        self.l2.write(tile, self.copies.get(tile.tensor, self.private_copies))
        self._charge_evictions(now)
        done = self.l2_port.reserve(now, tile.nbytes)
        if from_smem:
            sm.smem.release(sm.smem.submit(now, tile.nbytes))
        return done

    def _charge_evictions(self, now: int) -> None:
        evicted = self.l2.take_evicted()
        if evicted:
            # the HBM server counts read bytes; a written byte holds it longer (read/write turnarounds)
            self.hbm.reserve(now, evicted * self.write_cost)
            self.hbm_write_bytes += evicted

    # -- launches ------------------------------------------------------------------------------------
    def sample(self, kernel) -> list:
        """The thread blocks (or persistent work tiles) of the sampled K/V heads, in launch order."""
        if self.heads is None:
            return list(kernel.ctas)
        of = kernel.kv_head_of or (lambda c: (c[0], c[1] // self.group))
        return [c for c in kernel.ctas if of(c) in self.heads]

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
        first: dict[str, dict[tuple, int]] = defaultdict(lambda: defaultdict(int))
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
        sample = min(len(self.heads), -(-self.n_sms * slots // max(1, round(per_group))))
        ratio = chip / max(1, sample)
        return {t: ratio for t, keys in first.items() if max(keys.values()) > 1}

    def set_clock(self, clock_hz: float) -> None:
        """Power management sets the SM clock by load; bandwidths given per second become per cycle."""
        self.clock_hz = clock_hz
        self.hbm.rate = self.profile.hbm_bandwidth_bytes_per_s / clock_hz * self.share

    def run_kernel(self, kernel, counters, extrapolate: bool = True) -> tuple[int, int, dict]:
        """Run one launch; returns (cycles, thread blocks or tiles it covers, counter increments).

        `counters()` snapshots the byte and busy counters. Steady-state extrapolation: a kernel whose blocks
        all do the same work (kernel.uniform) and that spans more than EXTRAPOLATE_AFTER waves is run for
        that many waves only; the last wave's time and counter increments per block are taken to hold for
        the rest (the blocks of later waves meet the same contention and, after the first wave, the same
        L2 state)."""
        env, p = self.env, self.profile
        self.set_clock(p.clock_hz(self.tensor_instr(kernel)))
        start = env.now
        slots = blocks_per_sm(kernel, p)
        self.copies = self.sharing(kernel, slots)
        items = self.sample(kernel)
        wave = slots * self.n_sms
        total = len(items)
        if extrapolate and kernel.uniform and total > (EXTRAPOLATE_AFTER + 1) * wave:
            items = items[: EXTRAPOLATE_AFTER * wave]
        queue = deque(items)
        ran = len(items)
        before = counters()
        marks: dict[int, tuple[int, dict]] = {}  # completed blocks -> (cycle, counters) at wave ends
        done = [0]

        def worker(sm: Sm, slot: int):
            first = True
            while queue:
                cta = queue.popleft()
                if first or not kernel.persistent:
                    yield env.timeout(p.cta_launch_cycles)
                    first = False
                barriers = defaultdict(lambda: Barrier(env))
                procs = []
                for role in kernel.roles:
                    track = f"SM{sm.index}.{slot} {role.name}"
                    timer = RoleTimer(self, sm, barriers, self.trace, track)
                    procs.append(env.process(timer.run(role.program(cta))))
                yield simpy.AllOf(env, procs)
                done[0] += 1
                if ran < total and done[0] in (ran - wave, ran):
                    marks[done[0]] = (env.now, counters())

        for slot in range(slots):
            for sm in self.sms:
                env.process(worker(sm, slot))
        env.run()
        after = counters()
        delta = {k: after[k] - before[k] for k in after}
        cycles = env.now - start
        if ran < total:
            (t0, c0), (t1, c1) = marks[ran - wave], marks[ran]
            rest = (total - ran) / wave  # waves' worth of blocks still to come, at the last wave's pace
            # a last partial wave still takes a whole block's time: the tail
            cycles += round((t1 - t0) * math.ceil(rest - 1e-9))
            for k in delta:
                if k.startswith("busy_") or k == "smem":  # unit work: the same for every block
                    delta[k] += (c1[k] - c0[k]) * rest
            # bytes: the remaining blocks' loads and stores still go through the L2 model, without timing
            c_before = counters()
            self.replay_memory(kernel, self.sample(kernel)[ran:], wave, env.now)
            c_after = counters()
            for k in delta:
                if not (k.startswith("busy_") or k == "smem"):
                    delta[k] += c_after[k] - c_before[k]
            self.extrapolated_blocks += total - ran
        return cycles, total, delta

    def replay_memory(self, kernel, items, wave: int, now: int) -> None:
        """Feed the blocks' global loads and stores to L2 in launch order, a wave at a time with the ops of
        the blocks of a wave interleaved (as they run side by side): hits, misses and write-backs without
        time."""
        from algorithms.ir import SMEM, Load, Store

        for w in range(0, len(items), wave):
            streams = [role.program(cta) for cta in items[w:w + wave] for role in kernel.roles]
            while streams:
                alive = []
                for gen in streams:
                    for op in gen:
                        kind = type(op)
                        if kind is Load:
                            self.l2.read(op.src, now, self.copies.get(op.src.tensor, self.private_copies))
                            if op.level == SMEM:
                                self.smem_write_bytes += op.src.nbytes
                            alive.append(gen)
                            break
                        if kind is Store:
                            self.l2.write(op.dst, self.copies.get(op.dst.tensor, self.private_copies))
                            alive.append(gen)
                            break
                streams = alive
            self.hbm_write_bytes += self.l2.take_evicted()
