"""Launch description of v2.cu: FlashAttention-2 forward, one thread block per (Q block, head, batch)."""

from __future__ import annotations

from types import SimpleNamespace

from flashsim.algorithms.problem import Problem
from flashsim.algorithms.tiling import Tiling, default_tiling

from .launch import cdiv, smem_tile_bytes
from .registry import DTYPES, KernelFamily, Variant, register

# The public FA2 tiles (algorithms.tiling._fa2_tile) per head dim, plus 64x64x4 at d64/d128 for
# comparing tilings. d256 has both FA2 choices: 64x64x4 (SMs with >= 192 KB, H100/H200) and 128x64x8 (A100).
TILES = {
    32: ((128, 128, 4),),
    64: ((128, 128, 4), (64, 64, 4)),
    96: ((128, 64, 4),),
    128: ((128, 64, 4), (64, 64, 4)),
    256: ((64, 64, 4), (128, 64, 8)),
}
# An H100/H200-sized SM for choosing defaults when no GPU is at hand.
_HOPPER_SMEM = SimpleNamespace(smem_per_block_max_bytes=232448, smem_per_sm_bytes=233472)


def smem_bytes(variant: Variant, entry: str) -> int:
    """v2::Config::kSmemBytes: one Q tile, one K tile, one V tile."""
    t = variant.tiling
    return smem_tile_bytes(t.block_m, variant.headdim) + 2 * smem_tile_bytes(t.block_n, variant.headdim)


def default(headdim: int, limits) -> Tiling:
    problem = Problem(batch=1, heads=1, seqlen_q=128, headdim=headdim)
    return default_tiling("v2", problem, limits or _HOPPER_SMEM)


def run(kernels, variant: Variant, call) -> None:
    b, h, _, nq, _, _ = call.shape
    t = variant.tiling
    kernels.launch("fwd", (cdiv(nq, t.block_m), h, b), t.threads, smem_bytes(variant, "fwd"), call.params())


FAMILY = register(
    KernelFamily(
        algo="v2",
        source="v2.cu",
        macro="FLASHSIM_V2",
        entries=("fwd",),
        variants=tuple(
            Variant(d, dtype, Tiling(bm, bn, w, 2))
            for d, tiles in TILES.items()
            for bm, bn, w in tiles
            for dtype in DTYPES
        ),
        smem_bytes=smem_bytes,
        default_tiling=default,
        run=run,
        summary="FlashAttention-2: split-Q warps, K/V loop inside, O written once",
    )
)
