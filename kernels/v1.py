"""Launch description of v1.cu: FlashAttention V1 forward (Algorithm 1 loop order, split-K warps)."""

from __future__ import annotations

import functools

from flashsim.algorithms.tiling import Tiling, fa1_block_n, fa1_split_count
from flashsim.hw_profiles.profile import occupancy_limits

from .launch import cdiv, device_limits, smem_tile_bytes
from .registry import DTYPES, KernelFamily, Variant, register

HEADDIMS = (32, 64, 96, 128)
# Per SM on sm_80 and sm_90: blocks, threads, 32-bit registers, and the shared memory the driver reserves
# per block (the shared memory itself is read from the device).
MAX_BLOCKS_PER_SM, THREADS_PER_SM, REGISTERS_PER_SM, SMEM_RESERVED_PER_BLOCK = 32, 2048, 65536, 1024


def tiling_for(headdim: int) -> Tiling:
    """The released FA1 forward kernels' tiles (algorithms.tiling.fa1_tiling for long key sequences): 16
    query rows per inner step, 4 warps splitting K/V blocks of 256 keys at d <= 64 and 128 keys above."""
    return Tiling(16, fa1_block_n(headdim), 4, 1)


def smem_bytes(variant: Variant, entry: str) -> int:
    """v1::Config::kSmemBytes: Q, K, V tiles, the partial-O buffer and the row statistics."""
    t, d = variant.tiling, variant.headdim
    chunk = min(32, d)
    reduction = t.warps * t.block_m * (chunk + 8) * 4
    stats = 2 * t.warps * t.block_m * 4 + t.block_m * 8
    return smem_tile_bytes(t.block_m, d) + 2 * smem_tile_bytes(t.block_n, d) + reduction + stats


def splits_for(call, variant: Variant, registers: int) -> int:
    """Thread blocks per (batch, head): the `splits` option, else FA1's wave-efficiency rule
    (algorithms.tiling.fa1_split_count) over the blocks this kernel fits on the device at once."""
    b, h, _, nq, _, _ = call.shape
    t = variant.tiling
    q_blocks = cdiv(nq, t.block_m)
    wanted = call.options.get("splits")
    if wanted is None:
        smem_per_sm = device_limits(call.q.device).smem_per_sm_bytes
        wanted = fa1_split_count(b * h, q_blocks, call.sm_count * blocks_per_sm(variant, registers, smem_per_sm))
    return max(1, min(int(wanted), q_blocks))


@functools.cache
def blocks_per_sm(variant: Variant, registers: int, smem_per_sm: int) -> int:
    """Occupancy of the built kernel (registers are allocated per warp in units of 256, 8 per thread)."""
    t = variant.tiling
    limits = occupancy_limits(t.threads, cdiv(registers, 8) * 8, smem_bytes(variant, "fwd"),
                              max_blocks=MAX_BLOCKS_PER_SM, max_threads=THREADS_PER_SM,
                              registers=REGISTERS_PER_SM, smem=smem_per_sm, smem_reserved=SMEM_RESERVED_PER_BLOCK)
    return max(1, min(limits.values()))


def run(kernels, variant: Variant, call) -> None:
    import torch

    b, h, _, nq, _, d = call.shape
    t = variant.tiling
    p = call.params()
    ws_o = torch.empty((b, h, nq, d), dtype=torch.float32, device=call.q.device)
    ws_ml = torch.empty((b, h, nq, 2), dtype=torch.float32, device=call.q.device)
    p.ws_o, p.ws_ml = ws_o.data_ptr(), ws_ml.data_ptr()
    p.num_splits = splits_for(call, variant, kernels.registers("fwd"))
    kernels.launch("fwd", (p.num_splits, h, b), t.threads, smem_bytes(variant, "fwd"), p)


FAMILY = register(
    KernelFamily(
        algo="v1",
        source="v1.cu",
        macro="FLASHSIM_V1",
        entries=("fwd",),
        variants=tuple(Variant(d, dtype, tiling_for(d)) for d in HEADDIMS for dtype in DTYPES),
        smem_bytes=smem_bytes,
        default_tiling=lambda headdim, limits: tiling_for(headdim),
        run=run,
        summary="FlashAttention V1: K/V loop outside, Q loop inside, O/l/m round trips, split-K warps",
    )
)
