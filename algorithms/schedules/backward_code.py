"""The compiler's bookkeeping in the mma.sync backward kernels (our v2 backward and FA2's), by stretch.

What the instruction lowering of the backward's tile ops leaves out (integer address arithmetic, moves,
cp.async, the STS of P and dS, the dQ reductions' REDs, branches, uniform-datapath instructions), per warp:
before the loop over Q blocks, in one pass of it, and after it. `python3 -m flashsim.experiments.bookkeeping`
over Nsight Compute's executed counts of one launch of each main kernel (bf16, FA2 grid, non-causal N 4096;
experiments/results/h200/session24/bwd-bookkeeping/, `bash experiments/h200_bwd_bookkeeping.sh`). Only the
instruction-issue model (issue_model 1) charges them, as forward_code's BOOKKEEPING for the forward.
"""

from __future__ import annotations

from ..ir import Code

# (kernel, head dim, block_m, block_n, warps) -> (prologue, one pass of the Q loop, epilogue) warp instructions
# per warp. "fa2": SDPA's flash backward (flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel), "flashsim": ours.
BOOKKEEPING = {
    ("flashsim", 64, 128, 128, 8): (273.0, 410.3, 119.0),
    ("flashsim", 128, 64, 128, 8): (370.0, 366.6, 182.0),
    ("fa2", 64, 128, 128, 8): (528.0, 299.3, 145.0),
    ("fa2", 128, 64, 128, 8): (534.0, 229.5, 167.0),
}
STRETCHES = ("prologue", "loop", "epilogue")


def backward_code(kernel: str, d: int, bm: int, bn: int, warps: int) -> dict | None:
    """{stretch: Code} carrying the bookkeeping instructions of a measured backward kernel (issue only: no
    lines are named), or None for one not measured."""
    issued = BOOKKEEPING.get((kernel, d, bm, bn, warps))
    if issued is None:
        return None
    name = f"{kernel} bwd d{d} {bm}x{bn}w{warps}"
    return {s: Code(f"{name} {s}", 0, streamed=True, issue=issued[i], warps=warps, alone=s != "loop")
            for i, s in enumerate(STRETCHES)}
