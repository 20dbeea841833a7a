"""Standard attention's backward, as an unfused implementation (autograd over matmul and softmax) runs it:
five launches, with dP and dS materialised in global memory beside the P the forward saved.

    dV = P^T dO        tiled GEMM over the query rows (with GQA: over the group's query heads too)
    dP = dO V^T        tiled GEMM, written in the input dtype
    dS = scale P (dP - rowsum(P dP))   softmax's backward, a row kernel reading P and dP, writing dS
    dQ = dS K          tiled GEMM
    dK = dS^T Q        tiled GEMM over the query rows (and the group's heads)

The softmax scale is folded into dS, so the two GEMMs that read it need no further scaling.
"""

from __future__ import annotations

from .. import closed_form as cf
from ..backward import standard_backward_tensors
from ..ir import (
    RMEM,
    GTile,
    Kernel,
    Load,
    Role,
    RowDot,
    Schedule,
    SoftmaxGrad,
    Store,
)
from ..mapping import Tiling
from ..parts import cdiv
from ..problem import Problem
from ..record import Algorithm
from .standard import K_CHUNK, SOFTMAX_ROWS, gemm_kernel, mapper, registers, smem_bytes


def build(p: Problem, t: Tiling) -> Schedule:
    bm, bn, d, e = t.block_m, t.block_n, p.headdim, p.elem_bytes
    nq, nk, g = p.seqlen_q, p.seqlen_k, p.group
    tq, tk = cdiv(nq, bm), cdiv(nk, bn)
    dn = min(d, bn)
    td = cdiv(d, dn)
    kq = cdiv(nq, K_CHUNK)  # k-slices over the query rows of one head

    def block(tensor, b, head, r, rblock, rtotal, c, cblock, ctotal):
        """Block (r, c) of rblock x cblock elements of a (rtotal x ctotal) matrix, clipped at its edges."""
        r0, c0 = r * rblock, c * cblock
        return GTile(tensor, b, head, r0, min(rblock, rtotal - r0), c0, min(cblock, ctotal - c0), e)

    q_heads = [(b, h) for b in range(p.batch) for h in range(p.heads)]
    kv_heads = [(b, hk) for b in range(p.batch) for hk in range(p.kv_heads)]

    # dV and dK (Nk x d) per K/V head: k runs over the group's query heads, then the query rows.
    def over_queries(tensor):
        def a_of(cta, kc):  # slice kc of P^T or dS^T: stored as (query rows x key block), transposed
            b, hk, j, _ = cta
            return block(tensor, b, hk * g + kc // kq, kc % kq, K_CHUNK, nq, j, bm, nk)
        return a_of

    def queries_of(tensor):
        def b_of(cta, kc):
            b, hk, _, c = cta
            return block(tensor, b, hk * g + kc // kq, kc % kq, K_CHUNK, nq, c, dn, d)
        return b_of

    def kv_out(tensor):
        def out(cta):
            b, hk, j, c = cta
            return block(tensor, b, hk, j, bm, nk, c, dn, d)
        return out

    kv_ctas = [(b, hk, j, c) for b, hk in kv_heads for j in range(cdiv(nk, bm)) for c in range(td)]
    dv = gemm_kernel("gemm_dv", p, t, over_queries("P"), queries_of("dO"), kv_out("dV"), dn, g * kq, kv_ctas,
                     lambda c: c[2:], trans_a=True)
    dk = gemm_kernel("gemm_dk", p, t, over_queries("dS"), queries_of("Q"), kv_out("dK"), dn, g * kq, kv_ctas,
                     lambda c: c[2:], trans_a=True)

    kd, kn = cdiv(d, K_CHUNK), cdiv(nk, K_CHUNK)
    dp = gemm_kernel(
        "gemm_dp", p, t,
        lambda c, kc: block("dO", c[0], c[1], c[2], bm, nq, kc, K_CHUNK, d),
        lambda c, kc: block("V", c[0], c[1] // g, c[3], bn, nk, kc, K_CHUNK, d),
        lambda c: block("dP", c[0], c[1], c[2], bm, nq, c[3], bn, nk), bn, kd,
        [(b, h, i, j) for b, h in q_heads for i in range(tq) for j in range(tk)], lambda c: c[2:], trans_b=True)
    dq = gemm_kernel(
        "gemm_dq", p, t,
        lambda c, kc: block("dS", c[0], c[1], c[2], bm, nq, kc, K_CHUNK, nk),
        lambda c, kc: block("K", c[0], c[1] // g, kc, K_CHUNK, nk, c[3], dn, d),
        lambda c: block("dQ", c[0], c[1], c[2], bm, nq, c[3], dn, d), dn, kn,
        [(b, h, i, c) for b, h in q_heads for i in range(tq) for c in range(td)], lambda c: c[2:])

    def softmax_bwd(cta):
        b, h, r = cta
        rows_p = block("P", b, h, r, SOFTMAX_ROWS, nq, 0, nk, nk)
        row0, rows = rows_p.row, rows_p.rows
        yield Load(rows_p, "p", RMEM)
        yield Load(GTile("dP", b, h, row0, rows, 0, nk, e), "dp", RMEM)
        yield RowDot("delta", "p", "dp", rows, nk, SOFTMAX_ROWS)
        yield SoftmaxGrad("ds", "p", "dp", "delta", rows, nk, p.scale, SOFTMAX_ROWS)
        yield Store("ds", GTile("dS", b, h, row0, rows, 0, nk, e), RMEM)

    sm = Kernel("softmax_bwd", [(b, h, r) for b, h in q_heads for r in range(cdiv(nq, SOFTMAX_ROWS))],
                (Role("warps", SOFTMAX_ROWS, softmax_bwd),), 0, 64, classes=lambda c: (c[2],))
    return Schedule("standard-bwd", p, t, (dv, dp, sm, dq, dk))


def loop_nest(x: cf.Dims) -> list[cf.KernelNest]:
    B, BH, Nq, Nk, d, e, eg, w, bm, bn, g = x.B, x.BH, x.Nq, x.Nk, x.d, x.e, x.eg, x.w, x.bm, x.bn, x.p.group
    BK = B * x.Hkv
    tq, tk = x.Tr, x.Tc
    dn = min(d, bn)
    td = cf.cdiv(d, dn)
    kq, kd, kn = cf.cdiv(Nq, K_CHUNK), cf.cdiv(d, K_CHUNK), cf.cdiv(Nk, K_CHUNK)
    tkm = cf.cdiv(Nk, bm)  # key blocks of the dV / dK output tiles (bm rows each)
    rq, rkm, cq, ck, cd = min(bm, Nq), min(bm, Nk), min(K_CHUNK, Nq), min(K_CHUNK, Nk), min(K_CHUNK, d)

    def gemm_nest(name, out, text, a, b, outer, slices, out_bytes, a_tile, b_tile, n_tile):
        """outer: [(loop text, trip)] of the output tiles; a, b: (tensor, total bytes); slices of K_CHUNK."""
        ctas = 1
        for _, trip in outer:
            ctas *= trip
        heads = BK if outer[0][0].startswith("j") else BH
        n = heads * ctas * slices
        step = cf.Loop(f"kc in 0..{slices}  {K_CHUNK}-wide slice", slices, n, [
            cf.load(f"load {a[0]}[., kc]", a[0], a_tile, a[1], n),
            cf.load(f"load {b[0]}[kc, .]", b[0], b_tile, b[1], n),
            cf.gemm(f"{text}  mma_sync, split rows", "mma_sync", x.dt, bm, n_tile, K_CHUNK, n,
                    (a[0], bm * K_CHUNK * eg), (b[0], w * K_CHUNK * n_tile * eg)),
        ])
        body = [step, cf.store(f"store {out}", out, out_bytes[0], out_bytes[1], heads * ctas)]
        for var, trip in reversed(outer):
            body = [cf.Loop(f"{var}", trip, heads * ctas, body, grid=True)]
        loop = cf.bh_loop(x, body, heads=x.Hkv if heads == BK else None)
        return cf.KernelNest(name, heads * ctas, 32 * w, [loop])

    kv_outer = [(f"j in 0..{tkm}  key block", tkm), (f"c in 0..{td}  {dn}-wide slice of d", td)]
    over_q = g * kq
    dv = gemm_nest("gemm_dv", "dV", "dV += P^T dO", ("P", BH * td * Nq * Nk * e), ("dO", BH * tkm * Nq * d * e),
                   kv_outer, over_q, (rkm * dn * e, BK * Nk * d * e), cq * rkm * e, cq * dn * e, dn)
    dp = gemm_nest("gemm_dp", "dP", "dP += dO V^T", ("dO", BH * tk * Nq * d * e), ("V", BH * tq * Nk * d * e),
                   [(f"i in 0..{tq}  q-block", tq), (f"j in 0..{tk}  k-block", tk)], kd,
                   (rq * min(bn, Nk) * e, BH * Nq * Nk * e), rq * cd * e, min(bn, Nk) * cd * e, bn)
    r = min(SOFTMAX_ROWS, Nq)
    tr = cf.cdiv(Nq, SOFTMAX_ROWS)
    n = BH * tr
    softmax = cf.KernelNest("softmax_bwd", n, 32 * SOFTMAX_ROWS, [cf.bh_loop(x, [
        cf.Loop(f"r in 0..{tr}  block of {SOFTMAX_ROWS} rows", tr, n, [
            cf.load("load P[r, :]", "P", r * Nk * e, BH * Nq * Nk * e, n, smem=False),
            cf.load("load dP[r, :]", "dP", r * Nk * e, BH * Nq * Nk * e, n, smem=False),
            cf.work("D = rowsum(P dP); dS = scale P (dP - D)", n, 0, 5 * r * Nk, 5 * BH * Nq * Nk),
            cf.store("store dS[r, :]", "dS", r * Nk * e, BH * Nq * Nk * e, n),
        ], grid=True)])])
    dq = gemm_nest("gemm_dq", "dQ", "dQ += dS K", ("dS", BH * td * Nq * Nk * e), ("K", BH * tq * Nk * d * e),
                   [(f"i in 0..{tq}  q-block", tq), (f"c in 0..{td}  {dn}-wide slice of d", td)], kn,
                   (rq * dn * e, BH * Nq * d * e), rq * ck * e, ck * dn * e, dn)
    dk = gemm_nest("gemm_dk", "dK", "dK += dS^T Q", ("dS", BH * td * Nq * Nk * e), ("Q", BH * tkm * Nq * d * e),
                   kv_outer, over_q, (rkm * dn * e, BK * Nk * d * e), cq * rkm * e, cq * dn * e, dn)
    return [dv, dp, softmax, dq, dk]


ALGORITHM = Algorithm(
    name="standard-bwd",
    forward="standard",
    summary="standard attention's backward: five launches, P, dP and dS (Nq x Nk) through global memory",
    build=build,
    mapper=mapper,
    smem_bytes=smem_bytes,
    registers=registers,
    loop_nest=loop_nest,
    hbm_tensors=standard_backward_tensors,
    why="P is read twice, dP written and read, dS written and read twice: Theta(N^2) bytes whatever M.",
    block_n_is_k=False,
)
