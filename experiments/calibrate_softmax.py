"""The softmax_mix sweep: our v3 consumer's elementwise work per K/V block (its online softmax, O's rescale and
P's conversion, kernels/microbench/softmax_mix.cu) with no tensor work, at 1-3 warps per warp scheduler, for
each (head dim, block_n) of the v3 tiles. Each point is one launch of one block of W warpgroups per SM; its
number is clock64 cycles per iteration of a warp (median over SMs). `model_cycles` runs the same ops through
the timing interpreter, one role per warpgroup, so the sweep checks the elementwise model directly.
"""

from __future__ import annotations

import re

import numpy as np

# (head dim, block_n, warpgroups per SM) of the kernels softmax_mix.cu builds
SHAPES = ((64, 128, (1, 2, 3)), (96, 112, (1, 2, 3)), (128, 176, (1, 2)), (128, 128, (1, 2, 3)))
KERNEL = re.compile(r"softmax_d(\d+)_n(\d+)_w(\d)$")
SOFTMAX_SCALE_LOG2 = 0.125 * 1.4426950408889634  # 1/sqrt(64) in log2 units; any finite scale does


def kernels() -> list[str]:
    return [f"softmax_d{d}_n{bn}_w{w}" for d, bn, ws in SHAPES for w in ws]


def softmax_mix(b) -> dict:
    from .calibrate_bench import block_times

    cp = b.cp
    sink = cp.zeros(1, dtype=cp.float32)
    iters = 256 if b.quick else 2048
    rows = []
    for name in kernels():
        d, bn, w = (int(g) for g in KERNEL.match(name).groups())
        fn = b.fn("softmax_mix", name)
        blocks = b.gpu.sm_count
        tb = b.times(blocks)
        args = (np.int32(iters), np.float32(SOFTMAX_SCALE_LOG2), sink, tb)
        b.elapsed(lambda fn=fn, w=w, args=args, blocks=blocks: fn((blocks,), (128 * w,), args), reps=3)
        t = block_times(tb)
        cycles = float(np.median(t["clk1"] - t["clk0"])) / iters
        rows.append({"kernel": name, "head_dim": d, "block_n": bn, "warps_per_scheduler": w,
                     "registers": int(getattr(fn, "num_regs", 0)), "cycles_per_iteration": cycles})
    return {
        "points": rows,
        "how": (f"softmax_mix.cu: one block per SM of 1-3 warpgroups, each warp {iters} iterations of v3's "
                "Consumer::softmax, rescale_o and convert_p on registers (64 x block_n S, 64 x head-dim O per "
                "warpgroup), no tensor work; clock64 cycles per iteration of a warp, median over SMs"),
    }


def model_cycles(profile, d: int, bn: int, warpgroups: int, iters: int = 32) -> float:
    """The timing interpreter's cycles per iteration for the same work: one role of 4 warps per warpgroup,
    each issuing v3's consumer ops for a K/V block (OnlineSoftmax, then the deferred Rescale) `iters` times
    on one SM, nothing else running."""
    from flashsim.algorithms.ir import Kernel, OnlineSoftmax, Rescale, Role
    from flashsim.simulator.gpu import Gpu

    def program(cta):
        for j in range(iters):
            yield OnlineSoftmax("S", f"P{j % 2}", "m", "l", 64, bn, 0.1, None, "bf16", acc="acc", acc_cols=d,
                                corr="corr", warps=4)
            yield Rescale("acc", "corr", 64, d, 4)

    roles = tuple(Role(f"consumer{i}", 4, program) for i in range(warpgroups))
    kernel = Kernel("softmax_mix", [(0, 0, 0)], roles, smem_bytes=0, regs_per_thread=128)
    cycles, _, _ = Gpu(profile, sms=1).run_kernel(kernel, dict, extrapolate=False)
    return cycles / iters


def compare(points: list[dict], profile) -> list[dict]:
    """Each measured point beside the model's cycles for it."""
    out = []
    for p in points:
        model = model_cycles(profile, p["head_dim"], p["block_n"], p["warps_per_scheduler"])
        out.append({**p, "model_cycles": model, "model_error": model / p["cycles_per_iteration"] - 1})
    return out
