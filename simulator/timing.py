"""The timing interpreter: each tile op of a warp role becomes requests to the SM's and the chip's units.

It reads the same programs as the numeric interpreter and never computes a time itself beyond
work / rate of the unit serving it; waiting, overlap and contention come out of the simulation.
"""

from __future__ import annotations

from algorithms.ir import (
    RMEM,
    SMEM,
    Arrive,
    Fill,
    Gemm,
    GemmWait,
    Load,
    Normalize,
    OnlineSoftmax,
    Quantize,
    Rescale,
    RescaleMerge,
    RowSoftmax,
    Store,
    SyncThreads,
    Wait,
    WarpReduce,
)

OPERAND_BYTES = {"fp8": 1, "fp16": 2, "bf16": 2, "fp32": 4}
_ELEMENTWISE = (OnlineSoftmax, Normalize, Rescale, RescaleMerge, RowSoftmax, Quantize)


def gemm_smem_bytes(op: Gemm) -> int:
    """Operand bytes a GEMM reads from shared memory. mma.sync loads fragments per warp: with split-Q
    ('m') every warp reads all of B, with 'n' all of A; wgmma reads each operand once per warpgroup."""
    e = OPERAND_BYTES[op.dtype]
    a = op.m * op.k * e if op.a_level == SMEM else 0
    b = op.k * op.n * e if op.b_level == SMEM else 0
    if op.instr == "mma_sync" and op.warps > 1:
        if op.split == "m":
            b *= op.warps
        elif op.split == "n":
            a *= op.warps
    return a + b


class RoleTimer:
    """Runs one role of one thread block on one SM as a simpy process."""

    def __init__(self, gpu, sm, barriers, trace=None, track: str = ""):
        self.gpu, self.sm, self.barriers = gpu, sm, barriers
        self.env = gpu.env
        self.p = gpu.profile
        self.tokens: dict[str, int] = {}
        self.trace = trace
        self.track = track

    def _mark(self, name: str, start: int, end: int) -> None:
        if self.trace is not None and end > start:
            self.trace.append((self.track, name, start, end))

    def run(self, program):
        env, gpu, sm, p = self.env, self.gpu, self.sm, self.p
        for op in program:
            gpu.ops += 1
            now = env.now
            kind = type(op)
            if kind is Load:
                done = gpu.load(op.src, now, to_smem=op.level == SMEM, sm=sm)
                if op.via == "tma":
                    done += p.tma_latency_cycles
                if op.via == "ld":
                    self._mark(f"load {op.src.tensor}", now, done)
                    yield env.timeout(done - now)
                else:
                    issue = p.tma_issue_cycles if op.via == "tma" else p.cp_async_issue_cycles
                    self.barriers[op.barrier].arrive_at(done)
                    if gpu.trace is not None:
                        gpu.trace.append((f"SM{sm.index} {op.via}", f"load {op.src.tensor}", now, done))
                    yield env.timeout(issue)
            elif kind is Store:
                done = gpu.store(op.dst, now, from_smem=op.level == SMEM, sm=sm)
                if op.via == "tma":
                    yield env.timeout(p.tma_issue_cycles)
                else:
                    self._mark(f"store {op.dst.tensor}", now, done)
                    yield env.timeout(done - now)
            elif kind is Gemm:
                rate = p.tensor_flops_per_clk_per_sm(op.instr, op.dtype)
                t_tc = sm.tensor.reserve(now, op.flops / rate)
                t_smem = sm.smem.reserve(now, gemm_smem_bytes(op))
                done = max(t_tc, t_smem)
                if op.a_scale or op.b_scale:  # scaled products accumulate outside the tensor core
                    done = max(done, sm.alu.reserve(now, 2 * op.m * op.n))
                done += p.wgmma_latency_cycles if op.instr == "wgmma" else p.mma_sync_latency_cycles
                self._mark(f"gemm {op.dst}", now, done)
                if op.async_token:
                    self.tokens[op.async_token] = done
                    yield env.timeout(1)
                else:
                    yield env.timeout(done - now)
            elif kind in _ELEMENTWISE:
                done = max(sm.sfu.reserve(now, op.exps), sm.alu.reserve(now, op.alu_flops), now + 1)
                if kind is OnlineSoftmax and op.cross_warp > 1:
                    # row max and sum exchanged through shared memory, with a barrier each
                    done = max(done, sm.smem.reserve(now, 2 * op.rows * op.cross_warp * 4))
                    done += 2 * p.smem_latency_cycles
                self._mark("softmax" if kind in (OnlineSoftmax, RowSoftmax) else kind.__name__.lower(), now, done)
                yield env.timeout(done - now)
            elif kind is Wait:
                event = self.barriers[op.barrier].wait(op.target)
                if event is not None:
                    yield event
                    self._mark(f"wait {op.barrier}", now, env.now)
            elif kind is Arrive:
                self.barriers[op.barrier].arrive(op.count)
            elif kind is GemmWait:
                done = self.tokens.pop(op.token, now)
                if done > now:
                    yield env.timeout(done - now)
            elif kind is SyncThreads:
                yield env.timeout(p.smem_latency_cycles)
            elif kind is WarpReduce:
                done = max(sm.smem.reserve(now, op.smem_bytes), sm.alu.reserve(now, op.parts * op.rows * op.cols))
                done += 2 * p.smem_latency_cycles
                self._mark("reduce", now, done)
                yield env.timeout(done - now)
            elif kind is Fill:
                yield env.timeout(max(1, sm.alu.reserve(now, op.rows * op.cols) - now))
            else:
                raise TypeError(f"timing interpreter has no rule for {kind.__name__}")


__all__ = ["RMEM", "RoleTimer", "gemm_smem_bytes"]
