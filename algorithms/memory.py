"""Global-memory footprint of one forward attention call: the bytes each tensor takes in HBM, per algorithm.

Every algorithm holds its inputs Q (B, H, Nq, d), K and V (B, Hkv, Nk, d) and its output O (B, H, Nq, d);
what else lives in HBM while it runs is what tells the algorithms apart:

- standard materialises S = Q K^T and P = softmax(S), (B, H, Nq, Nk) each, in the input dtype;
- v1 keeps O in an fp32 workspace between outer steps, with the running row max m and sum l (fp32);
- v2 and v3 write one fp32 log-sum-exp per query row (LSE, for the backward pass);
- v3-fp8 takes bf16 inputs, adds e4m3 copies of Q, K, V with one fp32 scale per block, and writes LSE.
"""

from __future__ import annotations

from collections.abc import Callable

from flashsim.errors import FlashsimError

from .ir import FP32_BYTES
from .parts import cdiv, out_bytes
from .problem import Problem
from .schedules.v3_fp8 import IN_BYTES as FP8_INPUT_BYTES
from .tiling import ALGORITHMS, Tiling


def _rows_q(p: Problem) -> int:
    return p.batch * p.heads * p.seqlen_q


def _rows_kv(p: Problem) -> int:
    return p.batch * p.kv_heads * p.seqlen_k


def _standard(p: Problem, t: Tiling) -> dict[str, int]:
    scores = _rows_q(p) * p.seqlen_k * p.elem_bytes
    return {"S": scores, "P": scores}


def _v1(p: Problem, t: Tiling) -> dict[str, int]:
    rows = _rows_q(p)
    return {"Oacc": rows * p.headdim * FP32_BYTES, "M": rows * FP32_BYTES, "L": rows * FP32_BYTES}


def _lse(p: Problem, t: Tiling) -> dict[str, int]:
    return {"LSE": _rows_q(p) * FP32_BYTES}


def _v3_fp8(p: Problem, t: Tiling) -> dict[str, int]:
    q_blocks = p.batch * p.heads * cdiv(p.seqlen_q, t.block_m)
    kv_blocks = p.batch * p.kv_heads * cdiv(p.seqlen_k, t.block_n)
    return {
        "Qq": _rows_q(p) * p.headdim,
        "Kq": _rows_kv(p) * p.headdim,
        "Vq": _rows_kv(p) * p.headdim,
        "scales": (q_blocks + 2 * kv_blocks) * FP32_BYTES,
        **_lse(p, t),
    }


# The tensors beyond Q, K, V and O that each algorithm keeps in global memory.
_EXTRA: dict[str, Callable[[Problem, Tiling], dict[str, int]]] = {
    "standard": _standard,
    "v1": _v1,
    "v2": _lse,
    "v3": _lse,
    "v3-fp8": _v3_fp8,
}


def tensor_bytes(algo: str, problem: Problem, tiling: Tiling) -> dict[str, int]:
    """Bytes of every tensor `algo` keeps in global memory for `problem` (tiling: v3-fp8's scale blocks)."""
    if algo not in _EXTRA:
        raise FlashsimError(f"unknown algorithm {algo!r}; choose one of {', '.join(ALGORITHMS)}")
    p = problem
    e_in = FP8_INPUT_BYTES if p.dtype == "fp8" else p.elem_bytes
    return {
        "Q": _rows_q(p) * p.headdim * e_in,
        "K": _rows_kv(p) * p.headdim * e_in,
        "V": _rows_kv(p) * p.headdim * e_in,
        "O": _rows_q(p) * p.headdim * out_bytes(p),
        **_EXTRA[algo](p, tiling),
    }


def footprint_bytes(algo: str, problem: Problem, tiling: Tiling) -> int:
    """Total global memory `algo` needs for `problem`: every tensor of tensor_bytes at once."""
    return sum(tensor_bytes(algo, problem, tiling).values())
