"""FlashAttention-3 (Shah et al. 2024): warp-specialised, asynchronous, persistent.

Roles of one thread block (block_m / 64 consumer warpgroups + 1 producer warpgroup):
  producer:    TMA Q slices once; then K_j+1 and V_j for each block j, each into ring slot (j % stages) once
               every consumer has released it (K after its S GEMM, V after its PV GEMM); completion arrives on
               the slot's full barrier.
  consumer c:  S_0 = Q_c K_0^T; softmax. For j >= 1 (intra-warpgroup pipelining):
                 issue S_j = Q_c K_j^T and O += P_j-1 V_j-1 (wgmma, async) | softmax(S_j) while PV runs |
                 wait PV, release slot j-1, rescale O by the softmax correction.
               Ping-pong: consumers take turns to issue their GEMMs (named barriers), so one warpgroup's
               softmax runs under another's GEMMs.
The grid is persistent: one CTA per SM slot takes work tiles in order (causal: longest tiles first).
"""

from __future__ import annotations

import math

from ..ir import (
    RMEM,
    SMEM,
    Arrive,
    Fill,
    Gemm,
    GemmWait,
    GTile,
    Kernel,
    Load,
    OnlineSoftmax,
    Rescale,
    Role,
    Schedule,
    Wait,
)
from ..parts import cdiv, flash_epilogue, gemm_dtype, kv_block_count, row_tile, tile_mask
from ..problem import Problem
from ..tiling import Tiling, smem_bytes, v3_launch_registers

WG_ROWS = 64  # rows of a wgmma accumulator: one warpgroup's share of block_m


def build(p: Problem, t: Tiling, fp8: bool = False, name: str = "v3") -> Schedule:
    bm, bn, d, stages = t.block_m, t.block_n, p.headdim, t.stages
    consumers = bm // WG_ROWS
    dt = gemm_dtype(p)
    q_src, k_src, v_src = ("Qq", "Kq", "Vq") if fp8 else ("Q", "K", "V")

    def active(i: int) -> int:
        """Consumers with rows to compute in Q block i (the last block may be ragged)."""
        return min(consumers, cdiv(p.seqlen_q - i * bm, WG_ROWS))

    def producer(cta):
        b, h, i = cta
        n, c_act = kv_block_count(p, i * bm, bm, bn), active(i)
        for c in range(c_act):
            yield Load(row_tile(p, q_src, b, h, i * bm + c * WG_ROWS, WG_ROWS), f"sQ{c}", SMEM, "tma", f"q{c}")
        hk = h // p.group

        def load(tensor, src, j):
            """Tile j of K or V into its ring slot once every consumer has released the slot's last use."""
            s, use = j % stages, j // stages
            if use:
                yield Wait(f"empty{tensor}{s}", c_act * use)
            yield Load(row_tile(p, src, b, h, j * bn, bn, kv=True), f"s{tensor}{s}", SMEM, "tma", f"full{tensor}{s}")
            if fp8:  # the block scale travels with its tile, on the same barrier
                yield Load(GTile(f"{tensor}scale", b, hk, j, 1, 0, 1, 4), f"{tensor.lower()}s{s}", SMEM, "tma",
                           f"full{tensor}{s}")

        # K runs one block ahead of V, as the consumers need K_j+1 (for S_j+1) before V_j (for P_j V_j).
        if n:
            yield from load("K", k_src, 0)
        for j in range(n):
            if j + 1 < n:
                yield from load("K", k_src, j + 1)
            yield from load("V", v_src, j)

    def consumer_program(c: int):
        def program(cta):
            b, h, i = cta
            if c >= active(i):
                return
            row0 = i * bm + c * WG_ROWS
            n = kv_block_count(p, i * bm, bm, bn)
            turns = iter(range(10**9))
            c_act = active(i)

            def take_turn():
                if c_act > 1:
                    yield Wait(f"turn{c}", next(turns) + (1 if c else 0))

            def pass_turn():
                if c_act > 1:
                    yield Arrive(f"turn{(c + 1) % c_act}")

            arrivals = 2 if fp8 else 1  # tile (+ its scale) per fill of a slot

            def qk(j, s):
                yield Gemm("S", f"sQ{c}", f"sK{s}", WG_ROWS, bn, d, SMEM, SMEM, "wgmma", dt, 4, trans_b=True,
                           a_scale="qs" if fp8 else None, b_scale=f"ks{s}" if fp8 else None, async_token="s")

            def pv(j):
                s = j % stages
                yield Wait(f"fullV{s}", arrivals * (j // stages + 1))
                yield Gemm("acc", f"P{j % 2}", f"sV{s}", WG_ROWS, d, bn, RMEM, SMEM, "wgmma", dt, 4,
                           accumulate=True, b_scale=f"vs{s}" if fp8 else None, async_token="o")

            def softmax(j):
                col0 = j * bn
                yield OnlineSoftmax("S", f"P{j % 2}", "m", "l", WG_ROWS, bn, p.scale,
                                    tile_mask(p, row0, col0, WG_ROWS, bn), dt, acc="acc", acc_cols=d,
                                    corr="corr", warps=4)

            yield Wait(f"q{c}", 1)
            if fp8:
                yield Load(GTile("Qscale", b, h, i, 1, 0, 1, 4), "qs", RMEM)
            yield Fill("acc", WG_ROWS, d, 0.0)
            yield Fill("m", WG_ROWS, 1, -math.inf)
            yield Fill("l", WG_ROWS, 1, 0.0)
            if n:
                yield Wait("fullK0", arrivals)
                yield from take_turn()
                yield from qk(0, 0)
                yield from pass_turn()
                yield GemmWait("s")
                yield Arrive("emptyK0")
                yield from softmax(0)
            for j in range(1, n):
                s = j % stages
                yield Wait(f"fullK{s}", arrivals * (j // stages + 1))
                yield from take_turn()
                yield from qk(j, s)
                yield from pv(j - 1)
                yield from pass_turn()
                yield GemmWait("s")
                yield Arrive(f"emptyK{s}")
                yield from softmax(j)
                yield GemmWait("o")
                yield Arrive(f"emptyV{(j - 1) % stages}")
                yield Rescale("acc", "corr", WG_ROWS, d, 4)
            if n:
                yield from take_turn()
                yield from pv(n - 1)
                yield from pass_turn()
                yield GemmWait("o")
                yield Arrive(f"emptyV{(n - 1) % stages}")
            yield from flash_epilogue(p, b, h, row0, WG_ROWS, "acc", "m", "l", 4, o_via="tma")

        return program

    roles = (Role("producer", 4, producer),) + tuple(
        Role(f"consumer{c}", 4, consumer_program(c)) for c in range(consumers))
    q_blocks = range(cdiv(p.seqlen_q, bm))
    order = list(reversed(q_blocks)) if p.causal else q_blocks  # causal: longest tiles first
    # Q blocks of one head are consecutive work tiles, so the CTAs running side by side share its K/V in L2.
    ctas = [(b, h, i) for b in range(p.batch) for h in range(p.heads) for i in order]
    algo = "v3-fp8" if fp8 else "v3"
    kernel = Kernel(f"flash_fwd_{name}", ctas, roles, smem_bytes(algo, p, t), v3_launch_registers(consumers),
                    persistent=True, classes=lambda c: (c[2],), uniform=not p.causal and not fp8)
    return Schedule(algo, p, t, (kernel,))
