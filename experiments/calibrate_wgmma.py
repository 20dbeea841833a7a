"""The wgmma_shape sweep: wgmma bf16 throughput per SM for each instruction shape and shared-memory layout our
v3 kernel issues (kernels/microbench/wgmma_shape.cu): the QK^T form (both operands in shared memory, N =
block_n) and the PV form (A from registers, N = head dim), at each swizzle panel width, with 1, 2 and 3
warpgroups per SM.

Each point is one launch of blocks x 128 threads; its number is the median over SMs of FLOPs per SM clock
(calibrate_bench.per_sm_rate). A point whose blocks the SM cannot hold at once (registers) is skipped.
"""

from __future__ import annotations

import re

import numpy as np

SS_N = (64, 80, 96, 112, 128, 144, 160, 176, 192, 224, 256)
SS_W = (128, 64, 32)
RS_SHAPES = (
    (64, 128),
    (64, 64),
    (96, 64),
    (96, 32),
    (128, 128),
    (128, 64),
    (192, 128),
    (192, 64),
    (256, 128),
    (256, 64),
)
WARPGROUPS_PER_SM = (1, 2, 3)
REGS_PER_SM = 65536
KERNEL = re.compile(r"wg_(ss|rs)_n(\d+)_w(\d+)$")


def kernels() -> list[str]:
    """Every kernel the sweep launches, QK^T forms first."""
    return [f"wg_ss_n{n}_w{w}" for n in SS_N for w in SS_W] + [f"wg_rs_n{n}_w{w}" for n, w in RS_SHAPES]


def shape(name: str) -> dict:
    """The instruction a kernel chains: form, N, panel width, and FLOPs of one m64nNk16 instruction."""
    m = KERNEL.match(name)
    if not m:
        raise ValueError(f"not a wgmma_shape kernel: {name!r}")
    form, n, w = m.group(1), int(m.group(2)), int(m.group(3))
    return {"form": "ss" if form == "ss" else "rs", "n": n, "swizzle_bytes": w, "flops": 2 * 64 * n * 16}


def _inputs(b, operand_bytes: int, seed: int):
    """Random bf16 operands for the tiles, the sink and the chain length (shorter with --quick)."""
    from .calibrate_bench import _operand_words

    init = b.cp.asarray(_operand_words(operand_bytes, "bf16", np.random.default_rng(seed)))
    return init, b.cp.zeros(1, dtype=b.cp.float32), 256 if b.quick else 2048


def wgmma_shape(b) -> dict:
    from .calibrate_bench import block_times, per_sm_rate

    init, sink, iters = _inputs(b, 40 * 1024, 3)
    rows = []
    for name in kernels():
        fn = b.fn("wgmma_shape", name)
        regs = int(getattr(fn, "num_regs", 0))
        for per_sm in WARPGROUPS_PER_SM:
            row = {"kernel": name, **shape(name), "warpgroups_per_sm": per_sm, "registers": regs}
            if regs and per_sm * 128 * regs > REGS_PER_SM:
                rows.append({**row, "skipped": f"registers: {per_sm} x 128 threads x {regs} > {REGS_PER_SM}"})
                continue
            blocks = per_sm * b.gpu.sm_count
            tb = b.times(blocks)
            b.elapsed(
                lambda fn=fn, blocks=blocks, tb=tb: fn((blocks,), (128,), (init, np.int32(iters), sink, tb)), reps=3
            )
            t = block_times(tb)
            rate = per_sm_rate(t, iters * row["flops"])
            rows.append(
                {
                    **row,
                    "flops_per_clk_per_sm": rate,
                    "cycles_per_instruction_per_sm": row["flops"] / rate if rate else None,
                }
            )
    return {
        "points": rows,
        "how": (
            f"wgmma_shape.cu: 1-3 blocks of one warpgroup per SM, {iters} bf16 m64nNk16 per warpgroup on one "
            "accumulator set (commit every 4, one group in flight); ss: A and B K-major in shared memory in "
            "W-byte swizzled panels, as v3's QK^T; rs: A from registers, B N-major in W-byte panels, as v3's "
            "PV; FLOPs per SM over the clock64 span of the SM's blocks, median over SMs"
        ),
    }


def table(points: list[dict]) -> dict[tuple[str, int, int], float]:
    """(form, N, swizzle bytes) -> the best rate over warpgroups per SM, of the points that ran."""
    best: dict[tuple[str, int, int], float] = {}
    for p in points:
        rate = p.get("flops_per_clk_per_sm")
        if rate:
            key = (p["form"], p["n"], p["swizzle_bytes"])
            best[key] = max(best.get(key, 0.0), rate)
    return best


# wgfill_ss_n<N> (wgmma_shape.cu): one warpgroup chaining the QK^T form beside a warp whose lane 0 keeps TMA bulk
# copies in flight into shared memory. mode 0: the chain alone, 1: the chain with the copies, 2: the copies alone.
FILL_N = (64, 128)
FILL_MODES = ("alone", "beside", "fills")  # the kernel's mode 0, 1, 2, as the results name them
FILL_THREADS = 160


def _operand_bytes(n: int) -> int:
    """Shared-memory bytes one m64nNk16 QK^T-form instruction reads: A (64 x 16 bf16) and B (N x 16 bf16)."""
    return (64 + n) * 16 * 2


def wgmma_fill(b) -> dict:
    """wgmma's operand reads beside the copy engine's fills: per N and blocks per SM, the chain's FLOPs per SM
    clock alone and beside TMA fills, the fills' bytes per SM clock, and what the chain loses per filled byte
    (its operand bytes per clock alone minus beside, over the fill bytes per clock)."""
    from .calibrate_bench import block_times, per_sm_rate

    cp = b.cp
    init, sink, iters = _inputs(b, 24 * 1024, 5)
    rows = []
    for n in FILL_N:
        fn = b.fn("wgmma_shape", f"wgfill_ss_n{n}")
        flops = 2 * 64 * n * 16
        for per_sm in WARPGROUPS_PER_SM:
            blocks = per_sm * b.gpu.sm_count
            tb = b.times(blocks)
            copied = cp.zeros(blocks, dtype=cp.uint64)
            chain_end = cp.zeros(blocks, dtype=cp.int64)
            out = {"n": n, "swizzle_bytes": 128, "warpgroups_per_sm": per_sm, "operand_bytes": _operand_bytes(n)}
            for mode, key in enumerate(FILL_MODES):
                b.elapsed(lambda fn=fn, blocks=blocks, tb=tb, copied=copied, chain_end=chain_end, mode=mode: fn(
                    (blocks,), (FILL_THREADS,),
                    (init, np.int32(iters), np.int32(mode), sink, tb, copied, chain_end)), reps=3)
                t = block_times(tb).copy()
                if mode != 2:  # the chain's span ends at its last cycle, not after the copies in flight drain
                    t["clk1"] = chain_end.get()
                    out[f"flops_per_clk_per_sm_{key}"] = per_sm_rate(t, iters * flops)
                if mode != 0:
                    out[f"fill_bytes_per_clk_per_sm_{key}"] = per_sm_rate(t, float(copied.get().mean()))
            alone, beside = out["flops_per_clk_per_sm_alone"], out["flops_per_clk_per_sm_beside"]
            fill = out["fill_bytes_per_clk_per_sm_beside"]
            loss = (alone - beside) / flops * out["operand_bytes"]  # operand bytes per clock given up
            out["loss_per_filled_byte"] = loss / fill if fill else None
            rows.append(out)
    return {
        "points": rows,
        "how": (
            f"wgmma_shape.cu wgfill_ss_n64 / n128: 1-3 blocks per SM of one warpgroup chaining {iters} bf16 "
            "m64nNk16 of the QK^T form (128-byte panels) beside a warp whose lane 0 keeps 4 TMA bulk copies of "
            "4 KiB of an L2-resident array in flight into a ring of its own (until the chain is done), the chain "
            "alone, and the copies alone (4 x iters); rates over the clock64 span of each SM's blocks, median "
            "over SMs; loss per filled byte: the chain's operand bytes per clock alone minus beside the fills, "
            "over the fills' bytes per clock"
        ),
    }
