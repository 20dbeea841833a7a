"""The xwarp microbenchmark (kernels/microbench/xwarp.cu): what combining row statistics across a block's warps
through shared memory costs per K/V step, as our V1 kernel's softmax does it."""

from __future__ import annotations

import numpy as np

KERNELS = ("xwarp_v1", "xwarp_local", "xwarp_bar")
SCALE_LOG2 = 0.12752  # 1 / sqrt(128) * log2(e): d128's softmax scale, the values stay finite


def xwarp(b) -> dict:
    from .calibrate_bench import block_times

    cp = b.cp
    sink = cp.zeros(1, dtype=cp.float32)
    iters = 256 if b.quick else 4096
    rows = []
    for warps in (4, 8):
        for per_sm in (1, 2):
            blocks = b.gpu.sm_count * per_sm
            for kernel in KERNELS:
                fn = b.fn("xwarp", f"{kernel}_w{warps}")
                tb = b.times(blocks)
                args = (np.int32(iters), np.float32(SCALE_LOG2), sink, tb)
                b.elapsed(lambda fn=fn, w=warps, n=blocks, args=args: fn((n,), (32 * w,), args), reps=3)
                t = block_times(tb)
                rows.append({"kernel": kernel, "warps": warps, "blocks_per_sm": per_sm,
                             "cycles_per_iteration": float(np.median(t["clk1"] - t["clk0"])) / iters})
    return {
        "points": rows,
        "how": (f"xwarp.cu: {iters} iterations of V1's softmax on a 16-row tile (16 values a thread) with the row "
                "max and sum combined across the block's 4 or 8 warps through shared memory and three barriers "
                "(xwarp_v1), the same arithmetic on each warp's own statistics (xwarp_local), the barriers alone "
                "(xwarp_bar); 1 or 2 blocks per SM; clock64 cycles per iteration of a block, median over blocks"),
    }


def model_cycles(profile, warps: int, cross_warp: bool, blocks: int = 1, iters: int = 64) -> float:
    """The timing interpreter's cycles per iteration for xwarp.cu's work: V1's ops for one step of a 16-row
    tile of `warps` warps (OnlineSoftmax, local statistics over 32 keys a warp, combined across the warps when
    `cross_warp`; RescaleMerge over the same 16 values a thread), `iters` times, `blocks` blocks on one SM."""
    from flashsim.algorithms.ir import Kernel, OnlineSoftmax, RescaleMerge, Role
    from flashsim.simulator.gpu import Gpu

    cols = 32 * warps

    def program(cta):
        for _ in range(iters):
            yield OnlineSoftmax("S", "P", "mt", "lt", 16, cols, 0.1, None, "bf16", mode="local",
                                cross_warp=warps if cross_warp else 1, warps=warps)
            yield RescaleMerge("S", "P", "m", "l", "mt", "lt", 16, cols, warps)

    kernel = Kernel("xwarp", [(0, 0, b) for b in range(blocks)], (Role("warps", warps, program),), 0, 40)
    gpu = Gpu(profile, sms=1)
    cycles, _, _ = gpu.run_kernel(kernel, dict, extrapolate=False)
    fixed = gpu.launch_fixed_cycles() + profile.cta_launch_cycles
    return (cycles - fixed) / iters
