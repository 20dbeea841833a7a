"""Standard attention, three launches with S and P materialised in global memory (Theorem 2's baseline):

    S = Q K^T (tiled GEMM, written in the input dtype)
    P = softmax(scale * S) row by row, one warp per row: a pass for the running (max, sum), a second that
        re-reads S and writes P (fp32 math, written in the input dtype)
    O = P V (tiled GEMM)

Causal attention computes the full S and masks in the softmax, as an unfused implementation does.
"""

from __future__ import annotations

from ..ir import RMEM, SMEM, Fill, Gemm, GTile, Kernel, Load, Role, RowSoftmax, Schedule, Store, SyncThreads, Wait
from ..parts import cdiv, gemm_dtype, tile_mask
from ..problem import Problem
from ..tiling import Tiling, registers_per_thread, smem_bytes

K_CHUNK = 32  # the GEMM kernels' k-slice per pipeline stage
SOFTMAX_ROWS = 4  # rows per softmax thread block: one warp per row


def _gemm_kernel(name, p: Problem, t: Tiling, a_of, b_of, out_of, n_tile, k_total, trans_b, ctas):
    """A tiled GEMM out = A @ B(^T): for each (bm x bn) output tile, stream k-slices of A and B through a
    ring of `stages` shared-memory buffers (stages - 1 slices in flight), as the kernels do."""
    dt = gemm_dtype(p)

    def program(cta):
        b, h, i, j = cta
        slices = cdiv(k_total, K_CHUNK)
        ring = max(1, t.stages)  # k-slice buffers; stages - 1 slices are in flight while one is used

        def load(kc):
            yield Load(a_of(b, h, i, kc), f"sA{kc % ring}", SMEM, "cp.async", "ab")
            yield Load(b_of(b, h, j, kc), f"sB{kc % ring}", SMEM, "cp.async", "ab")

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
                       "mma_sync", dt, t.warps, trans_b=trans_b, accumulate=kc > 0)
        yield SyncThreads()  # the output tile is staged through the k-slice buffers
        yield Store("acc", out_of(b, h, i, j), RMEM)

    return Kernel(name, ctas, (Role("warps", t.warps, program),), smem_bytes("standard", p, t),
                  registers_per_thread("standard", p, t), classes=lambda c: c[2:])


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
    qk = _gemm_kernel("gemm_qk", p, t, q_chunk, k_chunk, s_tile, bn, d, True,
                      [(b, h, i, j) for b, h in heads for i in range(tq) for j in range(tk)])
    pv = _gemm_kernel("gemm_pv", p, t, p_chunk, v_chunk, o_tile, dn, nk, False,
                      [(b, h, i, j) for b, h in heads for i in range(tq) for j in range(cdiv(d, dn))])

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
