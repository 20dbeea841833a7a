"""Whether a tiling fits an SM, and shrinking a mapper's tiles until they do (as FA3 picks smaller tiles).

Tensor-core shape rule (PTX ISA shapes; k is 16 for bf16/fp16 operands, 8 for tf32 (fp32 inputs), 32 for fp8):
- mma.sync m16n8k16 (m16n8k8 for tf32): each warp computes 16-row by 8-column pieces. Warps splitting rows
  (split-Q: V2, standard) need block_m a multiple of 16 x warps; warps splitting keys (split-K: V1) need
  block_m a multiple of 16. block_n is the n of S = Q K^T (a multiple of 8) and the k of O += P V (a
  multiple of k), per warp where warps split it: k x warps for V1, k for V2, 8 for standard (its P V runs
  over 32-key slices, so block_n is only ever an n).
- wgmma m64nNk16 (k8 tf32, k32 fp8): one warpgroup computes 64 rows, so block_m is a multiple of 64; N
  (block_n for S = Q K^T) is a multiple of 8 from 8 to 256, and block_n as the k of P V a multiple of k.
"""

from __future__ import annotations

from dataclasses import replace

from flashsim.errors import FlashsimError

from .mapping import Tiling
from .problem import Problem

# Registers a thread needs beside its accumulators (addresses, loop state, softmax row stats): a lead
# from the public kernels' ptxas reports, kept deliberately round.
REG_OVERHEAD = 40
WGMMA_ROWS = 64
WGMMA_MAX_N = 256


MMA_K = {"fp32": 8, "fp16": 16, "bf16": 16, "fp8": 32}  # k of one instruction by operand type
MMA_N = 8


def block_n_step(rec, problem: Problem, t: Tiling) -> int:
    """block_n must be a multiple of this for the record's instruction (module docstring)."""
    unit = max(MMA_N, MMA_K[problem.dtype]) if rec.block_n_is_k else MMA_N
    return unit * (t.warps if rec.mma == "mma_sync" and rec.warp_split == "n" else 1)


def block_m_step(rec, t: Tiling) -> int:
    if rec.mma == "wgmma":
        return WGMMA_ROWS
    return 16 * (t.warps if rec.warp_split == "m" else 1)


def check_shape(rec, problem: Problem, t: Tiling) -> None:
    """Refuse tiles no tensor-core instruction of the record's kind can tile (module docstring)."""
    m_step, n_step = block_m_step(rec, t), block_n_step(rec, problem, t)
    instr = "wgmma (m64nNk16)" if rec.mma == "wgmma" else "mma.sync (m16n8k16)"
    if t.block_m % m_step or t.block_n % n_step or rec.mma == "wgmma" and t.block_n > WGMMA_MAX_N:
        top = f" up to {WGMMA_MAX_N}" if rec.mma == "wgmma" else ""
        raise FlashsimError(
            f"{rec.name} tiles {t.block_m}x{t.block_n} with {t.warps} warps cannot be tiled by {instr}: "
            f"block_m must be a multiple of {m_step} and block_n a multiple of {n_step}{top}")


def problems(rec, problem: Problem, t: Tiling, profile) -> list[str]:
    """What does not fit, one sentence each (empty: the tiling fits). A profile-like object with only the
    shared-memory limits (a device's, kernels/launch.py) is checked for shared memory only."""
    if not hasattr(profile, "registers_per_sm"):
        profile = _SmemOnly(profile)
    out = []
    smem = rec.smem_bytes(problem, t)
    limit = profile.smem_per_block_max_bytes
    if smem > limit:
        out.append(f"{rec.name} tiling {t.describe()} at d={problem.headdim} needs {smem} B of shared memory "
                   f"per block; {profile.name} allows {limit} B")
    regs = rec.registers(problem, t)
    budget, launch = (rec.register_budget(t, profile) if rec.register_budget
                      else (profile.registers_per_thread_max, regs))
    if regs > budget:
        out.append(f"{rec.name} tiling {t.describe()} at d={problem.headdim} needs ~{regs} registers per "
                   f"thread; the budget is {budget}")
    if launch * t.threads > profile.registers_per_sm:
        out.append(f"{rec.name} tiling {t.describe()} needs {launch * t.threads} registers per block; "
                   f"an SM has {profile.registers_per_sm}")
    if t.threads > profile.max_threads_per_block:
        out.append(f"{t.threads} threads per block exceed the limit of {profile.max_threads_per_block}")
    return out


class _SmemOnly:
    """A device's shared-memory limits with no register or thread limits to check."""

    registers_per_thread_max = registers_per_sm = max_threads_per_block = 1 << 30

    def __init__(self, limits):
        self.name = getattr(limits, "name", "this device")
        self.smem_per_block_max_bytes = limits.smem_per_block_max_bytes


def check_fits(rec, problem: Problem, t: Tiling, profile) -> None:
    """Refuse a tiling the instruction cannot tile, that breaks the schedule's own rules, or that the
    profile's SM cannot hold (saying what needs how much)."""
    check_shape(rec, problem, t)
    if rec.check_tiling:
        rec.check_tiling(problem, t)
    found = problems(rec, problem, t, profile)
    if found:
        raise FlashsimError(found[0])


def fit(rec, problem: Problem, t: Tiling, profile) -> Tiling:
    """The mapper's tiles, made smaller until they fit, in FA3's order: block_n down in steps the
    instruction can tile, then fewer stages (down to the schedule's minimum), then block_m (each coarser
    step starts block_n again from the mapper's). Tiles that fit come back unchanged."""
    start_n = t.block_n
    min_stages = 2 if rec.mma == "wgmma" else 1
    while problems(rec, problem, t, profile):
        step, m_step = block_n_step(rec, problem, t), block_m_step(rec, t)
        if t.block_n - step >= step:
            t = replace(t, block_n=t.block_n - step)
        elif t.stages > min_stages:
            t = replace(t, stages=t.stages - 1, block_n=start_n)
        elif t.block_m - m_step >= m_step:
            t = replace(t, block_m=t.block_m - m_step, block_n=start_n)
            if rec.complete_tiling:
                t = rec.complete_tiling(t)
        else:
            break  # nothing left to shrink: the caller's check says what does not fit
    return t
