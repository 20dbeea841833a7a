"""FlashAttention-3's backward on Hopper (Shah et al. 2024, section 3 and the public hopper/ kernels):

    bwd_dot_do_o   per Q block: D = rowsum(dO * O), and the fp32 dQ accumulator zeroed
    flash_bwd_v3   one thread block per K/V block j, warp-specialised:
                     producer:  TMA K_j and V_j once (one slice per consumer), then for each Q block i that
                                sees block j, Q_i, dO_i, LSE_i and D_i into ring slot (n % stages) once every
                                consumer has released the slot
                     consumer c (a warpgroup) owns keys [c Bc/C, (c+1) Bc/C) of the block, with its dK and dV
                                accumulators in registers; per Q block, with wgmma:
                                S = Q_i K_c^T; P = exp(scale S - LSE_i); dP = dO_i V_c^T; dS = scale P (dP - D_i)
                                dV_c += P^T dO_i; dK_c += dS^T Q_i; dS_c to shared memory; the warpgroups
                                take turns to compute dQ_i = sum_c dS_c K_c and add it to the fp32 dQ with a
                                TMA reduce-add (atomics in the L2), one per (K/V block, Q block)
    bwd_convert_dq dQ = dQaccum in the input dtype.

FA3 splits the dQ GEMM over its warpgroups; here one warpgroup per step issues it (they take turns), with the
same tensor-core work, shared-memory traffic and one reduce-add per step. GQA: dK and dV added into fp32
accumulators per K/V head (zeroed first, converted last), as FA3 does.
"""

from __future__ import annotations

from flashsim.errors import FlashsimError

from .. import backward as bw
from .. import closed_form as cf
from ..counting import OPERAND_BYTES
from ..footprint import REG_OVERHEAD
from ..ir import FP32_BYTES as F32
from ..ir import (
    RMEM,
    SMEM,
    Arrive,
    AtomicAdd,
    Fill,
    Gemm,
    Kernel,
    Load,
    LseExp,
    Role,
    Schedule,
    SoftmaxGrad,
    Store,
    StoreShared,
    Wait,
)
from ..mapping import Tiling
from ..parts import cdiv, gemm_dtype, row_tile, stat_tile, tile_mask
from ..problem import Problem
from ..record import Algorithm
from .v3 import V3_CONSUMER_REGS, v3_launch_registers

# FA3's sm90 backward tiles (hopper/flash_bwd_launch_template.h, run_mha_bwd_hdim*): head dim ->
# (kBlockM, kBlockN, MMA warpgroups, stages of the Q/dO ring). d128 non-causal runs kBlockM = 80 there; a
# wgmma accumulator here has 64-row multiples, so the model takes FA3's causal tile (64) for both.
# d192 / d256 run a single dO stage (Stages_dO = 1) to fit shared memory.
_FA3_BWD = {32: (128, 128, 2, 2), 64: (128, 128, 2, 2), 96: (64, 128, 2, 2), 128: (64, 128, 2, 2),
            192: (64, 96, 3, 1), 256: (64, 80, 2, 1)}
RING_TILES = 4  # Q_i, dO_i, LSE_i and D_i arrive on one slot's barrier


def consumers(t: Tiling) -> int:
    return t.warps // 4 - 1


def share(t: Tiling) -> int:
    """Keys of a block each consumer warpgroup owns: Bc / C rounded up to the MMA's 8 (the last share may
    be shorter, or empty when shrunk tiles leave fewer keys than warpgroups)."""
    return 8 * -(-t.block_n // (8 * max(1, consumers(t))))


def share_keys(t: Tiling, c: int) -> int:
    return max(0, min(share(t), t.block_n - c * share(t)))


def mapper(p: Problem, profile) -> Tiling:
    bm, bn, c, stages = _FA3_BWD[p.headdim]
    return Tiling(bm, bn, 4 * (c + 1), stages)


def dS_buffers(t: Tiling) -> int:
    """dS tiles in shared memory: double-buffered, single with a single-stage ring (FA3's d192 / d256)."""
    return min(2, t.stages)


def smem_bytes(p: Problem, t: Tiling) -> int:
    """K and V tiles, a ring of Q / dO tiles (+ LSE and D), the dS buffers the dQ GEMM reads, and one fp32 dQ
    tile staged for the reduce-add."""
    d, e = p.headdim, p.elem_bytes
    ring = t.stages * (2 * t.block_m * d * e + 2 * t.block_m * F32)
    ds = dS_buffers(t) * t.block_m * t.block_n * e
    return 2 * t.block_n * d * e + ring + ds + t.block_m * d * F32


def registers(p: Problem, t: Tiling) -> int:
    """A consumer warpgroup: its dK and dV accumulators (Bc/C x d) and S, dP (Br x Bc/C) over 128 threads."""
    kc = share(t)
    return REG_OVERHEAD - 8 + (2 * kc * p.headdim + 2 * t.block_m * kc) // 128


def register_budget(t: Tiling, profile) -> tuple[int, int]:
    c = consumers(t)
    return V3_CONSUMER_REGS.get(c, 0), v3_launch_registers(c)


def check_tiling(p: Problem, t: Tiling) -> None:
    c = consumers(t)
    if t.warps % 4 or c < 1:
        raise FlashsimError(f"v3-bwd runs a producer warpgroup and at least one consumer: warps must be a "
                            f"multiple of 4 and at least 8, got {t.warps}")


def build(p: Problem, t: Tiling) -> Schedule:
    bm, bn, d, stages = t.block_m, t.block_n, p.headdim, t.stages
    C = consumers(t)
    kc = share(t)
    dt, g = gemm_dtype(p), p.group
    ds_bufs = dS_buffers(t)

    def owns(j: int, c: int) -> bool:
        return share_keys(t, c) > 0 and j * bn + c * kc < p.seqlen_k

    def producer(cta):
        b, h, j = cta
        col0 = j * bn
        for c in range(C):
            if owns(j, c):
                keys = share_keys(t, c)
                yield Load(row_tile(p, "K", b, h, col0 + c * kc, keys, kv=True), f"sK{c}", SMEM, "tma", "kv")
                yield Load(row_tile(p, "V", b, h, col0 + c * kc, keys, kv=True), f"sV{c}", SMEM, "tma", "kv")
        for n, i in enumerate(bw.q_blocks(p, col0, bm)):
            s, use = n % stages, n // stages
            if use:
                yield Wait(f"empty{s}", C * use)
            row0 = i * bm
            yield Load(row_tile(p, "Q", b, h, row0, bm), f"sQ{s}", SMEM, "tma", f"full{s}")
            yield Load(row_tile(p, "dO", b, h, row0, bm), f"sdO{s}", SMEM, "tma", f"full{s}")
            yield Load(stat_tile(p, "LSE", b, h, row0, bm), f"sLSE{s}", SMEM, "tma", f"full{s}")
            yield Load(stat_tile(p, "D", b, h, row0, bm), f"sD{s}", SMEM, "tma", f"full{s}")

    def consumer_program(c: int):
        def program(cta):
            b, h, j = cta
            k0, keys = j * bn + c * kc, share_keys(t, c)
            if not owns(j, c):
                for n, _ in enumerate(bw.q_blocks(p, j * bn, bm)):
                    yield Arrive(f"empty{n % stages}")  # nothing to compute: release the slots at once
                return
            owners = [cc for cc in range(C) if owns(j, cc)]
            yield Wait("kv", 2 * len(owners))
            yield Fill("dK", kc, d, 0.0)
            yield Fill("dV", kc, d, 0.0)
            for n, i in enumerate(bw.q_blocks(p, j * bn, bm)):
                s, row0, half = n % stages, i * bm, n % ds_bufs
                yield Wait(f"full{s}", RING_TILES * (n // stages + 1))
                yield Gemm("S", f"sQ{s}", f"sK{c}", bm, kc, d, SMEM, SMEM, "wgmma", dt, 4, trans_b=True)
                yield LseExp("S", "P", f"sLSE{s}", bm, kc, p.scale, tile_mask(p, row0, k0, bm, keys), 4)
                yield Gemm("dP", f"sdO{s}", f"sV{c}", bm, kc, d, SMEM, SMEM, "wgmma", dt, 4, trans_b=True)
                yield SoftmaxGrad("dS", "P", "dP", f"sD{s}", bm, kc, p.scale, 4)
                yield Gemm("dV", "P", f"sdO{s}", kc, d, bm, RMEM, SMEM, "wgmma", dt, 4, accumulate=True,
                           trans_a=True)
                yield Gemm("dK", "dS", f"sQ{s}", kc, d, bm, RMEM, SMEM, "wgmma", dt, 4, accumulate=True,
                           trans_a=True)
                yield Arrive(f"empty{s}")
                # dS_c to shared memory once the dQ that last read the buffer is done
                if n >= ds_bufs:
                    yield Wait(f"dsfree{half}", n // ds_bufs)
                yield StoreShared("dS", f"sdS{c}_{half}", bm, kc, OPERAND_BYTES[dt], "dS")
                yield Arrive(f"ds{half}")
                if c == owners[n % len(owners)]:  # the warpgroups take turns at dQ_i = sum_c dS_c K_c
                    yield Wait(f"ds{half}", len(owners) * (n // ds_bufs + 1))
                    for first, cc in enumerate(owners):
                        yield Gemm("dQ", f"sdS{cc}_{half}", f"sK{cc}", bm, d, kc, SMEM, SMEM, "wgmma", dt, 4,
                                   accumulate=first > 0)
                    yield Arrive(f"dsfree{half}")
                    yield AtomicAdd("dQ", bw.accum_tile(p, "dQaccum", b, h, row0, bm), "tma")
            if g > 1:
                yield AtomicAdd("dK", bw.accum_tile(p, "dKaccum", b, h // g, k0, keys, kv=True), "tma")
                yield AtomicAdd("dV", bw.accum_tile(p, "dVaccum", b, h // g, k0, keys, kv=True), "tma")
            else:
                yield Store("dK", row_tile(p, "dK", b, h, k0, keys, kv=True), RMEM, "tma")
                yield Store("dV", row_tile(p, "dV", b, h, k0, keys, kv=True), RMEM, "tma")

        return program

    roles = (Role("producer", 4, producer),) + tuple(Role(f"consumer{c}", 4, consumer_program(c)) for c in range(C))
    ctas = [(b, h, j) for b in range(p.batch) for h in range(p.heads) for j in range(cdiv(p.seqlen_k, bn))]
    kernels = []
    if g > 1:
        kernels.append(bw.zero_dkv_kernel(p, bn, 4))
    kernels.append(bw.preprocess_kernel(p, bm, 4, zero_dq=True))
    kernels.append(Kernel("flash_bwd_v3", ctas, roles, smem_bytes(p, t), v3_launch_registers(C),
                          classes=lambda c: (c[2],), uniform=not p.causal))
    kernels.append(bw.convert_dq_kernel(p, bm, 4))
    if g > 1:
        kernels.append(bw.convert_dkv_kernel(p, bn, 4))
    return Schedule("v3-bwd", p, t, tuple(kernels))


def loop_nest(x: cf.Dims) -> list[cf.KernelNest]:
    BH, Nq, Nk, d, e, eg, bm, bn = x.BH, x.Nq, x.Nk, x.d, x.e, x.eg, x.bm, x.bn
    C = consumers(x.t)
    kc = share(x.t)
    steps, seen = bw.q_steps(x), bw.q_rows_seen(x)
    owners = [[c for c in range(C) if share_keys(x.t, c) and j * bn + c * kc < Nk] for j in range(x.Tc)]
    active = [len(o) for o in owners]  # consumers with keys in block j
    P, rows = BH * sum(steps), BH * sum(seen)
    CP = BH * sum(a * s for a, s in zip(active, steps, strict=True))
    masked = BH * sum(bw.masked_steps(x, j * bn + c * kc, share_keys(x.t, c), j * bn)
                      for j in range(x.Tc) for c in owners[j])
    slices = BH * sum(active)
    rq, rk = min(bm, Nq), min(kc, Nk)
    kv = BH * Nk * d * e
    producer = [
        cf.load("load K_c, V_c (TMA, one slice per consumer)", "K", rk * d * e, kv, slices),
        cf.load("", "V", rk * d * e, kv, slices),
        cf.Loop(f"i in 0..{max(steps)}  q-block (ring of {x.t.stages} slots)", max(steps), P, [
            cf.load("load Q_i (TMA)", "Q", rq * d * e, rows * d * e, P),
            cf.load("load dO_i (TMA)", "dO", rq * d * e, rows * d * e, P),
            *cf.merged([cf.load("load LSE_i, D_i (TMA)", "LSE", rq * F32, rows * F32, P),
                        cf.load("", "D", rq * F32, rows * F32, P)]),
        ]),
    ]
    producer[:2] = cf.merged(producer[:2])
    inner = [
        cf.gemm("S = Q_i K_c^T  wgmma", "wgmma", x.dt, bm, kc, d, CP, ("Q", bm * d * eg), ("K", kc * d * eg)),
        cf.work("P = exp(scale S - LSE_i)", CP, bm * kc, 2 * bm * kc,
                2 * bm * kc * CP + cf.MASK_OPS_PER_ELEMENT * masked * bm * kc),
        cf.gemm("dP = dO_i V_c^T  wgmma", "wgmma", x.dt, bm, kc, d, CP, ("dO", bm * d * eg), ("V", kc * d * eg)),
        cf.work("dS = scale P (dP - D_i)", CP, 0, 3 * bm * kc),
        cf.gemm("dV_c += P^T dO_i  wgmma", "wgmma", x.dt, kc, d, bm, CP, None, ("dO", bm * d * eg)),
        cf.gemm("dK_c += dS^T Q_i  wgmma", "wgmma", x.dt, kc, d, bm, CP, None, ("Q", bm * d * eg)),
        cf.Step("dS_c -> shared memory", "rf->smem", CP,
                [cf.Effect("smem_write", "dS", bm * kc * eg, CP * bm * kc * eg)]),
        cf.gemm("dQ_i += dS_c K_c  wgmma (one warpgroup per step, in turns)", "wgmma", x.dt, bm, d, kc, CP,
                ("dS", bm * kc * eg), ("K", kc * d * eg)),
        cf.atomic("dQaccum_i += dQ_i  (TMA reduce-add, fp32, once per step)", "dQaccum", rq * d * F32,
                  rows * d * F32, P, tma=True),
    ]
    if x.p.group > 1:
        out = cf.merged([cf.atomic("dKaccum_c += dK_c, dVaccum_c += dV_c  (TMA reduce-add)", "dKaccum",
                                   rk * d * F32, BH * Nk * d * F32, slices, tma=True),
                         cf.atomic("", "dVaccum", rk * d * F32, BH * Nk * d * F32, slices, tma=True)])
    else:
        out = cf.merged([cf.store("store dK_c, dV_c (TMA)", "dK", rk * d * e, kv, slices, tma=True),
                         cf.store("", "dV", rk * d * e, kv, slices, tma=True)])
    consumer = [cf.Loop(f"i in 0..{max(steps)}  q-block", max(steps), CP, inner,
                        note="causal: from the diagonal" if x.p.causal else ""), *out]
    body = [
        cf.Loop("producer warpgroup (1)", 1, BH * x.Tc, producer),
        cf.Loop(f"c in 0..{C}  consumer warpgroup (in parallel)", C, slices, consumer),
    ]
    main = cf.KernelNest("flash_bwd_v3", BH * x.Tc, 32 * x.w, [cf.bh_loop(x, [
        cf.Loop(f"j in 0..{x.Tc}  kv-block", x.Tc, BH * x.Tc, body, grid=True)])])
    nests = [bw.preprocess_nest(x, 4, zero_dq=True), main, bw.convert_dq_nest(x, 4)]
    if x.p.group > 1:
        zero, convert = bw.dkv_nests(x, 4)
        nests = [zero, *nests, convert]
    return nests


ALGORITHM = Algorithm(
    name="v3-bwd",
    forward="v3",
    summary="FlashAttention-3's backward: TMA producer, wgmma consumers splitting the K/V block, dQ added by "
            "TMA reduce-adds",
    build=build,
    mapper=mapper,
    smem_bytes=smem_bytes,
    registers=registers,
    loop_nest=loop_nest,
    hbm_tensors=bw.flash_backward_tensors,
    why="As v2-bwd: K_j, V_j once; Q, dO, LSE, D once per kv-block (Tc = {tc} passes), by TMA into a ring of "
        "{stages} slots; dQ reduce-added in the L2 once per (kv-block, q-block, consumer).",
    mma="wgmma",
    features=("tma", "wgmma"),
    dtypes=("bf16", "fp16"),  # FA3's backward takes 16-bit inputs
    register_budget=register_budget,
    check_tiling=check_tiling,
)
