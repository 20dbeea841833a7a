"""Tile sizes: the defaults of the public kernels and the checks that a tiling fits the SM.

Each default is a pure function of (algorithm, problem, profile); the comments name the resource that limits
it. A tiling that does not fit is refused with what needs how much and what is available.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from flashsim.errors import FlashsimError

from .problem import Problem

ALGORITHMS = ("standard", "v1", "v2", "v3", "v3-fp8")

# Registers a thread needs beside its accumulators (addresses, loop state, softmax row stats): a lead
# from the public kernels' ptxas reports, kept deliberately round.
REG_OVERHEAD = 40
# Register budgets after setmaxnreg (FA3): consumers 240 / producer 24 with 1-2 consumer warpgroups,
# 160 / 32 with 3.
V3_CONSUMER_REGS = {1: 240, 2: 240, 3: 160}
V3_PRODUCER_REGS = {1: 24, 2: 24, 3: 32}


def v3_launch_registers(consumers: int) -> int:
    """Registers per thread a V3 block launches with: setmaxnreg then moves them between warpgroups."""
    total = consumers * V3_CONSUMER_REGS.get(consumers, 0) + V3_PRODUCER_REGS.get(consumers, 0)
    return total // (consumers + 1)


@dataclass(frozen=True)
class Tiling:
    """block_m: query rows per tile (Br); block_n: key rows per tile (Bc); warps: per thread block
    (v3: 4 per warpgroup, the producer included); stages: depth of the K/V shared-memory ring."""

    block_m: int
    block_n: int
    warps: int
    stages: int = 2
    splits: int = 1  # v1: thread blocks per (batch, head), each taking every splits-th Q block (1: the paper)

    def __post_init__(self) -> None:
        for name in ("block_m", "block_n", "warps", "stages", "splits"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise FlashsimError(f"tiling {name} must be a positive integer, got {value!r}")

    @property
    def threads(self) -> int:
        return 32 * self.warps

    def as_dict(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        splits = f", {self.splits} splits" if self.splits > 1 else ""
        return f"{self.block_m}x{self.block_n}, {self.warps} warps, {self.stages} stages{splits}"


def sram_elements(profile, problem: Problem) -> int:
    """M of the V1 paper: the on-chip memory one thread block may use, in elements of the input dtype."""
    return profile.smem_per_block_max_bytes // problem.elem_bytes


def v1_blocks(m_elements: int, d: int) -> tuple[int, int]:
    """Algorithm 1 of the V1 paper: Bc = M / 4d so Q_i, K_j, V_j and O_i share M; Br = min(Bc, d).

    The paper writes ceil(M / 4d); we round down so the four tiles never exceed M."""
    bc = max(1, m_elements // (4 * d))
    return min(bc, d), bc


def fa1_block_n(d: int) -> int:
    """Keys per K/V block of the released FA1 forward kernels for long key sequences: 256 at d <= 64, else 128."""
    return 256 if d <= 64 else 128


def fa1_tiling(d: int, seqlen_k: int) -> Tiling:
    """The released FA1 forward kernels' tiles: 16 query rows per inner step, a K/V block of fa1_block_n keys
    (128 when the whole key sequence fits in 128), 4 warps splitting the keys. (Algorithm 1's own
    Bc = M / 4d, Br = min(Bc, d) is `paper_v1_tiling`.)"""
    return Tiling(16, fa1_block_n(d) if seqlen_k > 128 else 128, 4, 1)


def paper_v1_tiling(problem: Problem, profile) -> Tiling:
    """Algorithm 1's blocks from the SRAM size; a real SM also holds S and the O slice in registers, so
    halve Bc (then Br) until the register budget takes them."""
    br, bc = v1_blocks(sram_elements(profile, problem), problem.headdim)
    while registers_per_thread("v1", problem, Tiling(br, bc, 4, 1)) > profile.registers_per_thread_max:
        if bc > br or br <= 16:
            bc = max(16, bc // 2)
        else:
            br //= 2
    return Tiling(br, bc, 4, 1)


# FA1 splits a (batch, head)'s query blocks over at most this many thread blocks.
FA1_MAX_SPLITS = 30
# ... and takes the fewest splits whose wave efficiency is within this fraction of the best.
FA1_SPLIT_EFFICIENCY = 0.95


def fa1_splits(problem: Problem, t: Tiling, profile) -> int:
    """Thread blocks per (batch, head) as the released FA1 forward picks them (fa1_split_count), with the
    chip's block slots from the profile's occupancy limits."""
    slots = profile.sm_count * max(1, min(profile.occupancy_limits(
        t.threads, registers_per_thread("v1", problem, t), smem_bytes("v1", problem, t)).values()))
    return fa1_split_count(problem.batch * problem.heads, -(-problem.seqlen_q // t.block_m), slots)


def fa1_split_count(heads: int, q_blocks: int, slots: int) -> int:
    """FA1's rule: the wave efficiency of s splits is (heads s / slots) / ceil(heads s / slots) over the
    chip's block slots; take the fewest splits (at most FA1_MAX_SPLITS and the Q blocks) within 95% of the
    best. More blocks fill the SMs, but each re-reads all of K and V."""
    most = max(1, min(FA1_MAX_SPLITS, q_blocks))

    def efficiency(s: int) -> float:
        waves = heads * s / slots
        return waves / -(-heads * s // slots)

    best = max(efficiency(s) for s in range(1, most + 1))
    return next(s for s in range(1, most + 1) if efficiency(s) >= FA1_SPLIT_EFFICIENCY * best)


def _fa2_tile(d: int, profile) -> tuple[int, int, int]:
    """The public FA2 kernels' (kBlockM, kBlockN, warps) per head dim (sm80 code path, also on Hopper)."""
    if d <= 64:
        return 128, 128, 4  # d32/d64: 128x128 fits registers (S: 128 fp32 per thread) and 64 KB SMEM
    if d <= 128:
        return 128, 64, 4  # d96/d128: halve block_n so the O accumulator (d/... per thread) fits registers
    if d <= 192:
        return 128, 64, 8  # 8 warps: the 128 x 192 O accumulator needs two threads' worth of registers
    # d256: 128x64x8 needs 128 KB SMEM; FA2 takes it only on SMs with < 192 KB (A100), else 64x64x4.
    if profile.smem_per_block_max_bytes >= 128 * 1024 and profile.smem_per_sm_bytes < 192 * 1024:
        return 128, 64, 8
    return 64, 64, 4


# The public FA3 tiles, (block_m, block_n), two stages; causal and fp8 differ where FA3 differs.
_FA3_TILES = {32: (192, 192), 64: (192, 192), 96: (192, 144), 128: (128, 176), 192: (128, 128), 256: (128, 80)}
_FA3_CAUSAL = {64: (192, 128), 128: (128, 128)}
_FA3_FP8 = {32: (192, 160), 64: (192, 160), 96: (192, 128), 128: (128, 224), 192: (128, 160), 256: (128, 128)}


def default_tiling(algo: str, problem: Problem, profile) -> Tiling:
    check_algo(algo)
    d = problem.headdim
    if algo == "standard":
        return Tiling(128, 128, 4, 2)  # the GEMM kernels' output tile; S and P live in global memory
    if algo == "v1":
        t = fa1_tiling(d, problem.seqlen_k)
        return replace(t, splits=fa1_splits(problem, t, profile)) if profile is not None else t
    if algo == "v2":
        return Tiling(*_fa2_tile(d, profile), 2)
    if algo == "v3-fp8":
        bm, bn = _FA3_FP8[d]
    elif problem.causal and d in _FA3_CAUSAL:
        bm, bn = _FA3_CAUSAL[d]
    else:
        bm, bn = _FA3_TILES[d]
    return Tiling(bm, bn, 4 * (bm // 64 + 1), 2)  # one producer warpgroup + block_m/64 consumers


def check_algo(algo: str) -> None:
    if algo not in ALGORITHMS:
        raise FlashsimError(f"unknown algorithm {algo!r}; choose one of {', '.join(ALGORITHMS)}")


def smem_bytes(algo: str, problem: Problem, t: Tiling) -> int:
    """Shared memory one thread block holds (what each kernel stages there)."""
    d, e = problem.headdim, problem.elem_bytes
    if algo == "standard":
        # a ring of A and B k-slices of 32 (rows padded by 8 elements), which the epilogue then reuses to
        # stage the block_m x block_n output tile (rows padded by 8): the kernels' Q K^T layout
        return max(t.stages * (t.block_m + t.block_n) * (32 + 8) * e, t.block_m * (t.block_n + 8) * e)
    if algo == "v1":
        # Q_i, K_j, V_j, and where the split-K warps meet: their partial P V products in fp32, 32 columns of
        # O_i at a time (rows padded by 8 floats against bank conflicts), and their row max and sum.
        chunk = min(32, d) + 8
        return (t.block_m + 2 * t.block_n) * d * e + t.warps * t.block_m * (chunk + 2) * 4 + t.block_m * 8
    if algo == "v2":
        return (t.block_m + 2 * t.block_n) * d * e  # Q, K and V tiles (the FA2 kernels' formula)
    # v3 / v3-fp8: Q once, a ring of `stages` K and V tiles.
    return (t.block_m + 2 * t.block_n * t.stages) * d * e


def registers_per_thread(algo: str, problem: Problem, t: Tiling) -> int:
    """fp32 accumulators per thread plus a fixed overhead."""
    d = problem.headdim
    if algo == "standard":
        return REG_OVERHEAD + t.block_m * t.block_n // t.threads
    if algo in ("v1", "v2"):
        # Either warp split gives each thread block_m * block_n / threads of S and block_m * d / threads
        # of O (split-K reduces its partial O through shared memory in slices of that size).
        return REG_OVERHEAD + (t.block_m * t.block_n + t.block_m * d) // t.threads
    # a consumer warpgroup: S and O accumulators for 64 rows (P is converted in place of S); its addressing
    # state is lighter than a plain kernel's since the producer computes the copy coordinates.
    s = 64 * t.block_n // 128
    o = 64 * d // 128
    return REG_OVERHEAD - 8 + s + o


def check_fits(algo: str, problem: Problem, t: Tiling, profile) -> None:
    """Refuse a tiling that the profile's SM cannot hold, saying what needs how much."""
    smem = smem_bytes(algo, problem, t)
    limit = profile.smem_per_block_max_bytes
    if smem > limit:
        raise FlashsimError(
            f"{algo} tiling {t.describe()} at d={problem.headdim} needs {smem} B of shared memory per "
            f"block; {profile.name} allows {limit} B"
        )
    if algo in ("v3", "v3-fp8"):
        if t.block_m % 64:
            raise FlashsimError(f"{algo} needs block_m a multiple of 64 (one consumer warpgroup each), got {t.block_m}")
        if t.stages < 2:
            raise FlashsimError(f"{algo} needs at least 2 K/V stages (QK^T of block j overlaps PV of block j-1), "
                                f"got {t.stages}")
        consumers = t.block_m // 64
        if t.warps != 4 * (consumers + 1):
            raise FlashsimError(
                f"{algo} with block_m={t.block_m} runs {consumers} consumer warpgroups and one producer: "
                f"warps must be {4 * (consumers + 1)}, got {t.warps}"
            )
        budget = V3_CONSUMER_REGS.get(consumers, 0)
        launch = v3_launch_registers(consumers)
    else:
        budget = profile.registers_per_thread_max
        launch = registers_per_thread(algo, problem, t)
    regs = registers_per_thread(algo, problem, t)
    if regs > budget:
        raise FlashsimError(
            f"{algo} tiling {t.describe()} at d={problem.headdim} needs ~{regs} registers per thread; "
            f"the budget is {budget}"
        )
    if launch * t.threads > profile.registers_per_sm:
        raise FlashsimError(
            f"{algo} tiling {t.describe()} needs {launch * t.threads} registers per block; "
            f"an SM has {profile.registers_per_sm}"
        )
    if t.threads > profile.max_threads_per_block:
        raise FlashsimError(f"{t.threads} threads per block exceed the limit of {profile.max_threads_per_block}")


def resolve_tiling(algo: str, problem: Problem, profile, paper: bool = False, **overrides) -> Tiling:
    """The default tiling (v1 with `paper`: Algorithm 1's) with any of block_m/block_n/warps/stages/splits
    overridden, checked against the SM."""
    if paper and algo != "v1":
        raise FlashsimError(f"--paper-tiles applies to v1 only (Algorithm 1's block sizes), not {algo}")
    t = paper_v1_tiling(problem, profile) if paper else default_tiling(algo, problem, profile)
    given = {k: v for k, v in overrides.items() if v is not None}
    if given:
        t = replace(t, **given)
        if algo in ("v3", "v3-fp8") and "warps" not in given:
            t = replace(t, warps=4 * (t.block_m // 64 + 1))
    check_fits(algo, problem, t, profile)
    return t
