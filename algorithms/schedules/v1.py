"""FlashAttention V1 (Dao et al. 2022, Algorithm 1): one thread block per (batch, head).

Outer loop over K/V blocks j (loaded to SRAM once); inner loop over Q blocks i, each step reading Q_i, O_i,
l_i, m_i from global memory and writing O_i, l_i, m_i back. Warps split the K/V block ("split-K"): each
computes S for a slice of keys, so row statistics and the partial P V products meet in shared memory.
O_i lives in an fp32 workspace between steps and is written in the input dtype by its last step.
Fully masked (causal) blocks are skipped. With tiling.splits > 1 each (batch, head) gets that many thread
blocks, block s taking Q blocks s, s + splits, ... (all of them still stream every K/V block): more blocks
in flight, the same loop order.
"""

from __future__ import annotations

import math

from ..ir import (
    RMEM,
    SMEM,
    Fill,
    Gemm,
    Kernel,
    Load,
    OnlineSoftmax,
    RescaleMerge,
    Role,
    Schedule,
    Store,
    SyncThreads,
    WarpReduce,
)
from ..parts import cdiv, gemm_dtype, kv_block_count, out_bytes, row_tile, stat_tile, tile_mask
from ..problem import Problem
from ..tiling import Tiling, registers_per_thread, smem_bytes


def build(p: Problem, t: Tiling) -> Schedule:
    br, bc, d, w = t.block_m, t.block_n, p.headdim, t.warps
    dt = gemm_dtype(p)
    tr, tc = cdiv(p.seqlen_q, br), cdiv(p.seqlen_k, bc)
    visits = [kv_block_count(p, i * br, br, bc) for i in range(tr)]  # K/V blocks each Q block sees

    def program(cta):
        b, h, split = cta
        mine = range(split, tr, t.splits)
        for j in range(tc):
            yield Load(row_tile(p, "K", b, h, j * bc, bc, kv=True), "sK", SMEM)
            yield Load(row_tile(p, "V", b, h, j * bc, bc, kv=True), "sV", SMEM)
            yield SyncThreads()
            for i in mine:
                if j >= visits[i]:
                    continue  # causal: this K/V block is fully masked for Q_i
                row0 = i * br
                last = j == visits[i] - 1
                yield Load(row_tile(p, "Q", b, h, row0, br), "sQ", SMEM)
                if j == 0:
                    yield Fill("o", br, d, 0.0)
                    yield Fill("m", br, 1, -math.inf)
                    yield Fill("l", br, 1, 0.0)
                else:
                    yield Load(row_tile(p, "Oacc", b, h, row0, br, elem_bytes=4), "o", RMEM)
                    yield Load(stat_tile(p, "M", b, h, row0, br), "m", RMEM)
                    yield Load(stat_tile(p, "L", b, h, row0, br), "l", RMEM)
                yield Gemm("S", "sQ", "sK", br, bc, d, SMEM, SMEM, "mma_sync", dt, w, trans_b=True, split="n")
                yield OnlineSoftmax("S", "P", "mt", "lt", br, bc, p.scale, tile_mask(p, row0, j * bc, br, bc),
                                    dt, mode="v1", cross_warp=w, warps=w)
                yield Gemm("PVw", "P", "sV", br, d, bc, RMEM, SMEM, "mma_sync", dt, w, split="k")
                yield WarpReduce("PV", "PVw", br, d, w, w)
                yield RescaleMerge("o", "PV", "m", "l", "mt", "lt", br, d, w)
                if last:
                    yield Store("o", row_tile(p, "O", b, h, row0, br, elem_bytes=out_bytes(p)), RMEM)
                else:
                    yield Store("o", row_tile(p, "Oacc", b, h, row0, br, elem_bytes=4), RMEM)
                    yield Store("m", stat_tile(p, "M", b, h, row0, br), RMEM)
                    yield Store("l", stat_tile(p, "L", b, h, row0, br), RMEM)
                yield SyncThreads()
        for i in mine:
            if not visits[i]:  # causal with seqlen_q > seqlen_k: rows that see no key output zeros
                yield Fill("o", br, d, 0.0)
                yield Store("o", row_tile(p, "O", b, h, i * br, br, elem_bytes=out_bytes(p)), RMEM)

    ctas = [(b, h, s) for b in range(p.batch) for h in range(p.heads) for s in range(min(t.splits, tr))]
    kernel = Kernel("flash_fwd_v1", ctas, (Role("warps", w, program),), smem_bytes("v1", p, t),
                    registers_per_thread("v1", p, t), classes=lambda c: (c[2],))
    return Schedule("v1", p, t, (kernel,))
