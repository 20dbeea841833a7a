"""Launch description of v1.cu: FlashAttention V1 forward (Algorithm 1 loop order, split-K warps)."""

from __future__ import annotations

from algorithms.tiling import Tiling

from .launch import cdiv, smem_tile_bytes
from .registry import DTYPES, KernelFamily, Variant, register

HEADDIMS = (32, 64, 96, 128)
BLOCK_N = 128  # Bc. Algorithm 1's M / 4d (453 keys at d64 on an H200) would give each warp a slice of S
# far past its registers under split-K; 128 keys is 32 per warp.


def tiling_for(headdim: int) -> Tiling:
    """Br = min(64, d) (the paper's min(Bc, d), capped so each warp's slice of S and of O fits), Bc = 128."""
    return Tiling(min(64, headdim), BLOCK_N, 4, 1)


def smem_bytes(variant: Variant, entry: str) -> int:
    """v1::Config::kSmemBytes: Q, K, V tiles, the partial-O buffer and the row statistics."""
    t, d = variant.tiling, variant.headdim
    chunk = min(32, d)
    reduction = t.warps * t.block_m * (chunk + 8) * 4
    stats = 2 * t.warps * t.block_m * 4 + t.block_m * 8
    return smem_tile_bytes(t.block_m, d) + 2 * smem_tile_bytes(t.block_n, d) + reduction + stats


def splits_for(call, tiling: Tiling) -> int:
    """Thread blocks per (batch, head): the `splits` option, else enough for about two per SM."""
    b, h, _, nq, _, _ = call.shape
    q_blocks = cdiv(nq, tiling.block_m)
    wanted = call.options.get("splits")
    if wanted is None:
        wanted = cdiv(2 * call.sm_count, b * h)
    return max(1, min(int(wanted), q_blocks))


def run(kernels, variant: Variant, call) -> None:
    import torch

    b, h, _, nq, _, d = call.shape
    t = variant.tiling
    p = call.params()
    ws_o = torch.empty((b, h, nq, d), dtype=torch.float32, device=call.q.device)
    ws_ml = torch.empty((b, h, nq, 2), dtype=torch.float32, device=call.q.device)
    p.ws_o, p.ws_ml = ws_o.data_ptr(), ws_ml.data_ptr()
    p.num_splits = splits_for(call, t)
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
