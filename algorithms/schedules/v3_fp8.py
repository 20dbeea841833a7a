"""FlashAttention-3 in FP8 (e4m3): a quantisation pre-pass, then the V3 schedule on fp8 operands.

Kernel 1, the pre-pass (kernels/fp8_prepass.cuh): read each Q block of block_m rows and K or V block of
block_n rows once in bf16, optional incoherent processing of Q and K (random +-1 diagonal times a Hadamard
transform along d, the same for both, so Q K^T is unchanged), one scale per block delta = max|x| / 448,
x / delta rounded to e4m3, written with the scale. V leaves transposed for the fp8 wgmma, padded to whole key
blocks (its last block writes block_n rows, zeros past N). The CUDA kernel spreads each block over a cluster
of CLUSTER thread blocks of 8 warps, which reduce the block's max through distributed shared memory; here the
cluster is one CTA of their warps, registers and shared memory (the two are resident together). Its code is
bound by instruction issue (Nsight Compute, experiments/results/h200/session35/prepass-ncu/), so each block's
Quantize is lowered in the kernel's layout of chunks and issued as instructions (simulator/instructions.py).
Kernel 2: V3 with the block scales applied to each GEMM's product (S scaled by delta_Q delta_K; P V by
delta_V), P rounded to e4m3, fp32 accumulation, O written in bf16.
"""

from __future__ import annotations

from dataclasses import replace

from .. import closed_form as cf
from ..ir import FP32_BYTES as F32
from ..ir import RMEM, GTile, Kernel, Load, Quantize, Role, Schedule, Store
from ..mapping import Tiling
from ..parts import cdiv, lse_tensor, q_rows
from ..problem import Problem
from . import v3
from .v3 import build as build_v3

HADAMARD_SEED = 0
IN_BYTES = 2  # the unquantised inputs arrive in bf16
CLUSTER = 2  # thread blocks per quantisation block (kernels/fp8_prepass.py CLUSTER, the shipped launch)
BLOCK_WARPS = 8  # fp8_prepass::THREADS / 32
BLOCK_SMEM = 34816  # each thread block's static shared memory (V's rows, the partial maxima)
CHUNKS = (1, 2, 4, 8)  # the entry points' chunks of 8 elements per thread
# registers per thread of the entry points fp8_prepass_Bf16_k2_c{chunks} (cuobjdump --dump-resource-usage of
# the sm_90a cubin)
REGISTERS = {1: 39, 2: 43, 4: 64, 8: 114}
# (head dim, chunks, "qk" or "v") -> warp instructions each warp issues beyond the lowering of its Quantize:
# address arithmetic of every chunk, moves, branches, the cluster's exchange and, for V, the transposition
# through shared memory. From Nsight Compute's executed instructions of the pre-pass on two development shapes
# per head dim (run 189): `python3 -m flashsim.experiments.prepass_bookkeeping`.
BOOKKEEPING = {
    (64, 4, "qk"): 657.7, (64, 4, "v"): 359.2,
    (128, 8, "qk"): 903.0, (128, 8, "v"): 773.5,
}


def chunks_per_thread(block_m: int, block_n: int, d: int) -> int:
    """The entry point's chunks per thread (kernels/fp8_prepass.py's rule): the least that hold one thread
    block's rows, the larger block's 16-row groups dealt over the cluster."""
    rows = 16 * cdiv(max(block_m, block_n) // 16, CLUSTER)
    need = cdiv(rows * d, 8 * 32 * BLOCK_WARPS)
    return next((c for c in CHUNKS if c >= need), CHUNKS[-1])


def prepass_kernel_shape(p: Problem, t: Tiling) -> tuple[int, int, int, int]:
    """(warps, registers per thread, shared memory, chunks per thread) of a pre-pass CTA here: one cluster."""
    chunks = chunks_per_thread(t.block_m, t.block_n, p.headdim)
    return CLUSTER * BLOCK_WARPS, REGISTERS[chunks], CLUSTER * BLOCK_SMEM, chunks


def build(p: Problem, t: Tiling, hadamard: bool = True, **ablation) -> Schedule:
    """ablation: V3's switches (warp_specialization, pingpong, intra_overlap) and its set-up option for the
    attention kernel."""
    d = p.headdim
    warps, regs, smem, chunks = prepass_kernel_shape(p, t)

    def quantize(cta):
        name, b, h, blk, block = cta
        rows_total = p.seqlen_q if name == "Q" else p.seqlen_k
        row0 = blk * block
        rows = min(block, rows_total - row0)
        yield Load(GTile(name, b, h, row0, rows, 0, d, IN_BYTES), "x", RMEM)
        seed = HADAMARD_SEED if hadamard and name in "QK" else None
        issue = BOOKKEEPING.get((d, chunks, "v" if name == "V" else "qk"), 0.0)
        yield Quantize("x", "xq", "delta", rows, d, warps, seed, chunks, issue)
        stored = block if name == "V" else rows  # V^T is padded to whole key blocks
        yield Store("xq", GTile(name + "q", b, h, row0, stored, 0, d, 1), RMEM)
        yield Store("delta", GTile(name + "scale", b, h, blk, 1, 0, 1, 4), RMEM)

    ctas = [("Q", b, h, i, t.block_m) for b in range(p.batch) for h in range(p.heads)
            for i in range(cdiv(p.seqlen_q, t.block_m))]
    ctas += [(x, b, h, j, t.block_n) for x in "KV" for b in range(p.batch) for h in range(p.kv_heads)
             for j in range(cdiv(p.seqlen_k, t.block_n))]
    quant = Kernel("fp8_prepass", ctas, (Role("warps", warps, quantize),), smem, regs, classes=lambda c: (c[0], c[3]),
                   kv_head_of=lambda c: (c[1], c[2] if c[0] in "KV" else c[2] // p.group))
    attn = build_v3(p, t, fp8=True, name="v3_fp8", **ablation)
    return Schedule("v3-fp8", p, t, (quant, *attn.kernels), shapes=attn.shapes)  # split-KV's workspace


def _quantize(x: cf.Dims, hadamard: bool) -> cf.KernelNest:
    """v3-fp8's pre-pass: every Q block (block_m rows) and K/V block (block_n rows) to e4m3 and a scale;
    V's blocks are written whole (V^T padded to whole key blocks)."""
    B, Nq, Nk, d = x.B, x.Nq, x.Nk, x.d
    had = x.d.bit_length() - 1 if hadamard else 0  # log2(d) butterfly stages
    parts, ctas = [], 0
    for name, heads, n_rows, block in (("Q", x.H, Nq, x.bm), ("K", x.Hkv, Nk, x.bn), ("V", x.Hkv, Nk, x.bn)):
        blocks = cdiv(n_rows, block)
        h = had if name in "QK" else 0
        m = B * heads * blocks
        r = min(block, n_rows)
        ctas += m
        text = f"quantise {name}" + (" diag(+-1) H / sqrt(d)" if h else "") + " to e4m3"
        out_rows, out_total = (block, m * block) if name == "V" else (r, B * heads * n_rows)
        parts.append(cf.bh_loop(x, [cf.Loop(f"blk in 0..{blocks}  {name} block", blocks, m, [
            cf.load(f"load {name} (bf16)", name, r * d * IN_BYTES, B * heads * n_rows * d * IN_BYTES, m, smem=False),
            cf.Step(text, "rf", m, [cf.Effect("exps", "", 0, 0),
                                 cf.Effect("alu_flops", "", (3 + h) * r * d, (3 + h) * B * heads * n_rows * d)]),
            cf.store(f"store {name}q (e4m3)" if name != "V" else "store V^T (e4m3, padded)", name + "q",
                     out_rows * d, out_total * d, m),
            cf.store(f"store {name}scale", name + "scale", F32, m * F32, m),
        ], grid=True)], heads))
    return cf.KernelNest("fp8_prepass", ctas, 128, parts)


def loop_nest(x: cf.Dims, hadamard: bool = True) -> list[cf.KernelNest]:
    return [_quantize(x, hadamard), v3.nest(x, fp8=True)]


def hbm_tensors(p: Problem, t: Tiling) -> dict[str, int]:
    """The e4m3 copies of Q, K and V^T (padded to whole key blocks) with one fp32 scale per block, and the
    LSE (the bf16 inputs are Q, K, V)."""
    q_blocks = p.batch * p.heads * cdiv(p.seqlen_q, t.block_m)
    kv_blocks = p.batch * p.kv_heads * cdiv(p.seqlen_k, t.block_n)
    kv = p.batch * p.kv_heads * p.seqlen_k * p.headdim
    vt = kv_blocks * t.block_n * p.headdim
    return {"Qq": q_rows(p) * p.headdim, "Kq": kv, "Vq": vt, "scales": (q_blocks + 2 * kv_blocks) * F32,
            **lse_tensor(p)}


ALGORITHM = replace(
    v3.ALGORITHM,
    name="v3-fp8",
    summary="FlashAttention-3 in FP8: a pass quantises Q, K, V to e4m3 with block scales, then V3 on them",
    build=build,
    mapper=lambda p, profile: v3.mapper(p, profile, fp8=True),
    check_tiling=lambda p, t: v3.check_tiling(p, t, "v3-fp8"),
    loop_nest=loop_nest,
    why="A fused pre-pass kernel reads Q, K, V once in bf16 and writes e4m3 Q, K and V^T with one scale per "
        "block (about 3 bytes per element, but bound by its instruction issue: the Hadamard transform's "
        "shuffles and every chunk's address arithmetic); then V3 reads the 1-byte K and V once per q-block "
        "(Tr = {tr} passes).",
    features=("tma", "wgmma", "fp8"),
    dtypes=("fp8",),
    options=("hadamard", *v3.ABLATION_SWITCHES, "setup"),
    hbm_tensors=hbm_tensors,
    input_bytes=IN_BYTES,
)
