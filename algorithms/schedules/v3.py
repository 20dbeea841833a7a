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
The grid is persistent: one CTA per SM slot takes work tiles in order (causal: longest tiles first across a
section of heads; causal problems with long heads run one CTA per tile): algorithms/tile_order.py.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, replace
from itertools import chain

from flashsim.errors import FlashsimError

from .. import closed_form as cf
from .. import splitkv, tile_order
from ..footprint import REG_OVERHEAD
from ..ir import FP32_BYTES as F32
from ..ir import (
    RMEM,
    SMEM,
    Arrive,
    BlockSetup,
    Fill,
    Gemm,
    GemmWait,
    GTile,
    Kernel,
    Load,
    OnlineSoftmax,
    Rescale,
    Role,
    RowMax,
    Schedule,
    Wait,
    causal_offset,
)
from ..mapping import Tiling
from ..oplists import Counted, OpList, interleave, periodic
from ..parts import cdiv, flash_epilogue, gemm_dtype, kv_block_count, lse_tensor, row_tile, tile_mask
from ..problem import Problem
from ..record import Algorithm
from ..splitkv import (
    LSE_PARTS,
    O_PARTS,
    combine_kernel,
    combine_nest,
    partial_epilogue,
    split_range,
    workspace_bytes,
    workspace_shapes,
)
from .forward_code import wgmma_loop_code

# Rounds of dependent parameter reads on the producer's way to a tile's first copy: our v3's SASS reads the
# constant bank in three groups (ULDC), each after a branch or division that the group before fed
SETUP_PARAM_ROUNDS = 3
# (tensor, K/V head, ring phase) whose load ops a V3 schedule keeps for reuse (its tiles of a head issue the
# same ones)
KV_HEADS_KEPT = 64
WG_ROWS = 64  # rows of a wgmma accumulator: one warpgroup's share of block_m
# Register budgets after setmaxnreg (FA3): consumers 240 / producer 24 with 1-2 consumer warpgroups,
# 160 / 32 with 3.
V3_CONSUMER_REGS = {1: 240, 2: 240, 3: 160}
V3_PRODUCER_REGS = {1: 24, 2: 24, 3: 32}
# The public FA3 tiles, (block_m, block_n), two stages; causal and fp8 differ where FA3 differs.
# build()'s switches for the FA3 paper's ablation (each on by default, as FA3 ships).
ABLATION_SWITCHES = ("warp_specialization", "pingpong", "intra_overlap")
# d96: FA3's 192x144 stages P in shared memory for the PV GEMM; this schedule (and our kernel) keeps P in
# registers, where S, P and O of 192x144 overflow three consumers' 160 registers, so block_n is 112.
_FA3_TILES = {32: (192, 192), 64: (192, 192), 96: (192, 112), 128: (128, 176), 192: (128, 128), 256: (128, 80)}
_FA3_CAUSAL = {64: (192, 128), 128: (128, 128)}
_FA3_FP8 = {32: (192, 160), 64: (192, 160), 96: (192, 128), 128: (128, 224), 192: (128, 160), 256: (128, 128)}


def v3_launch_registers(consumers: int) -> int:
    """Registers per thread a V3 block launches with: setmaxnreg then moves them between warpgroups."""
    total = consumers * V3_CONSUMER_REGS.get(consumers, 0) + V3_PRODUCER_REGS.get(consumers, 0)
    return total // (consumers + 1)


@dataclass(frozen=True)
class BlockState:
    """What a persistent block carries from tile to tile: the tiles it ran (tile n fills Q buffer n % 2 in
    the two-Q-buffer kernel, the one buffer otherwise), the K/V blocks it streamed through the ring (the
    ring's slot and fill count run on across tiles), the Q slices loaded into each buffer for each consumer,
    and the ping-pong passes each consumer's turn barrier received (turns run on across tiles)."""

    tiles: int = 0
    kv_blocks: int = 0
    q_loads: tuple[tuple[int, ...], ...] = ()
    turns: tuple[int, ...] = ()


def warps_for(block_m: int) -> int:
    return 4 * (block_m // WG_ROWS + 1)  # one producer warpgroup + block_m/64 consumers


def mapper(p: Problem, profile, fp8: bool = False) -> Tiling:
    """FA3's tiles for the head dim (fp8: its fp8 kernels')."""
    d = p.headdim
    if fp8:
        bm, bn = _FA3_FP8[d]
    elif p.causal and d in _FA3_CAUSAL:
        bm, bn = _FA3_CAUSAL[d]
    else:
        bm, bn = _FA3_TILES[d]
    return Tiling(bm, bn, warps_for(bm), 2)


def smem_bytes(p: Problem, t: Tiling) -> int:
    return (t.block_m + 2 * t.block_n * t.stages) * p.headdim * p.elem_bytes  # Q once, a ring of K and V tiles


def registers(p: Problem, t: Tiling) -> int:
    """A consumer warpgroup: S and O accumulators for 64 rows (P is converted in place of S); its addressing
    state is lighter than a plain kernel's since the producer computes the copy coordinates."""
    s = WG_ROWS * t.block_n // 128
    o = WG_ROWS * p.headdim // 128
    return REG_OVERHEAD - 8 + s + o


def register_budget(t: Tiling, profile) -> tuple[int, int]:
    consumers = t.block_m // WG_ROWS
    return V3_CONSUMER_REGS.get(consumers, 0), v3_launch_registers(consumers)


def check_tiling(p: Problem, t: Tiling, algo: str = "v3") -> None:
    if t.stages < (1 if t.pipeline == "serial" else 2):
        raise FlashsimError(f"{algo} needs at least 2 K/V stages (QK^T of block j overlaps PV of block j-1; "
                            f"--pipeline serial runs on 1), got {t.stages}")
    consumers = t.block_m // WG_ROWS
    if t.warps != warps_for(t.block_m):
        raise FlashsimError(f"{algo} with block_m={t.block_m} runs {consumers} consumer warpgroups and one "
                            f"producer: warps must be {warps_for(t.block_m)}, got {t.warps}")


def complete_tiling(t: Tiling) -> Tiling:
    return replace(t, warps=warps_for(t.block_m))


def kv_range(p: Problem, t: Tiling, cta: tuple) -> tuple[int, int]:
    """(first K/V block, blocks) a work tile visits: its Q block's visible blocks, or its split's share."""
    n = kv_block_count(p, cta[2] * t.block_m, t.block_m, t.block_n)
    if t.splits == 1:
        return 0, n
    return split_range(cdiv(p.seqlen_k, t.block_n), n, t.splits, cta[3])


def build(p: Problem, t: Tiling, fp8: bool = False, name: str = "v3", warp_specialization: bool = True,
          pingpong: bool = True, intra_overlap: bool = True, bookkeeping: bool = False,
          setup: bool = False) -> Schedule:
    """The FA3 schedule; each of the three switches off gives the kernel without that technique (the FA3
    paper's ablation): the same loads, GEMMs and softmax, only ordered and synchronised differently.
    bookkeeping: each consumer's K/V step starts with a stretch carrying the instructions its loop issues
    beyond the lowered ops (forward_code.WGMMA_UNLOWERED, for the kernels measured), which the
    instruction-issue model charges (simulate asks for them with the profile's issue_model 1).
    setup: the producer's set-up before each tile's first copy (ir.BlockSetup; simulate asks for it with the
    profile's block_setup_model 1)."""
    bm, bn, d, stages, splits = t.block_m, t.block_n, p.headdim, t.stages, t.splits
    consumers = bm // WG_ROWS
    dt = gemm_dtype(p)
    elem = 1 if fp8 else p.elem_bytes
    # The kernel with two Q buffers (algorithms/tile_order.prefetch): a persistent grid whose blocks take the
    # next tile from a counter as their producer finishes loading the last one, a second Q buffer in shared
    # memory. Its producer loads the next tile's Q, and its first K/V blocks as the ring frees, while the
    # consumers finish the current tile: the block's roles run on from tile to tile (Kernel.carry), the ring's
    # slots, the Q buffers and the ping-pong turns counted across tiles (BlockState).
    # cuDNN's kernel (Tiling pipeline "serial") has one Q buffer, which its producer refills once the consumers
    # have left the tile's K/V loop (its SASS, experiments/results/h200/session21/cudnn-sass/)
    prefetch = not fp8 and splits == 1 and t.pipeline != "serial" \
        and tile_order.prefetch(p.causal, p.seqlen_k, d, elem, bm, bn)
    persistent = prefetch or tile_order.persistent(p.causal, p.seqlen_k, p.headdim, elem, bm)
    q_bufs = 2 if prefetch else 1
    # Every persistent block runs on from tile to tile, one Q buffer or two: its producer waits only for the
    # Q buffer's release (the consumers' last S GEMMs of the tile that used it last) and the ring's slots, so
    # the next tile's Q and first K/V blocks load under the current tile's last PV GEMM and epilogue.
    carried = persistent and splits == 1 and warp_specialization and pingpong and intra_overlap
    # cuDNN's order (Tiling.pipeline): each GEMM waited for at once, the turn held through each softmax
    serial = t.pipeline == "serial"
    if serial and not warp_specialization:
        raise FlashsimError("--pipeline serial is cuDNN's warp-specialized loop (a producer warpgroup loads K and V); "
                            "it takes no --no-warp-specialization")
    step_code = wgmma_loop_code(t.pipeline, p.headdim, bm, bn, t.warps) \
        if bookkeeping and not fp8 and splits == 1 and warp_specialization and pingpong and intra_overlap else None
    start = BlockState(q_loads=((0,) * consumers,) * 2, turns=(0,) * consumers)
    q_src, k_src, v_src = ("Qq", "Kq", "Vq") if fp8 else ("Q", "K", "V")

    # ops the loops issue alike are made once and reused (ops are immutable values): a role's loop then
    # costs no allocation per step
    made: dict = {}

    waits: defaultdict = defaultdict(dict)  # barrier -> target -> its Wait

    def wait(barrier: str, target: int) -> Wait:
        of = waits[barrier]
        op = of.get(target)
        if op is None:
            op = of[target] = Wait(barrier, target)
        return op

    def once(key: tuple, make):
        op = made.get(key)
        if op is None:
            op = made[key] = make()
        return op

    def active(i: int) -> int:
        """Consumers with rows to compute in Q block i (the last block may be ragged)."""
        return min(consumers, cdiv(p.seqlen_q - i * bm, WG_ROWS))

    def q_buffer(c: int, at: BlockState) -> tuple[str, str]:
        """(buffer, barrier) of consumer c's Q slice: tile n uses buffer n % q_bufs (the first alone without
        a carried state)."""
        q = at.tiles % q_bufs
        return (f"sQ{c}", f"q{c}") if not q else (f"sQ{c}'", f"q{c}'")

    def load_q(cta, c, at: BlockState):
        b, h, i = cta[:3]
        buffer, barrier = q_buffer(c, at)
        yield Load(row_tile(p, q_src, b, h, i * bm + c * WG_ROWS, WG_ROWS), buffer, SMEM, "tma", barrier)

    # barrier and buffer names of the ring's slots, made once
    ring_names = {(tensor, s): (f"empty{tensor}{s}", f"s{tensor}{s}", f"full{tensor}{s}")
                  for tensor in ("K", "V") for s in range(stages)}

    arrivals = 2 if fp8 else 1  # arrivals per fill of a slot: the tile (and its block scale)

    def ring_load(src: str, tensor: str, b: int, hk: int, phase: int, block: int) -> tuple:
        """K/V block `block` loaded into its ring slot (phase: the slot of block 0), with its block scale."""
        s = (phase + block) % stages
        _, buffer, full = ring_names[tensor, s]
        load = Load(row_tile(p, src, b, hk * p.group, block * bn, bn, kv=True), buffer, SMEM, "tma", full)
        if not fp8:
            return (load,)
        # the block scale travels with its tile, on the same barrier
        return load, Load(GTile(f"{tensor}scale", b, hk, block, 1, 0, 1, 4), f"{tensor.lower()}s{s}", SMEM, "tma", full)

    # A head's K/V loads recur in every tile of the head, by ring slot: made once (ops are immutable values)
    # along the head's blocks, for at most KV_HEADS_KEPT (tensor, head, slot phase) at a time
    kv_loads: dict = {}

    def head_loads(src: str, tensor: str, b: int, hk: int, phase: int) -> Counted:
        key = (src, b, hk, phase)
        loads = kv_loads.get(key)
        if loads is None:
            if len(kv_loads) >= KV_HEADS_KEPT:
                kv_loads.clear()
            loads = kv_loads[key] = Counted(lambda block: ring_load(src, tensor, b, hk, phase, block))
        return loads

    # the wait for ring position r's slot to be released (every consumer warpgroup releases each fill; the
    # last with rows arrives for the others): none for the first fill of each slot
    empties = {tensor: Counted(lambda r, tensor=tensor: (wait(ring_names[tensor, r % stages][0],
                                                              consumers * (r // stages)),) if r >= stages else ())
               for tensor in ("K", "V")}

    # the consumers' waits for ring position r's fill, and consumer c's for its k-th turn (counted from the
    # block's first tile)
    fulls = {tensor: Counted(lambda r, tensor=tensor: wait(ring_names[tensor, r % stages][2],
                                                           arrivals * (r // stages + 1)))
             for tensor in ("K", "V")}
    turn_waits = [Counted(lambda k, c=c: wait(f"turn{c}", k + (1 if c else 0))) for c in range(consumers)]

    def kv_steps(cta, at: BlockState, first: int, n: int) -> list:
        """Per step j of a tile's `n` K/V blocks from `first` on, the K/V loads it issues (a tuple of tuples of
        ops): K_0 first, then K_j+1 and V_j, as the consumers need K_j+1 (for S_j+1) before V_j (for P_j V_j);
        each into its ring slot once every consumer has released it. The ring's slot and fill count run on
        from the block's earlier tiles (`at`)."""
        if not n:
            return []
        b, hk, ring = cta[0], cta[1] // p.group, at.kv_blocks
        phase = (ring - first) % stages
        k, v = head_loads(k_src, "K", b, hk, phase), head_loads(v_src, "V", b, hk, phase)
        if serial:  # cuDNN's producer: K_j then V_j, each once its slot is released (its SASS, session 50)
            return list(zip(empties["K"].slice(ring, ring + n), k.slice(first, first + n),
                            empties["V"].slice(ring, ring + n), v.slice(first, first + n), strict=True))
        # per step: (empty K wait, K_j+1, empty V wait, V_j), the last step without K
        steps = list(zip(empties["K"].slice(ring + 1, ring + n) + [()], k.slice(first + 1, first + n) + [()],
                         empties["V"].slice(ring, ring + n), v.slice(first, first + n), strict=True))
        steps[0] = (empties["K"][ring], k[first], *steps[0])
        return steps

    def kv_list(cta, at: BlockState, first: int, n: int) -> OpList:
        """kv_steps' ops as one list, marked where it repeats every turn of the ring but for its counts
        (OpList.repeat): from the first step whose slot waits both exist (the ring's first turn has none) to
        the last whose K/V blocks are whole (a ragged last block has other rows), the non-serial loop's first
        step (K_0 too) and last (V alone) left out. The loop skip then makes one turn's signatures, not one per op."""
        steps = kv_steps(cta, at, first, n)
        ops = OpList(chain.from_iterable(chain.from_iterable(steps)))
        ring, whole = at.kv_blocks, p.seqlen_k // bn  # blocks [0, whole) have bn rows
        if serial:  # step j: K_j and V_j, each after its slot's release
            lo, hi = max(0, stages - ring), min(n, whole - first)
        else:  # step j: K_j+1 and V_j
            lo, hi = max(1, stages - ring), min(n - 1, whole - first - 1)
        if hi - lo >= 2 * stages:
            start = sum(map(len, chain.from_iterable(steps[:lo])))
            step = sum(map(len, steps[lo]))
            ops.repeat = (start, start + (hi - lo) * step, stages * step)
        return ops

    # The producer's set-up (ir.BlockSetup), as our kernel runs it (kernels/v3.cu): on the block's first tile,
    # one thread initialises two barriers per Q buffer (full, empty) and four per ring stage (K and V, full and
    # empty), then setmaxnreg; on every tile, the tile from the counter (the two-Q-buffer kernel) and its
    # coordinates, after SETUP_PARAM_ROUNDS rounds of parameter reads (cold on the first tile)
    if setup and warp_specialization:
        mbarriers = 2 * q_bufs + 4 * stages
        setups = (BlockSetup(mbarriers, True, SETUP_PARAM_ROUNDS, True, True, prefetch),
                  BlockSetup(0, False, SETUP_PARAM_ROUNDS, False, True, prefetch))
    else:
        setups = None

    def producer(cta, state=None):
        at = state or start
        first, n = kv_range(p, t, cta)
        c_act = active(cta[2])
        if setups:
            yield setups[at.tiles > 0]
        if carried and at.tiles >= q_bufs:  # the buffer's last tile has released it (its last S GEMMs are done)
            yield wait(f"qempty{at.tiles % q_bufs}", consumers * (at.tiles // q_bufs))
        for c in range(c_act if n or splits == 1 else 0):
            yield from load_q(cta, c, at)
        # the tile's K/V loads as one list: the loop skip slices the ops it leaves out from it
        yield from kv_list(cta, at, first, n)

    def carry(state, cta) -> BlockState:
        """The block's state after tile `cta` (the counts its programs add to the ring, Q and turn barriers)."""
        at = state or start
        n, c_act = kv_range(p, t, cta)[1], active(cta[2])
        q_loads = [list(x) for x in at.q_loads]
        for c in range(c_act):
            q_loads[at.tiles % q_bufs][c] += 1
        turns = list(at.turns)
        if c_act > 1 and n:
            for c in range(c_act):  # each consumer passes the turn once per K/V block and once for the last PV
                turns[(c + 1) % c_act] += n + (0 if serial else 1)
        return BlockState(at.tiles + 1, at.kv_blocks + n, tuple(map(tuple, q_loads)), tuple(turns))

    def serial_loop(c, ring, t0, pingponged, pass_op, qk_ops, pv_ops, s_done, o_done, empty_k, empty_v, rescale,
                    softmax, unmasked, n):
        """A tile's K/V loop in cuDNN's order (Tiling.pipeline "serial"): per block j, S_j issued and waited
        for, K_j's slot released, S_j's row max taken; once V_j has landed the consumer takes its ping-pong turn
        for the rest of the softmax and O's rescale (from the second block on: before it O holds nothing),
        passes it, then issues P_j V_j and waits for it, V_j's slot released (cuDNN's SASS:
        experiments/results/h200/session52/). One list, column by column, as the overlapped loop."""
        def slot(by_slot):
            return periodic(lambda j: by_slot[(ring + j) % stages], 0, n, stages)

        def same(op):
            return [op] * n

        pvs = periodic(lambda j: pv_ops[j % 2][(ring + j) % stages], 0, n, 2 * stages)
        masked = [softmax(j) for j in range(unmasked, n)]  # (row max, rest of the softmax) of each masked block
        maxes = periodic(lambda j: softmax(j)[0], 0, unmasked, 1) + [ops[0] for ops in masked]
        softmaxes = periodic(lambda j: softmax(j)[1], 0, unmasked, 2) + [ops[1] for ops in masked]
        # the turn guards the softmax after its row max and O's rescale: taken once V_j has landed, passed before
        # P_j V_j
        turn = [turn_waits[c].slice(t0, t0 + n)] if pingponged else []
        passed = [same(pass_op)] if pingponged else []
        columns = [fulls["K"].slice(ring, ring + n), slot(qk_ops), same(s_done), slot(empty_k), maxes,
                   fulls["V"].slice(ring, ring + n), *turn, softmaxes, [None, *same(rescale)[1:]], *passed, pvs,
                   same(o_done), slot(empty_v)]
        if step_code is not None:
            columns.insert(0, same(step_code))
        head = [column[0] for column in columns if column[0] is not None]
        return interleave([column[1:] for column in columns], head, math.lcm(2, stages), unmasked - 1)

    def consumer_program(c: int):
        def program(cta, state=None):
            at = state or start
            b, h, i = cta[:3]
            if c >= active(i):
                return
            row0 = i * bm + c * WG_ROWS
            first, n = kv_range(p, t, cta)
            t0 = at.turns[c]  # passes this turn barrier received in earlier tiles
            c_act = active(i)
            q_buf, q_bar = q_buffer(c, at)
            # the ring's slot and fill of the tile's block j, counted from the block's earlier tiles
            ring = at.kv_blocks
            # every consumer warpgroup of the kernel releases each slot: the last one with rows here arrives
            # for those without (only a ragged last query block has any)
            weight = 1 + (consumers - c_act if c == c_act - 1 else 0)
            # Without a producer, each consumer loads its own Q slice and the first one issues the shared
            # K/V loads one step ahead, stalling on the ring's empty slots itself.
            loads_kv = not warp_specialization and c == 0

            # the loop's ops that do not move with the step, made once: by ring slot (and P buffer)
            pingponged = pingpong and c_act > 1
            pass_op = once((Arrive, c, c_act), lambda: Arrive(f"turn{(c + 1) % c_act}")) if pingponged else None
            qk_ops = [once(("qk", q_buf, s), lambda s=s: Gemm(
                "S", q_buf, f"sK{s}", WG_ROWS, bn, d, SMEM, SMEM, "wgmma", dt, 4, trans_b=True,
                a_scale="qs" if fp8 else None, b_scale=f"ks{s}" if fp8 else None, async_token="s"))
                for s in range(stages)]
            pv_ops = [[once(("pv", x, s), lambda x=x, s=s: Gemm(
                "acc", f"P{x}", f"sV{s}", WG_ROWS, d, bn, RMEM, SMEM, "wgmma", dt, 4,
                accumulate=True, b_scale=f"vs{s}" if fp8 else None, async_token="o")) for s in range(stages)]
                for x in range(2)]
            s_done, o_done = once((GemmWait, "s"), lambda: GemmWait("s")), once((GemmWait, "o"), lambda: GemmWait("o"))
            empty_k = [once((Arrive, "emptyK", s, weight), lambda s=s: Arrive(f"emptyK{s}", weight))
                       for s in range(stages)]
            empty_v = [once((Arrive, "emptyV", s, weight), lambda s=s: Arrive(f"emptyV{s}", weight))
                       for s in range(stages)]
            rescale = once((Rescale,), lambda: Rescale("acc", "corr", WG_ROWS, d, 4))

            def pv(j) -> tuple:
                return fulls["V"][ring + j], pv_ops[j % 2][(ring + j) % stages]

            # K/V tiles ending at or before `visible` need no mask (tile_mask's test, made once per tile)
            visible = p.seqlen_k
            if p.causal:
                visible = min(visible, row0 + causal_offset(p.causal_align, p.seqlen_q, p.seqlen_k) + 1)

            def softmax(j):
                """Block j's online softmax; in cuDNN's loop (serial), its row max and the rest apart."""
                col0 = (first + j) * bn
                mask = None if col0 + bn <= visible else tile_mask(p, row0, col0, WG_ROWS, bn)

                def online(mask=mask, max_in=None):  # after a RowMax (max_in), S is masked already
                    return OnlineSoftmax("S", f"P{j % 2}", "m", "l", WG_ROWS, bn, p.scale, mask, dt, acc="acc",
                                         acc_cols=d, corr="corr", warps=4, max_in=max_in)

                def row_max():
                    return RowMax("S", "m", "mx", WG_ROWS, bn, p.scale, mask, warps=4)

                if not serial:
                    return online() if mask is not None else once((OnlineSoftmax, j % 2), online)
                rest = once((OnlineSoftmax, "mx", j % 2), lambda: online(None, "mx"))
                return (row_max() if mask is not None else once((RowMax,), row_max)), rest

            if not warp_specialization and (n or splits == 1):
                yield from load_q(cta, c, at)
            if n or splits == 1:  # an empty split loads no Q: it only writes an empty partial
                yield Wait(q_bar, at.q_loads[at.tiles % q_bufs][c] + 1)
            if fp8:
                yield Load(GTile("Qscale", b, h, i, 1, 0, 1, 4), "qs", RMEM)
            yield Fill("acc", WG_ROWS, d, 0.0)
            yield Fill("m", WG_ROWS, 1, -math.inf)
            yield Fill("l", WG_ROWS, 1, 0.0)
            # the K/V loop as one list, made before it runs (its ops depend on nothing it does): the loop
            # skip slices the ops it leaves out from it instead of resuming this program for each
            if n and serial:
                yield from serial_loop(c, ring, t0, pingponged, pass_op, qk_ops, pv_ops, s_done, o_done, empty_k,
                                       empty_v, rescale, softmax, max(1, min(n, visible // bn - first)), n)
            elif n:
                s0, pp = ring % stages, [pass_op] if pingponged else []
                # step 0: S_0 and its softmax
                head = [*([step_code] if step_code else []), fulls["K"][ring],
                        *([turn_waits[c][t0]] if pingponged else []), qk_ops[s0], *pp, s_done, empty_k[s0], softmax(0)]

                # steps 1..n-1, column by column (algorithms/oplists.py)
                def slot(by_slot, back=0):
                    return periodic(lambda j: by_slot[(ring + j - back) % stages], 1, n, stages)

                def same(op):
                    return [op] * (n - 1)

                unmasked = max(1, min(n, visible // bn - first))  # steps before the first masked tile
                gemms = [slot(qk_ops), fulls["V"].slice(ring, ring + n - 1),
                         periodic(lambda j: pv_ops[(j - 1) % 2][(ring + j - 1) % stages], 1, n, 2 * stages)]
                if not intra_overlap:  # S_j after P_j-1 V_j-1 on the in-order tensor pipe
                    gemms = gemms[1:] + gemms[:1]
                columns = [*([same(step_code)] if step_code else []), fulls["K"].slice(ring + 1, ring + n),
                           *([turn_waits[c].slice(t0 + 1, t0 + n), *gemms, same(pass_op)] if pingponged else gemms)]
                release_v = [same(o_done), slot(empty_v, 1)]  # P_j-1 V_j-1 done: V_j-1's slot is free
                softmaxes = periodic(softmax, 1, unmasked, 2) + [softmax(j) for j in range(unmasked, n)]
                columns += ([] if intra_overlap else release_v) + [same(s_done), slot(empty_k), softmaxes]
                columns += (release_v if intra_overlap else []) + [same(rescale)]
                if loads_kv:  # each step's K/V loads go first
                    steps = zip(kv_steps(cta, at, first, n), [head, *zip(*columns, strict=True)], strict=True)
                    yield from [op for loads, step in steps for op in chain(chain.from_iterable(loads), step)]
                else:  # the steps before the first masked one repeat every slot and P buffer
                    yield from interleave(columns, head, math.lcm(2, stages), unmasked - 1)
            if carried:  # every S GEMM of the tile has read Q: its buffer may take the next tile that uses it
                buf = at.tiles % q_bufs
                yield once((Arrive, "qempty", buf, weight), lambda: Arrive(f"qempty{buf}", weight))
            if n and not serial:
                if pingponged:
                    yield turn_waits[c][t0 + n]
                yield from pv(n - 1)
                if pingponged:
                    yield pass_op
                yield o_done
                yield empty_v[(ring + n - 1) % stages]
            if splits > 1:
                yield from partial_epilogue(p, b, h, row0, WG_ROWS, cta[3], "acc", "m", "l", 4)
            else:
                # O by TMA from shared memory as FA3 does, or (t.o_store) stored from the fragments
                yield from flash_epilogue(p, b, h, row0, WG_ROWS, "acc", "m", "l", 4, o_via=t.o_store)

        return program

    roles = ((Role("producer", 4, producer),) if warp_specialization else ()) + tuple(
        Role(f"consumer{c}", 4, consumer_program(c)) for c in range(consumers))
    # The kernels' tile order and grid (algorithms/tile_order.py): head by head without a mask, so the CTAs
    # running side by side share one head's K/V in L2; causal, longest tiles first across a section of heads.
    # Split-KV: a Q block's splits are consecutive work tiles.
    section = tile_order.section_pairs(p.causal, p.seqlen_k, p.headdim, elem, p.group, p.batch * p.heads)
    ctas = [(pair // p.heads, pair % p.heads, i, *s)
            for pair, i in tile_order.tiles(p.batch * p.heads, cdiv(p.seqlen_q, bm), section)
            for s in ([(x,) for x in range(splits)] if splits > 1 else [()])]
    algo = "v3-fp8" if fp8 else "v3"
    smem = smem_bytes(p, t) + (bm * d * p.elem_bytes if prefetch else 0)  # the second Q buffer
    kernel = Kernel(f"flash_fwd_{name}" + ("_splitkv" if splits > 1 else ""), ctas, roles, smem,
                    v3_launch_registers(consumers), classes=lambda c: c[2:],
                    persistent=persistent, uniform=not p.causal and not fp8 and splits == 1,
                    carry=carry if carried else None, tile_counter=prefetch)
    if splits == 1:
        return Schedule(algo, p, t, (kernel,))
    return Schedule(algo, p, t, (kernel, combine_kernel(p, splits)), shapes=workspace_shapes(p, splits))


def nest(x: cf.Dims, fp8: bool = False) -> cf.KernelNest:
    """The attention kernel's nest (fp8: on the quantised operands, with their block scales)."""
    BH, Nq, d, e, eo, eg, bm, bn = x.BH, x.Nq, x.d, x.e, x.eo, x.eg, x.bm, x.bn
    tr, wg, S = x.Tr, WG_ROWS, x.t.splits
    q, k, v = ("Qq", "Kq", "Vq") if fp8 else ("Q", "K", "V")
    cons = [min(bm // wg, cdiv(Nq - i * bm, wg)) for i in range(tr)]  # warpgroups with rows in block i
    # (q-block, first kv block, kv blocks) of every work tile: one per q-block, or one per split of it
    tiles = [(i, *(split_range(x.Tc, x.visible(i), S, s) if S > 1 else (0, x.visible(i))))
             for i in range(tr) for s in range(S)]
    n = [m for _, _, m in tiles]
    C = BH * sum(cons) * S
    P = BH * sum(n)
    CP = BH * sum(cons[i] * m for i, _, m in tiles)  # (warpgroup, kv block) steps
    kv = BH * sum(x.kv_rows_from(f, m) for _, f, m in tiles) * d * e
    masked = BH * sum(x.masked_from(i * bm + c * wg, f, m) for i, f, m in tiles for c in range(cons[i]))
    rescales = BH * sum(cons[i] * max(0, m - 1) for i, _, m in tiles)
    q_rows = BH * sum(x.rows(i) for i, _, m in tiles if m or S == 1)
    rk = min(bn, x.Nk)
    soft = 4 * wg * bn + wg * (2 + d)
    serial = x.t.pipeline == "serial"  # cuDNN's loop: S_j waited at once, then its row max (schedule above)

    scales = [cf.load("load Kscale_j, Vscale_j", "Kscale", F32, P * F32, P),
              cf.load("", "Vscale", F32, P * F32, P)] if fp8 else []
    producer = [
        cf.load("load Q_i (TMA, 64 rows per consumer)", q, min(bm, Nq) * d * e, q_rows * d * e, BH * tr * S),
        cf.Loop(f"j in 0..{max(n)}  kv-block " + ("(K_j, then V_j, as their slots free)" if serial
                                                   else f"(ring of {x.t.stages} slots)"), max(n), P, [
            cf.load("load K_j (TMA)", k, rk * d * e, kv, P),
            cf.load("load V_j (TMA)", v, rk * d * e, kv, P),
            *cf.merged(scales),
        ]),
    ]
    kv_loop = [
        cf.gemm("S = Q_c K_j^T  wgmma", "wgmma", x.dt, wg, bn, d, CP, (q, wg * d * eg), (k, bn * d * eg),
              ("Kscale", F32) if fp8 else None),
        cf.work("row max of S_j, then softmax in turn" if serial
                else "softmax (overlaps the previous PV)", CP, wg * bn + wg, soft,
              soft * CP + cf.MASK_OPS_PER_ELEMENT * masked * wg * bn),
        cf.gemm("O += P V_j  wgmma", "wgmma", x.dt, wg, d, bn, CP, None, (v, bn * d * eg),
              ("Vscale", F32) if fp8 else None),
    ]
    if rescales:
        kv_loop.append(cf.when("j > 0", cf.work("O *= e^(m_old - m), deferred", rescales, 0, wg * d)))
    consumer = [
        *([cf.load("load Qscale_i", "Qscale", F32, C * F32, C, smem=False)] if fp8 else []),
        cf.Loop(f"j in 0..{max(n)}  kv-block", max(n), CP, kv_loop,
             note="causal: to the diagonal" if x.p.causal else ""),
        cf.work("O /= l, LSE = m + log l", C, 2 * wg, wg * d + wg),
        *([cf.store("store O_c,s (fp32 workspace)", O_PARTS, min(wg, Nq) * d * F32, S * BH * Nq * d * F32, C),
           cf.store("store LSE_c,s", LSE_PARTS, min(wg, Nq) * F32, S * BH * Nq * F32, C)] if S > 1 else
          [cf.store("store O_c (TMA)", "O", min(wg, Nq) * d * eo, BH * Nq * d * eo, C, tma=True),
           cf.store("store LSE_c", "LSE", min(wg, Nq) * F32, BH * Nq * F32, C)]),
    ]
    body = [
        cf.Loop("producer warpgroup (1)", 1, BH * tr * S, producer),
        cf.Loop(f"c in 0..{bm // wg}  consumer warpgroup (in parallel)", bm // wg, C, consumer),
    ]
    if S > 1:
        body = [cf.Loop(f"s in 0..{S}  kv split (work tile)", S, BH * tr * S, body, grid=True)]
    name = ("flash_fwd_v3_fp8" if fp8 else "flash_fwd_v3") + ("_splitkv" if S > 1 else "")
    return cf.KernelNest(name, BH * tr * S, 32 * x.w, [cf.bh_loop(x, [
        cf.Loop(f"i in 0..{tr}  q-block" + ("" if S > 1 else " (work tile)"), tr, BH * tr, body, grid=True)])],
        persistent=True)


def loop_nest(x: cf.Dims) -> list[cf.KernelNest]:
    return [nest(x)] + ([combine_nest(x.p, x.t.splits)] if x.t.splits > 1 else [])


def flash_tensors(p: Problem, t: Tiling) -> dict[str, int]:
    """LSE, and the split-KV workspace when the K/V range is split."""
    return {**lse_tensor(p), **workspace_bytes(p, t.splits)}


def auto_splits(p: Problem, t: Tiling, profile) -> int:
    """FA2's heuristic over this schedule's work tiles (FA3's own, hopper/heuristics.h, is the same rule with
    an exception for K/V heads larger than L2, not modelled)."""
    return splitkv.auto_splits(p, cdiv(p.seqlen_q, t.block_m), profile)


ALGORITHM = Algorithm(
    name="v3",
    summary="FlashAttention-3: TMA producer warpgroup, wgmma consumers in ping-pong, persistent grid",
    build=build,
    mapper=mapper,
    smem_bytes=smem_bytes,
    registers=registers,
    loop_nest=loop_nest,
    hbm_tensors=flash_tensors,
    auto_splits=auto_splits,
    why="As V2: K and V are read once per q-block (Tr = {tr} passes), now by TMA into a ring of {stages} "
        "shared-memory slots that the producer fills while the consumers compute.",
    mma="wgmma",
    features=("tma", "wgmma"),
    register_budget=register_budget,
    check_tiling=check_tiling,
    complete_tiling=complete_tiling,
    options=(*ABLATION_SWITCHES, "bookkeeping", "setup"),
)
