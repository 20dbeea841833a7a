"""Global-memory footprint of one attention call: the bytes each tensor takes in HBM, per algorithm.

Every algorithm holds its inputs Q (B, H, Nq, d), K and V (B, Hkv, Nk, d) and its output O (B, H, Nq, d);
what else lives in HBM while it runs is what tells the algorithms apart:

- standard materialises S = Q K^T and P = softmax(S), (B, H, Nq, Nk) each, in the input dtype;
- v1 keeps O in an fp32 workspace between outer steps, with the running row max m and sum l (fp32);
- v2 and v3 write one fp32 log-sum-exp per query row (LSE, for the backward pass);
- v3-fp8 takes bf16 inputs, adds e4m3 copies of Q, K, V with one fp32 scale per block, and writes LSE;
- the backward schedules add dO and the gradients dQ, dK, dV; v2-bwd and v3-bwd the forward's LSE,
  D = rowsum(dO * O) and fp32 accumulators (dQ; with GQA dK, dV), standard-bwd the forward's P with dP and dS
  (algorithms/backward.py).
"""

from __future__ import annotations

from . import catalog
from .parts import out_bytes, q_rows
from .problem import Problem
from .tiling import Tiling


def tensor_bytes(algo: str, problem: Problem, tiling: Tiling) -> dict[str, int]:
    """Bytes of every tensor `algo` keeps in global memory for `problem` (tiling: v3-fp8's scale blocks)."""
    rec = catalog.get(algo)
    p = problem
    e_in = rec.input_bytes or p.elem_bytes
    kv = p.batch * p.kv_heads * p.seqlen_k * p.headdim * e_in
    return {
        "Q": q_rows(p) * p.headdim * e_in,
        "K": kv,
        "V": kv,
        "O": q_rows(p) * p.headdim * out_bytes(p),
        **(rec.hbm_tensors(p, tiling) if rec.hbm_tensors else {}),
    }


def footprint_bytes(algo: str, problem: Problem, tiling: Tiling) -> int:
    """Total global memory `algo` needs for `problem`: every tensor of tensor_bytes at once."""
    return sum(tensor_bytes(algo, problem, tiling).values())
