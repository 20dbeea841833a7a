"""The ldsm_form sweep: how ldmatrix loads and mma.sync products share a warp's k-step, across the loads per
product, the bytes per load, the warps per SM, and the exact k-steps of our v2 forward and backward GEMMs
(kernels/microbench/ldsm_form.cu says what each kernel issues).

Each point is one launch of one block per SM with `warps` warps; its number is the median over blocks of the
block's clock64 cycles per warp k-step. Points that the SM cannot hold (registers) are listed as skipped.
"""

from __future__ import annotations

import numpy as np

# form kernels: name -> (ldmatrix per warp k-step, 8x8 matrices per ldmatrix (0: ld.shared.v4 instead, 512 bytes
# per warp like an x4), .trans, m16n8k16 per k-step,
# whether the products read the loaded fragments; if not, the loads are folded and the products run on held ones)
FORM_KERNELS: dict[str, tuple[int, int, bool, int, bool]] = {
    "form_l0x4_m8": (0, 4, False, 8, True),
    "form_l1x4_m8": (1, 4, False, 8, True),
    "form_l2x4_m8": (2, 4, False, 8, True),
    "form_l3x4_m8": (3, 4, False, 8, True),
    "form_l4x4_m8": (4, 4, False, 8, True),
    "form_l6x4_m8": (6, 4, False, 8, True),
    "form_l8x4_m8": (8, 4, False, 8, True),
    "form_l2x4t_m8": (2, 4, True, 8, True),
    "form_l4x4t_m8": (4, 4, True, 8, True),
    "form_l2x2_m8": (2, 2, False, 8, True),
    "form_l4x2_m8": (4, 2, False, 8, True),
    "form_l8x2_m8": (8, 2, False, 8, True),
    "form_l4x1_m8": (4, 1, False, 8, True),
    "form_l8x1_m8": (8, 1, False, 8, True),
    "form_l4x4_m16": (4, 4, False, 16, True),
    "form_l8x4_m16": (8, 4, False, 16, True),
    "form_l2x4_m16": (2, 4, False, 16, True),
    "form_l4v4_m8": (4, 0, False, 8, True),
    "form_l4v4_m0": (4, 0, False, 0, True),
    "form_l2x4i_m8": (2, 4, False, 8, False),
    "form_l4x4i_m8": (4, 4, False, 8, False),
    "form_l8x4i_m8": (8, 4, False, 8, False),
    "form_l1x4_m0": (1, 4, False, 0, True),
    "form_l2x4_m0": (2, 4, False, 0, True),
    "form_l4x4_m0": (4, 4, False, 0, True),
    "form_l8x4_m0": (8, 4, False, 0, True),
    "form_l4x4t_m0": (4, 4, True, 0, True),
    "form_l8x2_m0": (8, 2, False, 0, True),
    "form_l8x1_m0": (8, 1, False, 0, True),
}

# tile kernels: name -> (m16 A fragments, n16 B fragments, A from: "regs" | "ldsm" | "ldsm.trans", B .trans)
TILE_KERNELS: dict[str, tuple[int, int, str, bool]] = {
    "tile_fwd_s_bn128": (2, 8, "ldsm", False),
    "tile_fwd_s_bn64": (2, 4, "ldsm", False),
    "tile_fwd_pv_d64": (2, 4, "regs", True),
    "tile_fwd_pv_d128": (2, 8, "regs", True),
    "tile_bwd_nn_32x32": (2, 2, "ldsm", False),
    "tile_bwd_tt_32x32": (2, 2, "ldsm.trans", True),
    "tile_bwd_tt_32x64": (2, 4, "ldsm.trans", True),
    "tile_bwd_nt_32x32": (2, 2, "ldsm", True),
    "tile_fwd_s_m16_bn64": (1, 4, "ldsm", False),
    "tile_fwd_pv_m16_d128": (1, 8, "regs", True),
}

# split kernels: the even warps run the first form kernel's k-step, the odd warps the second's
SPLIT_KERNELS: dict[str, tuple[str, str]] = {"split_l4x4_m8": ("form_l4x4_m0", "form_l0x4_m8")}

# fill kernels: the even warps run a form kernel's loads (or nothing), the odd warps copy global memory into
# shared memory with cp.async, FILL_BYTES per warp and k-step (a quarter of form_l4x4_m0's loads), or idle
FILL_BYTES = 512
FILL_KERNELS: dict[str, tuple[str | None, bool]] = {
    "fill_l4x4_m0": ("form_l4x4_m0", True),
    "idle_l4x4_m0": ("form_l4x4_m0", False),
    "fillonly_l4x4_m0": (None, True),
}
# ... and the same bytes through the copy engine (TMA's bulk copies, lane 0 of each odd warp): Hopper only
TMA_FILL_KERNELS: dict[str, tuple[str | None, bool]] = {
    "tmafill_l4x4_m0": ("form_l4x4_m0", True),
    "tmafillonly_l4x4_m0": (None, True),
}
TMA_ARCHS = ("sm_90a",)

WARPS_PER_SM = (4, 8, 12, 16)
KSTEPS_PER_ITER = 8  # ldsm_form.cu's kKsteps


def _shape(name: str) -> dict:
    """What one warp's k-step issues: ldmatrix instructions, bytes they read, products, trans loads."""
    if name in FORM_KERNELS:
        loads, x, trans, mma, dep = FORM_KERNELS[name]
        return {"kind": "form", "ldsm": loads, "ldsm_x": x, "ldsm_trans": loads if trans else 0,
                "smem_bytes": loads * (x or 4) * 128, "load": "ld.shared.v4" if x == 0 else "ldmatrix",
                "mma": mma, "products_wait_on_loads": dep and loads > 0 and mma > 0}
    if name in FILL_KERNELS or name in TMA_FILL_KERNELS:  # counts per warp of each half
        loads, copies = FILL_KERNELS.get(name) or TMA_FILL_KERNELS[name]
        shape = _shape(loads) if loads else {"ldsm": 0, "ldsm_x": 4, "smem_bytes": 0}
        return {"kind": "fill", "ldsm": shape["ldsm"], "ldsm_x": shape["ldsm_x"], "ldsm_trans": 0,
                "smem_bytes": shape["smem_bytes"], "mma": 0, "fill_bytes": FILL_BYTES if copies else 0,
                "copy": "tma" if name in TMA_FILL_KERNELS else "cp.async", "loads_on": "even warps",
                "copies_on": "odd warps"}
    if name in SPLIT_KERNELS:  # counts per warp of each half
        loads_only, products_only = (_shape(k) for k in SPLIT_KERNELS[name])
        return {"kind": "split", "ldsm": loads_only["ldsm"], "ldsm_x": loads_only["ldsm_x"], "ldsm_trans": 0,
                "smem_bytes": loads_only["smem_bytes"], "mma": products_only["mma"], "loads_on": "even warps",
                "products_on": "odd warps"}
    mt, nt2, a_from, b_trans = TILE_KERNELS[name]
    a_loads = 0 if a_from == "regs" else mt
    trans = (a_loads if a_from == "ldsm.trans" else 0) + (nt2 if b_trans else 0)
    return {"kind": "tile", "ldsm": a_loads + nt2, "ldsm_x": 4, "ldsm_trans": trans,
            "smem_bytes": (a_loads + nt2) * 512, "mma": mt * nt2 * 2, "a_from": a_from}


def points(b, names: list[str], warps_list=WARPS_PER_SM) -> list[dict]:
    from .calibrate_bench import block_times

    cp = b.cp
    blocks = b.gpu.sm_count
    tb = b.times(blocks)
    sink = cp.zeros(1, dtype=cp.float32)
    iters = 128 if b.quick else 1024
    rows = []
    for name in names:
        fn = b.fn("ldsm_form", name)
        limit = getattr(fn, "max_threads_per_block", 1024)
        for warps in warps_list:
            row = {"kernel": name, "warps_per_sm": warps, **_shape(name)}
            if 32 * warps > limit:
                rows.append({**row, "skipped": f"registers: at most {limit} threads per block"})
                continue
            try:
                b.elapsed(lambda fn=fn, w=warps: fn((blocks,), (32 * w,), (np.int32(iters), sink, tb)), reps=3)
            except Exception as exc:  # a launch the SM cannot hold: keep the other points
                rows.append({**row, "skipped": f"{type(exc).__name__}: {exc}".splitlines()[0][:200]})
                continue
            cycles = (block_times(tb)["clk1"] - block_times(tb)["clk0"]).astype(np.float64)
            ksteps = iters * KSTEPS_PER_ITER
            med = float(np.median(cycles)) / ksteps
            share = 0.5 if row["kind"] in ("split", "fill") else 1.0
            rows.append({
                **row,
                "cycles_per_warp_kstep": med,
                "cycles_p10": float(np.percentile(cycles, 10)) / ksteps,
                "cycles_p90": float(np.percentile(cycles, 90)) / ksteps,
                # per-SM rates: every warp of the block ran `ksteps` k-steps in the block's cycles (a split
                # kernel's loads and products each on half of them)
                "ldsm_per_clk_per_sm": share * warps * row["ldsm"] / med,
                "smem_bytes_per_clk_per_sm": share * warps * row["smem_bytes"] / med,
                "mma_per_clk_per_sm": share * warps * row["mma"] / med,
                **({"fill_bytes_per_clk_per_sm": share * warps * row["fill_bytes"] / med} if "fill_bytes" in row
                   else {}),
            })
    return rows


def ldsm_form(b) -> dict:
    """The sweep: every form and tile kernel at 4, 8, 12 and 16 warps per SM (one block per SM)."""
    tma = [*TMA_FILL_KERNELS] if b.gpu.arch in TMA_ARCHS else []
    rows = points(b, [*FORM_KERNELS, *SPLIT_KERNELS, *TILE_KERNELS, *FILL_KERNELS, *tma])
    return {
        "points": rows,
        "how": (f"ldsm_form.cu: {b.gpu.sm_count} blocks (one per SM) of 4/8/12/16 warps, "
                f"{128 if b.quick else 1024} x {KSTEPS_PER_ITER} k-steps per warp; form_*: L ldmatrix.x1/x2/x4 "
                "(conflict-free) and M mma.sync m16n8k16 bf16 (fp32 accumulate, 8 accumulators) per warp "
                "k-step (form_*i_*: the products on held fragments); split_*: loads on the even warps, products "
                "on the odd ones; fill_*: loads on the even warps while the odd ones cp.async global memory "
                "into shared memory (idle_*: they idle, fillonly_*: no loads; tmafill*: the same bytes as TMA bulk "
                "copies, lane 0 of each odd warp, on Hopper); tile_*: the k-steps of the v2 "
                "forward and backward GEMMs; median block cycles "
                "(clock64) per warp k-step"),
    }


# Two blocks per SM (ldsm_form.cu NEIGHBOUR kernels): the first block to arrive on an SM loads as form_l4x4_m0 on
# every warp, the second copies with cp.async beside it (xfill) or idles (xidle) for longer than the loads take
NEIGHBOUR_KERNELS: dict[str, bool] = {"xfill_l4x4_m0": True, "xidle_l4x4_m0": False}
NEIGHBOUR_WARPS = (4, 8)  # warps per block
NEIGHBOUR_CYCLES_PER_KSTEP = 400  # the neighbour's cycles per loading warp k-step: well past the loads' 30-140


def _pairs(t, roles, filled, warps: int, ksteps: int) -> list[tuple[float, float]]:
    """Per SM holding one loading block and one neighbour: (the loader's shared bytes per clock, the neighbour's
    filled bytes per clock)."""
    per_load = warps * ksteps * _shape("form_l4x4_m0")["smem_bytes"]
    out = []
    for sm in np.unique(t["smid"]):
        sel = np.flatnonzero(t["smid"] == sm)
        if len(sel) != 2 or sorted(roles[sel]) != [0, 1]:
            continue
        loader, neighbour = (sel[0], sel[1]) if roles[sel[0]] == 0 else (sel[1], sel[0])
        loads_cycles = float(t["clk1"][loader] - t["clk0"][loader])
        fill_cycles = float(t["clk1"][neighbour] - t["clk0"][neighbour])
        out.append((per_load / loads_cycles, float(filled[neighbour]) / fill_cycles))
    return out


def xblock_fill(b) -> dict:
    """Loads in one block beside another block's cp.async fills, or beside an idle block, two blocks per SM."""
    from .calibrate_bench import block_times

    cp = b.cp
    blocks = 2 * b.gpu.sm_count
    iters = 128 if b.quick else 1024
    ksteps = iters * KSTEPS_PER_ITER
    sink = cp.zeros(1, dtype=cp.float32)
    rows = []
    for warps in NEIGHBOUR_WARPS:
        row = {"warps_per_block": warps, "blocks_per_sm": 2}
        for name, copies in NEIGHBOUR_KERNELS.items():
            fn = b.fn("ldsm_form", name)
            tb, roles = b.times(blocks), cp.zeros(blocks, dtype=cp.int32)
            filled = cp.zeros(blocks, dtype=cp.uint64)
            cycles = np.int64(ksteps * NEIGHBOUR_CYCLES_PER_KSTEP)

            def launch(fn=fn, tb=tb, roles=roles, filled=filled, cycles=cycles, threads=32 * warps):
                filled.fill(0)
                fn((blocks,), (threads,), (np.int32(iters), cycles, sink, tb, roles, filled))

            b.elapsed(launch, reps=3)
            pairs = _pairs(block_times(tb), roles.get(), filled.get(), warps, ksteps)
            key = "beside_fills" if copies else "beside_idle"
            row[f"sms_paired_{key}"] = len(pairs)
            if pairs:
                row[f"smem_bytes_per_clk_per_sm_{key}"] = float(np.median([p[0] for p in pairs]))
                if copies:
                    row["fill_bytes_per_clk_per_sm"] = float(np.median([p[1] for p in pairs]))
        idle, busy = row.get("smem_bytes_per_clk_per_sm_beside_idle"), row.get("smem_bytes_per_clk_per_sm_beside_fills")
        fill = row.get("fill_bytes_per_clk_per_sm")
        row["loss_per_filled_byte"] = (idle - busy) / fill if idle and busy and fill else None
        rows.append(row)
    return {
        "points": rows,
        "how": (f"ldsm_form.cu xfill_l4x4_m0 / xidle_l4x4_m0: {blocks} blocks (two per SM) of 4 or 8 warps; the first "
                f"block on an SM issues {iters} x {KSTEPS_PER_ITER} k-steps of 4 ldmatrix.x4 per warp, the second "
                "copies global memory into its own shared memory with cp.async on every warp (xfill) or idles "
                "(xidle) for longer; the loading block's shared bytes per clock (its clock64 span) and the "
                "neighbour's filled bytes per clock, median over the SMs holding one of each"),
    }
