"""Standard attention, three launches with S and P materialised in global memory (Theorem 2's baseline):

    S = Q K^T (tiled GEMM, written in the input dtype)
    P = softmax(scale * S) row by row, one warp per row: a pass for the running (max, sum), a second that
        re-reads S and writes P (fp32 math, written in the input dtype)
    O = P V (tiled GEMM)

Causal attention computes the full S and masks in the softmax, as an unfused implementation does.
"""

from __future__ import annotations

from .. import closed_form as cf
from ..footprint import REG_OVERHEAD
from ..ir import RMEM, SMEM, Fill, Gemm, GTile, Kernel, Load, Role, RowSoftmax, Schedule, Store, SyncThreads, Wait
from ..mapping import Tiling
from ..parts import cdiv, gemm_dtype, q_rows, tile_mask
from ..problem import Problem
from ..record import Algorithm

K_CHUNK = 32  # the GEMM kernels' k-slice per pipeline stage
SOFTMAX_ROWS = 4  # rows per softmax thread block: one warp per row


def mapper(p: Problem, profile) -> Tiling:
    return Tiling(128, 128, 4, 2)  # the GEMM kernels' output tile; S and P live in global memory


def smem_bytes(p: Problem, t: Tiling) -> int:
    """A ring of A and B k-slices of 32 (rows padded by 8 elements), which the epilogue then reuses to stage
    the block_m x block_n output tile (rows padded by 8): the kernels' Q K^T layout."""
    e = p.elem_bytes
    return max(t.stages * (t.block_m + t.block_n) * (K_CHUNK + 8) * e, t.block_m * (t.block_n + 8) * e)


def registers(p: Problem, t: Tiling) -> int:
    """The fp32 output tile spread over the threads, plus a fixed overhead."""
    return REG_OVERHEAD + t.block_m * t.block_n // t.threads


def gemm_kernel(name, p: Problem, t: Tiling, a_of, b_of, out_of, n_tile, slices, ctas, classes, *,
                trans_a: bool = False, trans_b: bool = False) -> Kernel:
    """A tiled GEMM: each thread block's (bm x n_tile) output tile is the sum over `slices` k-slices of A @ B,
    streamed through a ring of `stages` shared-memory buffers (stages - 1 slices in flight), as the kernels
    do. a_of / b_of(cta, kc) give slice kc's tiles, out_of(cta) the output tile (the backward's GEMMs too)."""
    dt = gemm_dtype(p)
    ring = max(1, t.stages)  # k-slice buffers; stages - 1 slices are in flight while one is used

    def program(cta):
        def load(kc):
            yield Load(a_of(cta, kc), f"sA{kc % ring}", SMEM, "cp.async", "ab")
            yield Load(b_of(cta, kc), f"sB{kc % ring}", SMEM, "cp.async", "ab")

        yield Fill("acc", t.block_m, n_tile, 0.0)
        for kc in range(min(ring - 1, slices)):
            yield from load(kc)
        for kc in range(slices):
            if ring == 1:
                yield from load(kc)
            yield Wait("ab", 2 * (kc + 1))
            yield SyncThreads()  # slice kc landed; every warp is done with the buffer refilled next
            if ring > 1 and kc + ring - 1 < slices:
                yield from load(kc + ring - 1)
            yield Gemm("acc", f"sA{kc % ring}", f"sB{kc % ring}", t.block_m, n_tile, K_CHUNK, SMEM, SMEM,
                       "mma_sync", dt, t.warps, trans_a=trans_a, trans_b=trans_b, accumulate=kc > 0)
        yield SyncThreads()  # the output tile is staged through the k-slice buffers
        yield Store("acc", out_of(cta), RMEM)

    return Kernel(name, ctas, (Role("warps", t.warps, program),), smem_bytes(p, t), registers(p, t),
                  classes=classes)


def build(p: Problem, t: Tiling) -> Schedule:
    bm, bn, d, e = t.block_m, t.block_n, p.headdim, p.elem_bytes
    nq, nk, g = p.seqlen_q, p.seqlen_k, p.group
    tq, tk = cdiv(nq, bm), cdiv(nk, bn)
    dn = min(d, bn)  # O = P V: output tiles bm x min(d, bn)

    def block(tensor, b, head, ri, rblock, rtotal, ci, cblock, ctotal):
        """Block (ri, ci) of rblock x cblock elements of a (rtotal x ctotal) matrix, clipped at its edges."""
        r, c = ri * rblock, ci * cblock
        return GTile(tensor, b, head, r, min(rblock, rtotal - r), c, min(cblock, ctotal - c), e)

    # Each GEMM operand as block (row block, k-slice); outputs as (row block, column block).
    def q_chunk(b, h, i, kc):
        return block("Q", b, h, i, bm, nq, kc, K_CHUNK, d)

    def k_chunk(b, h, j, kc):
        return block("K", b, h // g, j, bn, nk, kc, K_CHUNK, d)

    def s_tile(b, h, i, j):
        return block("S", b, h, i, bm, nq, j, bn, nk)

    def p_chunk(b, h, i, kc):
        return block("P", b, h, i, bm, nq, kc, K_CHUNK, nk)

    def v_chunk(b, h, j, kc):
        return block("V", b, h // g, kc, K_CHUNK, nk, j, dn, d)

    def o_tile(b, h, i, j):
        return block("O", b, h, i, bm, nq, j, dn, d)

    heads = [(b, h) for b in range(p.batch) for h in range(p.heads)]
    # a thread block (b, h, i, j) computes output tile (i, j) of head (b, h)
    qk = gemm_kernel("gemm_qk", p, t, lambda c, kc: q_chunk(*c[:3], kc), lambda c, kc: k_chunk(*c[:2], c[3], kc),
                     lambda c: s_tile(*c), bn, cdiv(d, K_CHUNK),
                     [(b, h, i, j) for b, h in heads for i in range(tq) for j in range(tk)], lambda c: c[2:],
                     trans_b=True)
    pv = gemm_kernel("gemm_pv", p, t, lambda c, kc: p_chunk(*c[:3], kc), lambda c, kc: v_chunk(*c[:2], c[3], kc),
                     lambda c: o_tile(*c), dn, cdiv(nk, K_CHUNK),
                     [(b, h, i, j) for b, h in heads for i in range(tq) for j in range(cdiv(d, dn))], lambda c: c[2:])

    def softmax(cta):
        b, h, r = cta
        rows_s = block("S", b, h, r, SOFTMAX_ROWS, nq, 0, nk, nk)
        row0, rows = rows_s.row, rows_s.rows
        yield Load(rows_s, "s", RMEM)  # pass 1: running max and sum
        yield Load(rows_s, "s", RMEM)  # pass 2: S again, for P
        yield RowSoftmax("s", "p", rows, nk, p.scale, tile_mask(p, row0, 0, rows, nk), SOFTMAX_ROWS, passes=2)
        yield Store("p", GTile("P", b, h, row0, rows, 0, nk, e), RMEM)

    sm = Kernel("softmax", [(b, h, r) for b, h in heads for r in range(cdiv(nq, SOFTMAX_ROWS))],
                (Role("warps", SOFTMAX_ROWS, softmax),), 0, 64, classes=lambda c: (c[2],))
    return Schedule("standard", p, t, (qk, sm, pv))


def loop_nest(x: cf.Dims) -> list[cf.KernelNest]:
    BH, Nq, Nk, d, e, eg, w, bm, bn = x.BH, x.Nq, x.Nk, x.d, x.e, x.eg, x.w, x.bm, x.bn
    tq, tk = x.Tr, x.Tc
    kd, kn = cf.cdiv(d, K_CHUNK), cf.cdiv(Nk, K_CHUNK)
    dn = min(d, bn)  # O = P V output tiles are bm x dn
    td = cf.cdiv(d, dn)
    rq, rk, cd = min(bm, Nq), min(bn, Nk), min(K_CHUNK, d)

    n = BH * tq * tk * kd
    qk = cf.KernelNest("gemm_qk", BH * tq * tk, 32 * w, [cf.bh_loop(x, [
        cf.Loop(f"i in 0..{tq}  q-block", tq, BH * tq, [
            cf.Loop(f"j in 0..{tk}  k-block", tk, BH * tq * tk, [
                cf.Loop(f"kc in 0..{kd}  {K_CHUNK}-wide slice of d", kd, n, [
                    cf.load("load Q[i, kc]", "Q", rq * cd * e, BH * tk * Nq * d * e, n),
                    cf.load("load K[j, kc]", "K", rk * cd * e, BH * tq * Nk * d * e, n),
                    cf.gemm("S += Q K^T  mma_sync, split rows", "mma_sync", x.dt, bm, bn, K_CHUNK, n,
                          ("Q", bm * K_CHUNK * eg), ("K", w * K_CHUNK * bn * eg)),
                ]),
                cf.store("store S[i, j]", "S", rq * rk * e, BH * Nq * Nk * e, BH * tq * tk),
            ]),
        ], grid=True),
    ])])

    tr = cf.cdiv(Nq, SOFTMAX_ROWS)
    n = BH * tr
    r = min(SOFTMAX_ROWS, Nq)
    softmax = cf.KernelNest("softmax", n, 32 * SOFTMAX_ROWS, [cf.bh_loop(x, [
        cf.Loop(f"r in 0..{tr}  block of {SOFTMAX_ROWS} rows", tr, n, [
            cf.load("load S[r, :]  pass 1: running max, sum", "S", r * Nk * e, BH * Nq * Nk * e, n, smem=False),
            cf.load("load S[r, :]  pass 2", "S", r * Nk * e, BH * Nq * Nk * e, n, smem=False),
            cf.Step("P = softmax(scale S)  (max, exp, sum; exp again)", "rf", n, [
                cf.Effect("exps", "", 2 * r * Nk, 2 * BH * Nq * Nk),
                cf.Effect("alu_flops", "", 5 * r * Nk, 5 * BH * Nq * Nk)]),
            cf.store("store P[r, :]", "P", r * Nk * e, BH * Nq * Nk * e, n),
        ], grid=True),
    ])])

    n = BH * tq * td * kn
    pv = cf.KernelNest("gemm_pv", BH * tq * td, 32 * w, [cf.bh_loop(x, [
        cf.Loop(f"i in 0..{tq}  q-block", tq, BH * tq, [
            cf.Loop(f"c in 0..{td}  {dn}-wide slice of d", td, BH * tq * td, [
                cf.Loop(f"kc in 0..{kn}  {K_CHUNK}-key slice", kn, n, [
                    cf.load("load P[i, kc]", "P", rq * min(K_CHUNK, Nk) * e, BH * td * Nq * Nk * e, n),
                    cf.load("load V[kc, c]", "V", min(K_CHUNK, Nk) * dn * e, BH * tq * Nk * d * e, n),
                    cf.gemm("O += P V  mma_sync, split rows", "mma_sync", x.dt, bm, dn, K_CHUNK, n,
                          ("P", bm * K_CHUNK * eg), ("V", w * K_CHUNK * dn * eg)),
                ]),
                cf.store("store O[i, c]", "O", rq * dn * e, BH * Nq * d * e, BH * tq * td),
            ], grid=True),
        ], grid=True),
    ])])
    return [qk, softmax, pv]


def hbm_tensors(p: Problem, t: Tiling) -> dict[str, int]:
    """S = Q K^T and P = softmax(S), (B, H, Nq, Nk) each in the input dtype."""
    scores = q_rows(p) * p.seqlen_k * p.elem_bytes
    return {"S": scores, "P": scores}


ALGORITHM = Algorithm(
    name="standard",
    summary="three launches: S = Q K^T and P = softmax(S) materialised in global memory, then O = P V",
    build=build,
    mapper=mapper,
    smem_bytes=smem_bytes,
    registers=registers,
    loop_nest=loop_nest,
    hbm_tensors=hbm_tensors,
    why="S and P (Nq x Nk) are written and read back through global memory: Theta(N d + N^2) bytes whatever "
        "the on-chip memory M.",
    block_n_is_k=False,
)
