"""Lowering of tile ops to the SASS instructions a warp issues, by class, and the dependent chain of one row.

Counts are per warp (every thread of a warp issues the same instruction stream), derived from what an op does
per element of its tile in the register layout of the tensor-core accumulators: mma.sync m16n8 fragments
and wgmma m64nN fragments alike give each warp 16-row slabs of the tile, and each thread rows g and g + 8 of
a slab (g = lane / 4) and cols / 4 of the columns of those rows, so the four threads of a quad share a row.
So with `warps` warps on a rows x cols tile a thread holds

    e  = rows * cols / (32 * warps)  elements,
    rt = rows / (8 * warps)          rows (at least one),
    e / rt = cols / 4                elements of each of its rows,

and a row reduction is a per-thread reduction over cols / 4 elements plus two butterfly shuffle steps
across the quad (SHFL.BFLY 1 and 2, each followed by the combining instruction).

Classes are named as `experiments/sass_counts.py` names them: fp32 (FFMA, FMUL, FADD), fmnmx, fp32_compare
(FSETP), select (FSEL), int (ISETP and friends), mufu (MUFU.EX2, RCP, LG2), convert (F2FP packing two
16-bit values), shuffle, lds, ldsm, sts, hmma, hgmma, barrier. `tests/test_instructions.py` checks the
counts against the loop bodies of our kernels' SASS.
"""

from __future__ import annotations

import math
from collections import Counter

from flashsim.algorithms.ir import (
    SMEM,
    Gemm,
    LseExp,
    MergeSplits,
    Normalize,
    OnlineSoftmax,
    Quantize,
    Rescale,
    RescaleMerge,
    RowDot,
    RowMax,
    RowSoftmax,
    SoftmaxGrad,
    SyncThreads,
)

WARP = 32
REDUCE_STEPS = 5  # butterfly steps of a whole-warp reduction (xor 16, 8, 4, 2, 1)
QUAD_STEPS = 2  # butterfly steps that combine the four threads of a quad (xor 1, xor 2)
# mma.sync m16n8k16 (16-bit operands; tf32 and fp8 differ in k): FLOPs per HMMA instruction. fp32 operands
# run on the tf32 path, as the profile's tensor rates take them
HMMA_K = {"fp16": 16, "bf16": 16, "tf32": 8, "fp32": 8, "fp8": 32}
HMMA_FLOPS = {dtype: 2 * 16 * 8 * k for dtype, k in HMMA_K.items()}
# wgmma m64nNk: k per instruction by operand type (one instruction covers up to N = 256 columns)
WGMMA_K = {"fp16": 16, "bf16": 16, "tf32": 8, "fp32": 8, "fp8": 32}
WGMMA_MAX_N = 256
LDSM_X4_ELEMENTS = 4 * 8 * 8  # ldmatrix .x4: four 8x8 matrices of 16-bit elements per warp

# The pipe each class runs on (CUDA C++ Programming Guide, arithmetic instruction throughput table):
# FP32 add/multiply/FMA on the FMA pipe; compare, min/max, select and conversions to 16 bits on the ALU
# (integer) pipe; MUFU on the special-function units; shuffles through the shared-memory crossbar.
PIPES = {
    "fp32": "fma", "fmnmx": "alu", "fp32_compare": "alu", "select": "alu", "int": "alu", "convert": "alu",
    "mufu": "mufu", "shuffle": "shfl",
}


def _layout(rows: int, cols: int, warps: int) -> tuple[float, int, float]:
    """(elements per thread, rows per thread, elements per thread-row) of a rows x cols register tile."""
    e = rows * cols / (WARP * warps)
    rt = max(1, math.ceil(rows / (8 * warps)))
    return e, rt, e / rt


def _mask(c: Counter, e: float) -> None:
    """A masked tile: per element a bound compare and a causal compare (ISETP) and a select of -inf."""
    c["int"] += 2 * e
    c["select"] += e


def _exp2f(c: Counter, e: float, exps: float) -> None:
    """PyTorch's FA2 build (ir.EXP2_FORMS): the exponent's FFMA split into FMUL and FADD for each of the e
    elements, and per exponential an FSETP range test and two predicated FMULs around MUFU.EX2."""
    c["fp32"] += e + 2 * exps
    c["fp32_compare"] += exps


def exp2f_issue(op) -> float:
    """Warp instructions per warp that the exp2f form adds to an online softmax or a backward's P = exp(S -
    LSE) (0 for ours, and for other ops): the unfused FMUL per element, and the FSETP and two FMULs per
    exponential."""
    if type(op) not in (OnlineSoftmax, LseExp) or op.exp2 != "exp2f":
        return 0.0
    c: Counter = Counter()
    e, rt, _ = _layout(op.rows, op.cols, op.warps)
    _exp2f(c, e, e + (rt if type(op) is OnlineSoftmax and op.mode == "online" else 0))
    return total(c)


def _row_max(c: Counter, op) -> None:
    """The row max of an online softmax (or a RowMax taking it ahead), with the tile's mask."""
    e, rt, _ = _layout(op.rows, op.cols, op.warps)
    # one FMNMX per element (the running max is the first operand), then the quad
    c["fmnmx"] += e + QUAD_STEPS * rt
    c["shuffle"] += QUAD_STEPS * rt
    # a row that saw only masked keys keeps max -inf: FSETP + FSEL pick exponent offset 0 instead
    c["fp32_compare"] += rt
    c["select"] += rt
    c["fp32"] += rt  # the scaled max, m * scale: one FMUL per row
    if op.mask is not None:
        _mask(c, e)


def lower(op) -> Counter:
    """Instructions per warp by class for one tile op (an empty Counter for ops that issue no arithmetic)."""
    c: Counter = Counter()
    kind = type(op)
    if kind is RowMax or (kind is OnlineSoftmax and not op.max_in):
        _row_max(c, op)
    if kind is OnlineSoftmax:
        e, rt, per_row = _layout(op.rows, op.cols, op.warps)
        # exp2 with the softmax scale folded in: one FFMA (s * scale - m * scale) and one MUFU.EX2 per element
        c["fp32"] += e
        c["mufu"] += e
        c["fp32"] += e  # row sum: one FADD per element
        c["convert"] += e / 2  # P packed to 16 bits for the P V product, two elements per F2FP
        if op.mode == "online":
            c["fp32"] += rt  # correction exponent m_old * scale - m * scale: one FFMA per row
            c["mufu"] += rt  # its exp2
            c["fp32"] += rt  # l = l * corr + rowsum: one FFMA per row
            if op.acc is not None and op.corr is None:
                c["fp32"] += rt * op.acc_cols / 4  # acc *= corr: one FMUL per accumulator element
        if op.exp2 == "exp2f":
            _exp2f(c, e, e + (rt if op.mode == "online" else 0))
        if op.cross_warp > 1:  # split-K: max and sum through shared memory, each behind a barrier
            c["sts"] += 2 * rt
            c["lds"] += 2 * rt * op.cross_warp
            c["barrier"] += 2
    elif kind is Rescale:
        e, _, _ = _layout(op.rows, op.cols, op.warps)
        c["fp32"] += e  # one FMUL per accumulator element
    elif kind is Normalize:
        e, rt, _ = _layout(op.rows, op.cols, op.warps)
        c["shuffle"] += QUAD_STEPS * rt  # the row sum, kept per thread in the loop, reduced across the quad
        c["fp32"] += QUAD_STEPS * rt
        c["mufu"] += 2 * rt  # reciprocal of l and log2(l) for the logsumexp
        c["fp32"] += e + 2 * rt  # acc * (1 / l); lse = m * scale + log2(l), times ln 2
        c["convert"] += e / 2  # O packed to 16 bits
    elif kind is LseExp:
        e, rt, _ = _layout(op.rows, op.cols, op.warps)
        c["fp32"] += e  # s * scale - lse (FFMA)
        c["mufu"] += e
        c["convert"] += e / 2
        if op.exp2 == "exp2f":
            _exp2f(c, e, e)
        if op.mask is not None:
            _mask(c, e)
    elif kind is SoftmaxGrad:
        e, _, _ = _layout(op.rows, op.cols, op.warps)
        c["fp32"] += 2 * e  # (dP - D) then * P * scale folded into one FFMA and one FMUL
        c["convert"] += e / 2
    elif kind is RowDot:
        e, rt, _ = _layout(op.rows, op.cols, op.warps)
        c["fp32"] += e + QUAD_STEPS * rt  # one FFMA per element, then the quad
        c["shuffle"] += QUAD_STEPS * rt
    elif kind is RowSoftmax:
        e, rt, _ = _layout(op.rows, op.cols, op.warps)
        c["fmnmx"] += op.passes * (e + QUAD_STEPS * rt)
        c["shuffle"] += op.passes * 2 * QUAD_STEPS * rt
        c["fp32"] += op.passes * 2 * e + 2 * QUAD_STEPS * rt + e  # FFMA + FADD per exp; normalise (FMUL)
        c["mufu"] += op.passes * e + rt
        c["convert"] += e / 2
        if op.mask is not None:
            _mask(c, e)
    elif kind is RescaleMerge:
        e, rt, _ = _layout(op.rows, op.cols, op.warps)
        c["fp32"] += 3 * e + 6 * rt
        c["mufu"] += 3 * rt  # two exponentials and a reciprocal per row
    elif kind is MergeSplits:
        e, rt, _ = _layout(op.rows, op.cols, op.warps)
        c["fmnmx"] += op.splits * rt
        c["fp32"] += 2 * op.splits * rt + 2 * op.splits * e
        c["mufu"] += op.splits * rt + rt
    elif kind is Quantize and op.chunks:
        _quantize_chunks(c, op)
    elif kind is Quantize:
        e, rt, _ = _layout(op.rows, op.cols, op.warps)
        c["fmnmx"] += e + QUAD_STEPS * rt  # abs-max (|x| is an operand modifier)
        c["shuffle"] += QUAD_STEPS * rt
        had = op.cols.bit_length() - 1 if op.hadamard_seed is not None else 0
        c["fp32"] += e * (1 + had)
        c["convert"] += e / 2
    elif kind is Gemm:
        return lower_gemm(op)
    elif kind is SyncThreads:
        c["barrier"] += 1
    return c


def hadamard_lane_stages(cols: int) -> int:
    """Shuffle stages of the pre-pass's Hadamard transform: its order is the largest power of two dividing the
    head dim (block-diagonal at d 96 and 192); the first 3 of its log2 stages stay in a thread's chunk of 8."""
    order = cols & -cols
    return max(0, order.bit_length() - 1 - 3)


def _quantize_chunks(c: Counter, op) -> None:
    """v3-fp8's pre-pass per warp (kernels/fp8_prepass.cuh): each thread loads `chunks` chunks of 8 bf16
    values and unpacks them (a shift or mask each), for Q and K flips signs, runs the butterflies of column bits
    0-2 in registers (3 FADD / FSUB an element) and the higher bits through shuffles (a SHFL and an FFMA an
    element a stage) and scales by 1/sqrt(n); then the block's max |x| (an FMNMX an element, warp
    reductions of 5 shuffle steps), the scale's division and reciprocal, x times it and the e4m3 packing (an
    F2FP two elements, two merges a chunk); one load and one store a chunk, three barriers. Every warp reduces
    its own max, the first of each thread block's 8 warps the block's and the cluster's. Every chunk runs, a
    padded block's too. `op.issue` adds what this does not count."""
    e = 8 * op.chunks
    c["int"] += e + 2 * op.chunks
    if op.hadamard_seed is not None:
        stages = hadamard_lane_stages(op.cols)
        c["fp32"] += e * (1 + 3 + stages + 1)
        c["shuffle"] += e * stages
        c["global"] += 2 * op.chunks
    else:  # V: its rows go to shared memory, whence the transposition (op.issue) takes them
        c["global"] += op.chunks
        c["sts"] += op.chunks
    # every warp reduces its own max; the first warp of each 8-warp thread block then the block's and its peers'
    reductions = REDUCE_STEPS * (1 + 2 / 8)
    c["fmnmx"] += e + reductions
    c["shuffle"] += reductions
    c["fp32"] += e
    c["mufu"] += 2
    c["convert"] += e / 2
    c["barrier"] += 3
    c["other"] += op.issue


def lower_phases(op) -> list[tuple[Counter, str]]:
    """An online softmax's instructions per warp in two phases: the max of a thread's first row (its
    compares, the quad's shuffles, the scaled max), which its exponentials wait for, then the rest, which
    the compiler interleaves with those exponentials (the other rows' max, the row sums, P's conversion).
    So a warp alone on its scheduler leaves the special-function unit idle through the first phase
    (kernels/microbench/softmax_mix.cu). Each phase is (counts, name); together they are lower(op). Other
    ops are one phase."""
    whole = lower(op)
    if type(op) is not OnlineSoftmax:
        return [(whole, "all")]
    if op.max_in:  # its max taken ahead (RowMax): the exponentials start at once
        return [(whole, "exp")]
    e, rt, per_row = _layout(op.rows, op.cols, op.warps)
    first: Counter = Counter()
    first["fmnmx"] += per_row + QUAD_STEPS
    first["shuffle"] += QUAD_STEPS
    first["fp32_compare"] += 1
    first["select"] += 1
    first["fp32"] += 1  # m * scale
    if op.mask is not None:
        _mask(first, per_row)
    rest = whole.copy()
    rest.subtract(first)
    return [(first, "max"), (+rest, "exp")]


def phase_chain(name: str, op, fp32_latency: float, mufu_latency: float, shfl_latency: float) -> float:
    """The dependent chain of one row through a phase of lower_phases (the three add up to chain_cycles)."""
    if name == "all":
        return chain_cycles(op, fp32_latency, mufu_latency, shfl_latency)
    _, _, per_row = _layout(op.rows, op.cols, op.warps)
    reduce = (per_row / 2 + 1) * fp32_latency
    if name == "max":
        return reduce + QUAD_STEPS * (shfl_latency + fp32_latency) + 3 * fp32_latency
    if name == "exp":
        extra = 4 * fp32_latency if op.exp2 == "exp2f" else 0.0
        return mufu_latency + reduce + fp32_latency + extra
    return 0.0


def lower_gemm(op: Gemm) -> Counter:
    """Tensor instructions per warp of a GEMM, and the ldmatrix loads of its shared-memory operands."""
    c: Counter = Counter()
    if op.instr == "wgmma":
        # every warp of the warpgroup issues each m64nNk instruction; a role of several warpgroups splits m
        groups = max(1, op.warps // 4)
        per_group_rows = op.m / groups
        steps = math.ceil(op.k / WGMMA_K[op.dtype])
        c["hgmma"] += math.ceil(per_group_rows / 64) * math.ceil(op.n / WGMMA_MAX_N) * steps
        return c
    c["hmma"] += op.flops / HMMA_FLOPS[op.dtype] / op.warps
    # ldmatrix .x4 moves 256 16-bit elements per warp: each warp loads the operand share it multiplies
    rows, cols = _warp_grid(op)
    elem = 2 if op.dtype in ("fp16", "bf16") else (4 if op.dtype in ("tf32", "fp32") else 1)
    scale = elem / 2
    if op.a_level == SMEM:
        c["ldsm"] += op.m / rows * op.k * scale / LDSM_X4_ELEMENTS
    if op.b_level == SMEM:
        c["ldsm"] += op.n / cols * op.k * scale / LDSM_X4_ELEMENTS
    return c


def _warp_grid(op: Gemm) -> tuple[int, int]:
    """(warps along m, warps along n) of a GEMM's split; split-K counts as all warps along neither."""
    if "x" in op.split:
        r, c = map(int, op.split.split("x"))
        return r, c
    if op.split == "m":
        return op.warps, 1
    if op.split == "n":
        return 1, op.warps
    return 1, 1


def chain_cycles(op, fp32_latency: float, mufu_latency: float, shfl_latency: float) -> float:
    """Cycles of the longest dependent chain one row of `op` walks through (rows of a thread, and threads,
    are independent and overlap). A reduction over n elements per thread is a chain of n / 2 + 1
    instructions (pairs combined, then folded into the running value, as our kernels write it)."""
    kind = type(op)
    if kind not in (OnlineSoftmax, RowMax, Normalize, LseExp, SoftmaxGrad, RowDot, RowSoftmax, Rescale, RescaleMerge,
                    MergeSplits, Quantize):
        return 0.0
    if kind is Quantize and op.chunks:
        # an element's transform (unpack, sign, 3 butterflies, the shuffle stages, the scale), the thread's max
        # over its elements, the warp's and the block's reductions, the reciprocal, the scaling and packing
        stages = hadamard_lane_stages(op.cols) if op.hadamard_seed is not None else 0
        transform = (6 + stages) * fp32_latency + stages * shfl_latency if op.hadamard_seed is not None else 0.0
        reduce = (4 * op.chunks + 1) * fp32_latency + 3 * REDUCE_STEPS * (shfl_latency + fp32_latency)
        return transform + reduce + mufu_latency + 2 * fp32_latency
    _, _, per_row = _layout(op.rows, op.cols, op.warps)
    reduce = (per_row / 2 + 1) * fp32_latency
    quad = QUAD_STEPS * (shfl_latency + fp32_latency)
    # max, quad max, scaled max (FMUL) and the -inf guard (FSEL)
    row_max = reduce + quad + 3 * fp32_latency
    if kind is RowMax:
        return row_max
    if kind is OnlineSoftmax:
        # (the row max unless taken ahead) exponent (FFMA), exp2, row sum, l update; exp2f adds the unfused
        # FADD, the range test and the FMULs before and after the exp2
        extra = 4 * fp32_latency if op.exp2 == "exp2f" else 0.0
        return (0.0 if op.max_in else row_max) + mufu_latency + reduce + fp32_latency + extra
    if kind is RowSoftmax:
        return op.passes * (reduce + quad + fp32_latency + mufu_latency + reduce + quad) + fp32_latency
    if kind in (Normalize, MergeSplits):
        return quad + mufu_latency + 2 * fp32_latency
    if kind is RowDot or kind is Quantize:
        return reduce + quad
    if kind is LseExp:
        return fp32_latency + mufu_latency + fp32_latency
    if kind is RescaleMerge:
        return 2 * fp32_latency + 2 * mufu_latency + 3 * fp32_latency
    return 2 * fp32_latency  # Rescale, SoftmaxGrad: independent per element


def total(counts: Counter) -> float:
    return sum(counts.values())


def per_pipe(counts: Counter) -> dict[str, float]:
    """Instructions per warp on each execution pipe."""
    out: dict[str, float] = {}
    for cls, n in counts.items():
        pipe = PIPES.get(cls)
        if pipe:
            out[pipe] = out.get(pipe, 0.0) + n
    return out
