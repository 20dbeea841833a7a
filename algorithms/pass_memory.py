"""Global memory (HBM) one attention call needs, per pass and algorithm, and the longest sequence that fits.

Every tensor a pass holds is counted at once (no reuse between them), for equal query and key lengths when
the longest sequence is searched:

forward   Q, K, V (inputs) and O (output); standard adds S and P (B, H, Nq, Nk) in the input dtype; v1 an fp32
          O workspace with its running max m and sum l; v2 / v3 the fp32 logsumexp LSE for the backward;
          v3-fp8 e4m3 copies of Q, K, V with an fp32 scale per block (its O is bf16).
backward  what the forward saved (Q, K, V, O, LSE; standard: P), the output's gradient dO, the gradients dQ,
          dK, dV, and the workspace: D = rowsum(dO * O) (fp32 per row) and the fp32 dQ accumulator the key
          blocks add into (v2-bwd, v3-bwd; with GQA fp32 dK, dV accumulators too); standard-bwd materialises
          dP and dS (B, H, Nq, Nk).
fwd+bwd   a training step: the union of the two (a tensor both name counts once).
"""

from __future__ import annotations

from dataclasses import replace

from flashsim.errors import FlashsimError

from .backward import FORWARD_OF, pass_algos
from .ir import FP32_BYTES
from .parts import out_bytes
from .problem import Problem

# Largest sequence length the search tries (beyond it the answer is reported as ">= this").
SEQLEN_SEARCH_MAX = 1 << 30


def _sizes(p: Problem) -> dict[str, int]:
    e = p.elem_bytes
    q = p.batch * p.heads * p.seqlen_q * p.headdim
    kv = p.batch * p.kv_heads * p.seqlen_k * p.headdim
    rows = p.batch * p.heads * p.seqlen_q
    return {"q": q, "kv": kv, "rows": rows, "scores": p.batch * p.heads * p.seqlen_q * p.seqlen_k, "e": e}


def _flash_forward(p: Problem, s: dict) -> dict[str, int]:
    return {"LSE": s["rows"] * FP32_BYTES}


def _standard_forward(p: Problem, s: dict) -> dict[str, int]:
    return {"S": s["scores"] * s["e"], "P": s["scores"] * s["e"]}


def _v1_forward(p: Problem, s: dict) -> dict[str, int]:
    return {"O_fp32": s["q"] * FP32_BYTES, "m": s["rows"] * FP32_BYTES, "l": s["rows"] * FP32_BYTES}


def _fp8_forward(p: Problem, s: dict, block: int = 128) -> dict[str, int]:
    """e4m3 copies of Q, K, V and an fp32 scale per block of `block` rows, beside the LSE."""
    blocks = -(-p.seqlen_q // block) * p.batch * p.heads + 2 * -(-p.seqlen_k // block) * p.batch * p.kv_heads
    return {**_flash_forward(p, s), "Qq": s["q"], "Kq": s["kv"], "Vq": s["kv"], "scales": blocks * FP32_BYTES}


def _flash_backward(p: Problem, s: dict) -> dict[str, int]:
    """The saved LSE, D = rowsum(dO * O) and the fp32 accumulators the key blocks add into."""
    out = {"O": s["q"] * s["e"], "LSE": s["rows"] * FP32_BYTES, "D": s["rows"] * FP32_BYTES,
           "dQaccum": s["q"] * FP32_BYTES}
    if p.group > 1:
        out.update(dKaccum=s["kv"] * FP32_BYTES, dVaccum=s["kv"] * FP32_BYTES)
    return out


def _standard_backward(p: Problem, s: dict) -> dict[str, int]:
    """The saved P (not O), and dP and dS materialised."""
    return {"P": s["scores"] * s["e"], "dP": s["scores"] * s["e"], "dS": s["scores"] * s["e"]}


# What each schedule keeps beyond its inputs and outputs (default: a flash kernel's), and the element size of
# inputs a schedule quantises itself.
FORWARD_EXTRAS = {"standard": _standard_forward, "v1": _v1_forward, "v3-fp8": _fp8_forward}
BACKWARD_EXTRAS = {"standard-bwd": _standard_backward}
INPUT_BYTES = {"v3-fp8": 2}


def forward_tensors(algo: str, p: Problem) -> dict[str, int]:
    """Bytes of each tensor a forward schedule keeps in HBM."""
    s = _sizes(p)
    e = INPUT_BYTES.get(algo, s["e"])
    out = {"Q": s["q"] * e, "K": s["kv"] * e, "V": s["kv"] * e, "O": s["q"] * out_bytes(p)}
    return {**out, **FORWARD_EXTRAS.get(algo, _flash_forward)(p, s)}


def backward_tensors(algo: str, p: Problem) -> dict[str, int]:
    """Bytes of each tensor a backward schedule (standard-bwd, v2-bwd, v3-bwd) keeps in HBM."""
    s = _sizes(p)
    e = s["e"]
    out = {"Q": s["q"] * e, "K": s["kv"] * e, "V": s["kv"] * e, "dO": s["q"] * e,
           "dQ": s["q"] * e, "dK": s["kv"] * e, "dV": s["kv"] * e}
    return {**out, **BACKWARD_EXTRAS.get(algo, _flash_backward)(p, s)}


def pass_tensors(algo: str, p: Problem, pass_: str) -> dict[str, int]:
    """The tensors of `algo`'s pass (a forward algorithm's name, or a backward one's for bwd)."""
    algos = pass_algos(algo, pass_)
    out: dict[str, int] = {}
    for a in algos:
        tensors = backward_tensors(a, p) if a in FORWARD_OF else forward_tensors(a, p)
        for name, n in tensors.items():
            out[name] = max(out.get(name, 0), n)
    return out


def total_bytes(algo: str, p: Problem, pass_: str) -> int:
    return sum(pass_tensors(algo, p, pass_).values())


def longest_seqlen(algo: str, p: Problem, pass_: str, capacity: int) -> int:
    """The longest N (Nq = Nk = N) whose pass fits `capacity` bytes with p's other sizes; 0 if none does,
    SEQLEN_SEARCH_MAX if the search's top still fits. The footprint grows with N, so a bisection finds it."""

    def fits(n: int) -> bool:
        return total_bytes(algo, replace(p, seqlen_q=n, seqlen_k=n), pass_) <= capacity

    if not fits(1):
        return 0
    lo, hi = 1, 2
    while hi < SEQLEN_SEARCH_MAX and fits(hi):
        lo, hi = hi, min(2 * hi, SEQLEN_SEARCH_MAX)
    if fits(hi):
        return hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def memory_report(algos, p: Problem, pass_: str, profile) -> dict:
    """Per algorithm: its tensors, the total, the share of the profile's HBM, whether it fits, and the
    longest sequence that would."""
    rows = []
    refused = []
    for algo in algos:
        try:
            tensors = pass_tensors(algo, p, pass_)
        except FlashsimError as exc:
            refused.append({"algo": algo, "reason": str(exc)})
            continue
        total = sum(tensors.values())
        rows.append({
            "algo": algo,
            "tensors": tensors,
            "total_bytes": total,
            "hbm_fraction": total / profile.hbm_bytes,
            "fits": total <= profile.hbm_bytes,
            "longest_seqlen": longest_seqlen(algo, p, pass_, profile.hbm_bytes),
        })
    if not rows:
        raise FlashsimError("no algorithm has this pass: " + "; ".join(r["reason"] for r in refused))
    return {"hw": profile.name, "hbm_bytes": profile.hbm_bytes, "pass": pass_, "problem": p.as_dict(),
            "algorithms": rows, "skipped": refused}
