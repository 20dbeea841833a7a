"""Launch description of standard.cu: S = scale Q K^T, P = softmax(S), O = P V through global memory."""

from __future__ import annotations

from flashsim.algorithms.tiling import Tiling
from flashsim.errors import FlashsimError

from .launch import cdiv, smem_tile_bytes
from .registry import DTYPES, KernelFamily, Variant, register

HEADDIMS = (32, 64, 96, 128, 256)
TILING = Tiling(128, 128, 4, 2)  # algorithms.tiling.default_tiling('standard')
SLICE = 32  # k elements per pipeline stage


def pv_block_n(variant: Variant) -> int:
    return min(variant.tiling.block_n, variant.headdim)


def smem_bytes(variant: Variant, entry: str) -> int:
    """Ring of `stages` (A, B) k-slices; P V's B slice is k-major (32 rows of min(block_n, d))."""
    t = variant.tiling
    if entry == "softmax":
        return 0
    a = smem_tile_bytes(t.block_m, SLICE)
    b = smem_tile_bytes(t.block_n, SLICE) if entry == "scores" else smem_tile_bytes(SLICE, pv_block_n(variant))
    return t.stages * (a + b)


def s_row_stride(seqlen_k: int) -> int:
    """Columns of one S row: Nk rounded up to whole k-slices of P V (the softmax zeroes the padding)."""
    return cdiv(seqlen_k, SLICE) * SLICE


def run(kernels, variant: Variant, call) -> None:
    import torch

    b, h, _, nq, nk, d = call.shape
    t = variant.tiling
    ld_s = s_row_stride(nk)
    if nq * ld_s >= 2**31:
        raise FlashsimError(f"standard attention's S for one head ({nq} x {ld_s}) spans 2^31 elements or more")
    s = torch.empty((b, h, nq, ld_s), dtype=call.q.dtype, device=call.q.device)  # S, then P in place
    p = call.params()
    p.s, p.s_row_stride = s.data_ptr(), ld_s
    kernels.launch("scores", (cdiv(nk, t.block_n), cdiv(nq, t.block_m), b * h), t.threads,
                   smem_bytes(variant, "scores"), p)  # fmt: skip
    kernels.launch("softmax", (cdiv(b * h * nq, 4), 1, 1), 128, 0, p)
    kernels.launch("pv", (cdiv(d, pv_block_n(variant)), cdiv(nq, t.block_m), b * h), t.threads,
                   smem_bytes(variant, "pv"), p)  # fmt: skip


FAMILY = register(
    KernelFamily(
        algo="standard",
        source="standard.cu",
        macro="FLASHSIM_STANDARD",
        entries=("scores", "softmax", "pv"),
        variants=tuple(Variant(d, dtype, TILING) for d in HEADDIMS for dtype in DTYPES),
        smem_bytes=smem_bytes,
        default_tiling=lambda headdim, limits: TILING,
        run=run,
        summary="unfused: three kernels meeting in global memory",
    )
)
