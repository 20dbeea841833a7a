"""FlashAttention-2 (Dao 2023): one thread block per (Q block, head, batch), inner loop over K/V blocks.

Warps split Q (each owns block_m / warps rows, so no cross-warp exchange); K and V are single shared
buffers refilled by cp.async while the other is in use, as the public kernels do:
    wait K_j | issue V_j | S = Q K_j^T | softmax | wait V_j | issue K_j+1 | O += P V_j
O stays unnormalised in registers until the end and is written once, with the logsumexp.
"""

from __future__ import annotations

import math

from ..ir import RMEM, SMEM, Fill, Gemm, Kernel, Load, OnlineSoftmax, Role, Schedule, SyncThreads, Wait
from ..parts import cdiv, flash_epilogue, gemm_dtype, kv_block_count, row_tile, tile_mask
from ..problem import Problem
from ..tiling import Tiling, registers_per_thread, smem_bytes


def build(p: Problem, t: Tiling, instr: str = "mma_sync") -> Schedule:
    bm, bn, d, w = t.block_m, t.block_n, p.headdim, t.warps
    dt = gemm_dtype(p)

    def program(cta):
        b, h, i = cta
        row0 = i * bm
        yield Load(row_tile(p, "Q", b, h, row0, bm), "sQ", SMEM, "cp.async", "q")
        yield Wait("q", 1)
        yield Fill("acc", bm, d, 0.0)
        yield Fill("m", bm, 1, -math.inf)
        yield Fill("l", bm, 1, 0.0)
        n = kv_block_count(p, row0, bm, bn)
        if n:
            yield Load(row_tile(p, "K", b, h, 0, bn, kv=True), "sK", SMEM, "cp.async", "k")
        for j in range(n):
            col0 = j * bn
            yield Wait("k", j + 1)
            yield SyncThreads()
            yield Load(row_tile(p, "V", b, h, col0, bn, kv=True), "sV", SMEM, "cp.async", "v")
            yield Gemm("S", "sQ", "sK", bm, bn, d, SMEM, SMEM, instr, dt, w, trans_b=True)
            yield OnlineSoftmax("S", "P", "m", "l", bm, bn, p.scale, tile_mask(p, row0, col0, bm, bn),
                                dt, acc="acc", acc_cols=d, warps=w)
            yield Wait("v", j + 1)
            yield SyncThreads()
            if j + 1 < n:
                yield Load(row_tile(p, "K", b, h, col0 + bn, bn, kv=True), "sK", SMEM, "cp.async", "k")
            yield Gemm("acc", "P", "sV", bm, d, bn, RMEM, SMEM, instr, dt, w, accumulate=True)
        yield from flash_epilogue(p, b, h, row0, bm, "acc", "m", "l", w)

    # Launch order of the public kernels' grid (N/bm, B, H): Q blocks fastest, then batch, then heads.
    ctas = [(b, h, i) for h in range(p.heads) for b in range(p.batch) for i in range(cdiv(p.seqlen_q, bm))]
    kernel = Kernel("flash_fwd_v2", ctas, (Role("warps", w, program),), smem_bytes("v2", p, t),
                    registers_per_thread("v2", p, t), classes=lambda c: (c[2],), uniform=not p.causal)
    return Schedule("v2", p, t, (kernel,))
