"""The code of the mma.sync forward kernels, by stretch, for the SM's instruction cache (ir.Code).

The 128-byte lines of SASS a block's warps run before its K/V loop (for FA2's kernel the peeled first
iteration, and the masked loop where a block masks two steps), in one pass of the loop, and after it: the
distinct lines holding an instruction Nsight Compute saw executed (`python3 -m flashsim.experiments.code_lines`
over experiments/results/h200/fa2-sass/, session16/ and session18/causal-short/; session18/code-lines.md). Our
v2 is one kernel for causal and not (the mask a branch in the loop, whose lines only causal runs fetch);
SDPA's flash kernel (FA2) is one instantiation each. The stretches are `streamed`: the timing fetches them only
with the profile's fetch_model 1. A kernel not listed runs as if its code were always there.
"""

from __future__ import annotations

from ..ir import Code

LINE_BYTES = 128
# (kernel, head dim, block_m, block_n, warps, causal) -> (prologue, loop, epilogue) lines
LINES = {
    ("flashsim", 64, 128, 128, 4, False): (38, 155, 71),
    ("flashsim", 64, 128, 128, 4, True): (38, 210, 71),
    ("flashsim", 96, 128, 64, 4, False): (48, 112, 82),
    ("flashsim", 128, 128, 64, 4, False): (52, 137, 122),
    ("flashsim", 128, 128, 64, 4, True): (52, 165, 122),
    ("flashsim", 256, 64, 64, 4, False): (68, 134, 103),
    ("fa2", 64, 128, 128, 4, False): (233, 205, 57),
    ("fa2", 64, 128, 128, 4, True): (273, 203, 58),
    ("fa2", 128, 128, 64, 4, False): (191, 150, 75),
    ("fa2", 128, 128, 64, 4, True): (418, 149, 76),
    ("fa2", 256, 64, 64, 4, False): (172, 111, 70),
}
STRETCHES = ("prologue", "loop", "epilogue")
# Kernels whose prologue holds the first K/V step (FA2 peels its first, masked, iteration): that step runs
# within the prologue's code, the loop's from the second on.
PEELED = {"fa2"}


def forward_code(kernel: str, d: int, bm: int, bn: int, warps: int, causal: bool) -> dict | None:
    """{stretch: Code} of a forward kernel and {"peeled": whether its prologue runs the first K/V step}, or
    None where its code is not known."""
    lines = LINES.get((kernel, d, bm, bn, warps, causal))
    if lines is None:
        return None
    name = f"{kernel} d{d} {bm}x{bn}w{warps}{' causal' if causal else ''}"
    code = {s: Code(f"{name} {s}", n * LINE_BYTES, streamed=True) for s, n in zip(STRETCHES, lines, strict=True)}
    code["peeled"] = kernel in PEELED
    return code
