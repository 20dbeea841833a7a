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


def wgmma_shape(b) -> dict:
    from .calibrate_bench import _operand_words, block_times, per_sm_rate

    cp = b.cp
    rng = np.random.default_rng(3)
    init = cp.asarray(_operand_words(40 * 1024, "bf16", rng))
    sink = cp.zeros(1, dtype=cp.float32)
    iters = 256 if b.quick else 2048
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
