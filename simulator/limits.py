"""What a run may ask for before it starts: a problem that fits the GPU's memory, and work the simulator can
finish. Both are checked from the shapes alone, before a schedule (whose grid is a list of blocks) exists."""

from __future__ import annotations

from flashsim.algorithms.memory import tensor_bytes
from flashsim.algorithms.parts import cdiv
from flashsim.algorithms.problem import Problem
from flashsim.algorithms.tiling import Tiling
from flashsim.errors import FlashsimError
from flashsim.units import format_bytes

# Tile steps (one Q block meeting one K/V block) the simulator interprets in a run, at most: it interprets
# about 7,000 a second on one core (v2, d128), so the limit stands for about five minutes.
MAX_SIMULATED_STEPS = 2_000_000


def check_memory(algo: str, problem: Problem, tiling: Tiling, profile) -> None:
    """Refuse a problem whose tensors (algorithms/memory.py) do not fit in the profile's HBM."""
    tensors = tensor_bytes(algo, problem, tiling)
    need = sum(tensors.values())
    if need > profile.hbm_bytes:
        largest = ", ".join(f"{name} {format_bytes(n)}" for name, n in sorted(tensors.items(), key=lambda x: -x[1])[:3])
        raise FlashsimError(
            f"{algo} on {problem.describe()} needs {format_bytes(need)} of global memory ({largest}, ...), "
            f"more than the {format_bytes(profile.hbm_bytes)} of HBM on {profile.name}"
        )


def simulated_steps(problem: Problem, tiling: Tiling, profile, sms: int | None, kv_steps: int | None = None) -> float:
    """Tile steps a run interprets: the Q-block x K/V-block pairs (about half of them when causal) of the K/V
    head groups it simulates: all of them on the whole chip (sms None), else the sample's share of them,
    one group at least. kv_steps caps the K/V blocks per Q block (V1's short probe loops)."""
    kv_blocks = cdiv(problem.seqlen_k, tiling.block_n)
    q_blocks = problem.batch * problem.heads * cdiv(problem.seqlen_q, tiling.block_m)
    pairs = q_blocks * min(kv_blocks, kv_steps or kv_blocks)
    if problem.causal:
        pairs /= 2
    groups = problem.batch * problem.kv_heads
    if sms is None or sms >= profile.sm_count:
        return pairs
    return pairs * min(groups, cdiv(sms * groups, profile.sm_count)) / groups


def check_work(algo: str, problem: Problem, tiling: Tiling, profile, sms: int | None, limit: int | None,
               kv_steps: int | None = None) -> None:
    """Refuse a run that would interpret more than `limit` tile steps (None: no limit)."""
    steps = simulated_steps(problem, tiling, profile, sms, kv_steps)
    if limit is not None and steps > limit:
        where = "the whole chip" if sms is None or sms >= profile.sm_count else f"a sample of {sms} SMs"
        raise FlashsimError(
            f"simulating {algo} on {problem.describe()} on {where} of {profile.name} would take ~{steps:,.0f} tile "
            f"steps (Q block x K/V block), more than the limit of {limit:,}: use a smaller --seqlen, --batch or "
            "--heads, fewer --sms, or a higher limit (simulate --max-steps)"
        )
