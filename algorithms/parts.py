"""Pieces the schedules share: tiles of Q/K/V/O, causal block ranges, the flash epilogue."""

from __future__ import annotations

from .ir import FP32_BYTES, RMEM, GTile, Mask, Normalize, Store, causal_offset
from .problem import Problem


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def row_tile(p: Problem, tensor: str, b: int, h: int, row0: int, block: int, *, kv: bool = False,
             elem_bytes: int | None = None, cols: int | None = None) -> GTile:
    """Rows [row0, row0 + block) of a (B, H, N, D) tensor, clipped at the sequence end. K/V tiles use the
    K/V head that query head h reads (GQA) and seqlen_k."""
    n = p.seqlen_k if kv else p.seqlen_q
    head = h // p.group if kv else h
    rows = min(block, n - row0)
    return GTile(tensor, b, head, row0, rows, 0, p.headdim if cols is None else cols,
                 p.elem_bytes if elem_bytes is None else elem_bytes)


def stat_tile(p: Problem, tensor: str, b: int, h: int, row0: int, block: int) -> GTile:
    """A per-row fp32 statistic (LSE, or V1's running m and l) for rows [row0, row0 + block)."""
    return GTile(tensor, b, h, row0, min(block, p.seqlen_q - row0), 0, 1, FP32_BYTES)


def causal_shift(p: Problem) -> int:
    """Query row r sees keys up to r + shift: Nk - Nq bottom-right aligned (FlashAttention >= 2.1), 0
    top-left aligned (PyTorch SDPA's is_causal)."""
    return causal_offset(p.causal_align, p.seqlen_q, p.seqlen_k)


def kv_block_count(p: Problem, row0: int, block_m: int, block_n: int) -> int:
    """K/V blocks a Q block starting at row0 must visit: all of them, or, causal, up to the diagonal
    (fully masked blocks are skipped)."""
    if not p.causal:
        return cdiv(p.seqlen_k, block_n)
    last_row = min(row0 + block_m, p.seqlen_q) - 1
    visible = min(p.seqlen_k, max(0, last_row + causal_shift(p) + 1))
    return cdiv(visible, block_n)


def tile_mask(p: Problem, row0: int, col0: int, rows: int, cols: int) -> Mask | None:
    """The mask a tile needs, or None when every element is visible (only diagonal and ragged-edge
    tiles pay for masking)."""
    mask = Mask(row0, col0, p.seqlen_q, p.seqlen_k, p.causal, p.causal_align)
    return mask if mask.needed(rows, cols) else None


def flash_epilogue(p: Problem, b: int, h: int, row0: int, block: int, acc: str, m: str, l: str,
                   warps: int, o_via: str = "st"):
    """O = acc / l written once in the input dtype, LSE = m + log l written for the backward pass. o_via: "st",
    "tma" or "fragments" (each thread's plain stores of its accumulator fragments)."""
    yield Normalize(acc, m, l, "lse", block, p.headdim, warps)
    fragments = o_via == "fragments"
    yield Store(acc, row_tile(p, "O", b, h, row0, block, elem_bytes=out_bytes(p)), RMEM, "st" if fragments else o_via,
                fragments=fragments)
    yield Store("lse", stat_tile(p, "LSE", b, h, row0, block), RMEM)


def q_rows(p: Problem) -> int:
    """Query rows of the whole problem (batch x heads x Nq): one LSE or running statistic each."""
    return p.batch * p.heads * p.seqlen_q


def lse_tensor(p: Problem, t=None) -> dict[str, int]:
    """The fp32 log-sum-exp per query row that flash kernels leave in global memory for the backward pass."""
    return {"LSE": q_rows(p) * FP32_BYTES}


def out_bytes(p: Problem) -> int:
    """O is written in the input dtype, except fp8 inputs, whose output is bf16 (as FA3)."""
    return 2 if p.dtype == "fp8" else p.elem_bytes


def gemm_dtype(p: Problem) -> str:
    """Operand type of the tensor-core instruction: fp32 problems run as tf32."""
    return "fp32" if p.dtype == "fp32" else p.dtype
