"""Global memory (HBM) one attention call needs per pass, and the longest sequence that fits.

Each schedule's tensors are its record's (algorithms/memory.py: Q, K, V, O and the record's `hbm_tensors`);
the backward records name theirs too (algorithms/backward.py: dO, the gradients, the LSE, D, the fp32
accumulators; standard-bwd's P, dP, dS). Every tensor a pass holds is counted at once (no reuse between them),
for equal query and key lengths when the longest sequence is searched. fwd+bwd, a training step, is the union
of the two passes' tensors (a tensor both name counts once).
"""

from __future__ import annotations

from dataclasses import replace

from flashsim.errors import FlashsimError

from . import catalog
from .backward import pass_algos
from .memory import tensor_bytes
from .problem import Problem
from .tiling import default_tiling

# Largest sequence length the search tries (beyond it the answer is reported as ">= this").
SEQLEN_SEARCH_MAX = 1 << 30


def pass_tensors(algo: str, p: Problem, pass_: str, profile) -> dict[str, int]:
    """The tensors of `algo`'s pass (a forward algorithm's name, or a backward one's for bwd), bytes by name,
    with each schedule's default tiles on `profile` (v3-fp8's scale blocks and split-KV workspaces follow
    the tiles)."""
    out: dict[str, int] = {}
    for a in pass_algos(algo, pass_):
        for name, n in tensor_bytes(a, p, default_tiling(a, p, profile)).items():
            out[name] = max(out.get(name, 0), n)
    return out


def total_bytes(algo: str, p: Problem, pass_: str, profile) -> int:
    return sum(pass_tensors(algo, p, pass_, profile).values())


def longest_seqlen(algo: str, p: Problem, pass_: str, profile, capacity: int | None = None) -> int:
    """The longest N (Nq = Nk = N) whose pass fits `capacity` bytes (default: the profile's HBM) with p's other
    sizes; 0 if none does, SEQLEN_SEARCH_MAX if the search's top still fits. The footprint grows with N, so a
    bisection finds it."""
    capacity = profile.hbm_bytes if capacity is None else capacity

    def fits(n: int) -> bool:
        return total_bytes(algo, replace(p, seqlen_q=n, seqlen_k=n), pass_, profile) <= capacity

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
        if not catalog.get(algo).takes(p):
            refused.append({"algo": algo, "reason": f"{algo} takes at most {catalog.get(algo).max_seqlen_q} "
                                                    "queries per sequence"})
            continue
        try:
            tensors = pass_tensors(algo, p, pass_, profile)
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
            "longest_seqlen": longest_seqlen(algo, p, pass_, profile),
        })
    if not rows:
        raise FlashsimError("no algorithm has this pass: " + "; ".join(r["reason"] for r in refused))
    return {"hw": profile.name, "hbm_bytes": profile.hbm_bytes, "pass": pass_, "problem": p.as_dict(),
            "algorithms": rows, "skipped": refused}
