"""The chip: SMs with their units, the shared L2 and HBM, and the thread-block scheduler.

Sampling: a run may simulate `sms` of the chip's SMs, with the thread blocks the hardware would send to
them and the chip-wide resources (HBM and L2 bandwidth, L2 capacity) scaled to their share. With
sms = sm_count it is the plain, whole-chip run.
"""

from __future__ import annotations

from collections import defaultdict, deque

import simpy

from hw_profiles.errors import FlashsimError

from .l2 import L2Cache
from .resources import Barrier, QueueUnit, Server, SharedUnit
from .timing import RoleTimer


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
    limits = {
        "blocks": profile.max_blocks_per_sm,
        "threads": profile.max_threads_per_sm // kernel.threads,
        "registers": profile.registers_per_sm // max(1, kernel.regs_per_thread * kernel.threads),
    }
    if kernel.smem_bytes:
        limits["shared memory"] = profile.smem_per_sm_bytes // (
            kernel.smem_bytes + profile.smem_reserved_per_block_bytes
        )
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
        self.env = simpy.Environment()
        self.hbm = Server("hbm", profile.hbm_bytes_per_clk * self.share)
        self.clock_hz = profile.sm_clock_hz
        self.l2_port = Server("l2", profile.l2_bandwidth_bytes_per_clk * self.share)
        self.l2 = L2Cache(profile.l2_bytes, self.share)
        self.sms = [Sm(i, profile) for i in range(self.n_sms)]
        self.trace = trace
        self.hbm_write_bytes = 0
        self.smem_write_bytes = 0
        self.ops = 0  # tile ops interpreted

    # -- memory --------------------------------------------------------------------------------------
    def load(self, tile, now: int, to_smem: bool, sm: Sm) -> int:
        """Read a tile through L2 (and HBM on a miss); returns the cycle its bytes have landed."""
        p = self.profile
        pending, miss, missed = self.l2.read(tile, now, 1.0 / self.share)
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
        self.l2.write(tile, 1.0 / self.share)
        self._charge_evictions(now)
        done = self.l2_port.reserve(now, tile.nbytes)
        if from_smem:
            sm.smem.release(sm.smem.submit(now, tile.nbytes))
        return done

    def _charge_evictions(self, now: int) -> None:
        evicted = self.l2.take_evicted()
        if evicted:
            self.hbm.reserve(now, evicted)
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

    def set_clock(self, clock_hz: float) -> None:
        """Power management sets the SM clock by load; bandwidths given per second become per cycle."""
        self.clock_hz = clock_hz
        self.hbm.rate = self.profile.hbm_bandwidth_bytes_per_s / clock_hz * self.share

    def run_kernel(self, kernel) -> tuple[int, int]:
        """Run one launch to completion; returns (cycles it took, thread blocks simulated)."""
        env, p = self.env, self.profile
        self.set_clock(p.clock_hz(self.tensor_instr(kernel)))
        start = env.now
        slots = blocks_per_sm(kernel, p)
        queue = deque(self.sample(kernel))
        simulated = len(queue)

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

        for slot in range(slots):
            for sm in self.sms:
                env.process(worker(sm, slot))
        env.run()
        return env.now - start, simulated
