"""The code of the mma.sync forward kernels, by stretch, for the SM's instruction cache (ir.Code).

The 128-byte lines of SASS a block's warps run before its K/V loop (for FA2's kernel the peeled first
iteration, and the masked loop where a block masks two steps), in one pass of the loop, and after it: the
distinct lines holding an instruction Nsight Compute saw executed (`python3 -m flashsim.experiments.code_lines`
over experiments/results/h200/fa2-sass/, session16/ and session18/causal-short/; session18/code-lines.md). Our
v2 is one kernel for causal and not (the mask a branch in the loop, whose lines only causal runs fetch);
SDPA's flash kernel (FA2) is one instantiation each. The stretches are `streamed`: the timing fetches them only
with the profile's fetch_model 1. A kernel not listed runs as if its code were always there.

Each stretch also carries the compiler's bookkeeping its warps issue there (BOOKKEEPING: what the lowering of
the tile ops leaves out), which only the instruction-issue model (issue_model 1) charges: the dependent-stream
default's pacing stands for it.
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
    ("fa2", 96, 128, 64, 4, False): (144, 123, 62),
    ("fa2", 96, 128, 64, 4, True): (311, 123, 62),
    ("fa2", 128, 128, 64, 4, True): (418, 149, 76),
    ("fa2", 256, 64, 64, 4, False): (172, 111, 70),
    ("fa2", 256, 64, 64, 4, True): (363, 110, 71),
}
# FA2's Is_even_MN = false instantiation, which it launches where a length is not a multiple of its tiles (or
# the batch is variable-length, or the head dim is over 128: there it is the only one): a larger binary, its
# masking steps and bound checks compiled in. Lines as LINES, of the causal and non-causal kernels at N 3000
# (experiments/results/h100/session50/fa2-odd/, session51/fa2-masking/; the d256 kernel's are LINES' own).
ODD_LINES = {
    ("fa2", 64, 128, 128, 4, False): (295, 205, 72),
    ("fa2", 64, 128, 128, 4, True): (609, 202, 71),
    ("fa2", 96, 128, 64, 4, False): (185, 123, 71),
    ("fa2", 96, 128, 64, 4, True): (477, 123, 70),
    ("fa2", 128, 128, 64, 4, False): (239, 145, 90),
    ("fa2", 128, 128, 64, 4, True): (723, 145, 90),
}
# What the odd instantiation's prologue (its peeled first step) issues beyond the even one's, per warp, less
# the mask's lowered instructions where only the odd one masks that step (the non-causal bound check):
# `python3 -m flashsim.experiments.ncu_regions --steps` of the same shapes at N 3000 against N 3072 (causal)
# or N 4096 (non-causal; experiments/results/h200/fa2-sass/, session20/fa2-d96/).
ODD_PROLOGUE_ISSUE = {
    ("fa2", 64, 128, 128, 4, False): 106.0,
    ("fa2", 64, 128, 128, 4, True): 378.0,
    ("fa2", 96, 128, 64, 4, False): 129.0,
    ("fa2", 96, 128, 64, 4, True): 164.0,
    ("fa2", 128, 128, 64, 4, False): 179.0,
    ("fa2", 128, 128, 64, 4, True): 284.0,
}
# FA2's masking steps after the peeled one (its source's n_masking_steps: ceil(block_m / block_n) on causal
# blocks, one more in the odd instantiation) run the masked loop's own code, whose register moves and spills
# (279-368 MOVs and tens of local loads and stores a step, against a few in a loop pass) the lowering of a masked
# step does not count: (kernel, head dim, block_m, block_n, warps, even) -> warp instructions per warp per such
# step, the step's executed instructions less a loop pass's and the lowered mask's (MASK_OPS_PER_ELEMENT a
# score), from the `--steps` tables above (d128 odd: the mean of steps 2 and 3, 501 and 631). FA2's d96 masking
# steps issue 35-38 fewer than that lowering counts (its masks take 2 instructions a score, not 3): nothing added.
MASKING_ISSUE = {
    ("fa2", 64, 128, 128, 4, False): 253.0,
    ("fa2", 128, 128, 64, 4, True): 332.0,
    ("fa2", 128, 128, 64, 4, False): 566.0,
    ("fa2", 256, 64, 64, 4, False): 337.0,
}
# Kernels whose source fixes how many of a causal block's last K/V steps run its masking code, mask needed or
# not: kernel -> (block_m, block_n, even) -> steps.
MASKING_STEPS = {"fa2": lambda bm, bn, even: -(-bm // bn) + (0 if even else 1)}
# (kernel, head dim, block_m, block_n, warps) -> bookkeeping warp instructions per warp: (prologue, one pass of
# the K/V loop, epilogue); `python3 -m flashsim.experiments.bookkeeping` over Nsight Compute's executed counts of
# the development shapes' non-causal runs (bf16, N 4096): experiments/results/h200/fa2-sass/ (d64, d128),
# session16/d256-ncu/ (d256), session20/fa2-d96/ (FA2's d96), session16/v2-d96/ (our d96, whose loop the
# hot-instruction cut splits: part of each pass falls in its epilogue's count, so only the block's total is right
# at N 4096). Masks are lowered (ISETP,
# select), so causal runs take the same numbers. FA2's prologue holds its peeled first K/V step.
BOOKKEEPING = {
    ("flashsim", 64, 128, 128, 4): (285.0, 210.7, 390.0),
    ("flashsim", 96, 128, 64, 4): (352.8, 116.0, 1000.5),
    ("flashsim", 128, 128, 64, 4): (393.0, 278.8, 697.0),
    ("flashsim", 256, 64, 64, 4): (532.0, 346.7, 576.0),
    ("fa2", 64, 128, 128, 4): (367.0, 134.8, 264.0),
    ("fa2", 96, 128, 64, 4): (291.0, 49.7, 258.0),
    ("fa2", 128, 128, 64, 4): (579.0, 151.6, 305.0),
    ("fa2", 256, 64, 64, 4): (587.0, 81.4, 301.0),
}
# Our v2's mask: the code a K/V step runs only where its tile needs a mask (a uniform branch skips it), a
# stretch of its own that masked steps run: (kernel, head dim, block_m, block_n, warps) -> (lines,
# instructions). From the static SASS of the shipped build (`python3 -m flashsim.experiments.code_lines
# --mask-sass experiments/results/h200/session39/v2-sass-counts.json`): of the K/V loop's skipped regions the
# one that selects -inf (FSEL), its instructions and the 128-byte lines only it occupies. Nsight Compute's
# executed lines agree (session18/causal-short/ d64: 55 lines and 440 instructions of an earlier build;
# fa2-sass/ d128: 28 and 224). Eight instructions a line, none waiting on another unit: the warps issue them
# faster than the lines come, so the first masked step on an SM waits for the mask's fetch (ir.Code
# `instructions`; session38/phase-stamps/).
MASK = {
    ("flashsim", 32, 128, 128, 4): (55, 443),
    ("flashsim", 64, 128, 128, 4): (54, 443),
    ("flashsim", 64, 64, 64, 4): (15, 123),
    ("flashsim", 96, 128, 64, 4): (28, 235),
    ("flashsim", 128, 128, 64, 4): (29, 235),
    ("flashsim", 128, 64, 64, 4): (14, 122),
    ("flashsim", 256, 128, 64, 8): (14, 122),
    ("flashsim", 256, 64, 64, 4): (15, 122),
}
STRETCHES = ("prologue", "loop", "epilogue")
# Kernels whose prologue holds the first K/V step (FA2 peels its first, masked, iteration): that step runs
# within the prologue's code, the loop's from the second on.
PEELED = {"fa2"}


def forward_code(kernel: str, d: int, bm: int, bn: int, warps: int, causal: bool, lines: bool = True,
                 bookkeeping: bool = False, even: bool = True) -> dict | None:
    """{stretch: Code} of a forward kernel and {"peeled": whether its prologue runs the first K/V step}, or
    None where neither asked part is known: its lines (`lines`, for the instruction fetch) and its bookkeeping
    instructions (`bookkeeping`, for the issue model). A causal kernel whose mask is its own code (MASK) has a
    "mask" stretch too, which its masked steps run, and its loop stretch holds the rest. `even`: whether FA2
    runs its Is_even_MN instantiation (fa2_even); the other one's lines and prologue are its own
    (ODD_LINES, ODD_PROLOGUE_ISSUE), and a causal kernel's masking steps after the first carry what they
    issue beyond a masked step's lowering, as a stretch of no lines ("masking", MASKING_ISSUE)."""
    key = (kernel, d, bm, bn, warps, causal)
    sizes = ((None if even else ODD_LINES.get(key)) or LINES.get(key)) if lines else None
    issued = BOOKKEEPING.get((kernel, d, bm, bn, warps)) if bookkeeping else None
    if sizes is None and issued is None:
        return None
    if issued and not even:
        issued = (issued[0] + ODD_PROLOGUE_ISSUE.get(key, 0.0), *issued[1:])
    name = f"{kernel} d{d} {bm}x{bn}w{warps}{' causal' if causal else ''}{'' if even else ' odd'}"
    code = {s: Code(f"{name} {s}", (sizes[i] if sizes else 0) * LINE_BYTES, streamed=True,
                    issue=issued[i] if issued else 0.0, warps=warps,
                    alone=s == "epilogue" or (s == "prologue" and kernel not in PEELED))
            for i, s in enumerate(STRETCHES)}
    masking = MASKING_ISSUE.get((kernel, d, bm, bn, warps, even)) if causal and issued else None
    if masking:
        code["masking"] = Code(f"{name} masking", 0, streamed=True, issue=masking, warps=warps)
    mask = mask_code(kernel, d, bm, bn, warps) if causal and sizes else None
    if mask is not None:  # the causal loop's lines less the mask's, which masked steps run as their own
        loop = code["loop"]
        code["loop"] = Code(loop.name, loop.nbytes - mask.nbytes, streamed=True, issue=loop.issue, warps=warps)
    code["peeled"] = kernel in PEELED
    return code


def fa2_even(p, bm: int, bn: int) -> bool:
    """Whether FA2 launches its Is_even_MN instantiation for problem p on block_m x block_n tiles: lengths that
    are multiples of the tiles, no cu_seqlens (a variable-length batch), and a head dim of at most 128 (above
    it FA2 compiles only the other one)."""
    return (not p.varlen and p.headdim <= 128 and isinstance(p.seqlen_q, int)
            and p.seqlen_q % bm == 0 and p.seqlen_k % bn == 0)


def mask_code(kernel: str, d: int, bm: int, bn: int, warps: int) -> Code | None:
    """The stretch a masked K/V step runs (MASK), or None where it is not known. Not `streamed`: the timing
    charges it under either fetch model, as its instructions issue faster than its lines come."""
    mask = MASK.get((kernel, d, bm, bn, warps))
    if mask is None:
        return None
    lines, instructions = mask
    return Code(f"{kernel} d{d} {bm}x{bn}w{warps} mask", lines * LINE_BYTES, warps=warps, instructions=instructions)


# The wgmma kernels' consumers: (pipeline form, head dim, block_m, block_n, warps) -> warp instructions each
# consumer warp issues per K/V block beyond what the lowering of its loop's tile ops counts (the compiler's
# uniform-datapath descriptor and barrier arithmetic, moves, branches; cuDNN's unfused scale and max
# subtraction, an FP32 instruction more per score), from Nsight Compute's executed counts of the development
# shapes' non-causal runs (bf16, N 4096; experiments/results/h200/session21/cudnn-sass/): the loop body
# (`experiments.wgmma_loop.loop_pass`) less the lowered ops of one K/V step of the schedule. "overlap": our v3's
# tiles at d64 and d128; "serial": cuDNN's. Only the instruction-issue model (issue_model 1) charges them.
WGMMA_UNLOWERED = {
    ("overlap", 64, 192, 128, 16): 120.0,
    ("overlap", 128, 128, 176, 12): 213.0,
    ("serial", 64, 128, 128, 12): 163.0,
    ("serial", 128, 128, 128, 12): 188.0,
}


def wgmma_loop_code(pipeline: str, d: int, bm: int, bn: int, warps: int) -> Code | None:
    """The consumer loop's stretch carrying its unlowered instructions (issue only: no lines are named), or
    None for a kernel not measured."""
    issue = WGMMA_UNLOWERED.get((pipeline, d, bm, bn, warps))
    if issue is None:
        return None
    name = f"{'cudnn' if pipeline == 'serial' else 'v3'} d{d} {bm}x{bn}w{warps} consumer loop"
    return Code(name, 0, streamed=True, issue=issue, warps=4)
