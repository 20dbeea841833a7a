"""The softmax_mix sweep: our v3 consumer's elementwise work per K/V block (its online softmax, O's rescale and
P's conversion, kernels/microbench/softmax_mix.cu) with no tensor work, at 1-3 warps per warp scheduler, for
each (head dim, block_n) of the v3 tiles. Each point is one launch of one block of W warpgroups per SM; its
number is clock64 cycles per iteration of a warp (median over SMs). `model_cycles` runs the same ops through
the timing interpreter, one role per warpgroup, so the sweep checks the elementwise model directly.
"""

from __future__ import annotations

import math
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
    from flashsim.algorithms.ir import Kernel, Role
    from flashsim.simulator.gpu import Gpu

    roles = tuple(Role(f"consumer{i}", 4, lambda cta: _softmax_ops(d, bn, iters)) for i in range(warpgroups))
    kernel = Kernel("softmax_mix", [(0, 0, 0)], roles, smem_bytes=0, regs_per_thread=128)
    gpu = Gpu(profile, sms=1, trace=[])
    gpu.run_kernel(kernel, dict, extrapolate=False)
    return _span(gpu.trace, "consumer") / iters


def _softmax_ops(d: int, bn: int, iters: int):
    """v3's consumer ops for `iters` K/V blocks of a warpgroup (64 rows): the online softmax, then the deferred
    O rescale."""
    from flashsim.algorithms.ir import OnlineSoftmax, Rescale

    for j in range(iters):
        yield OnlineSoftmax("S", f"P{j % 2}", "m", "l", 64, bn, 0.1, None, "bf16", acc="acc", acc_cols=d,
                            corr="corr", warps=4)
        yield Rescale("acc", "corr", 64, d, 4)


def _span(trace: list, role: str) -> float:
    """Cycles from the first interval of the roles named `role` to the last one's end (as clock64 spans)."""
    mine = [(start, end) for track, _, start, end in trace if role in track]
    return max(end for _, end in mine) - min(start for start, _ in mine)


def model_mix(profile, gemms: int, softmaxes: int, form: str, iters: int = 24) -> dict:
    """The timing interpreter on softmax_gemm.cu's mix: `gemms` roles chaining wgmma commit groups (SS: S = Q
    K^T of a 64 x 128 tile at d64, four k16 steps; RS: O += P V of a 64 x 64 tile over 128 keys, eight), one
    group left in flight, long enough to outlast the `softmaxes` roles' `iters` v3 softmax iterations (d64,
    block_n 128). Returns the softmax's cycles per iteration and the GEMMs' FLOPs per cycle."""
    from flashsim.algorithms.ir import RMEM, Gemm, GemmWait, Kernel, Role
    from flashsim.simulator.gpu import Gpu

    def gemm_program(cta, name, groups):
        rs = form == "rs"
        for j in range(groups):
            token = f"{name}{j}"
            if form == "mma":  # each warp 64 rows x 16 columns, 8 k16 steps (A in registers)
                yield Gemm("S", "Q", "K", 256, 16, 128, RMEM, "smem", "mma_sync", "bf16", 4, trans_b=True)
                continue
            if rs:
                yield Gemm("O", "P", "V", 64, 64, 128, RMEM, "smem", "wgmma", "bf16", 4, accumulate=True,
                           async_token=token)
            else:
                yield Gemm("S", "Q", "K", 64, 128, 64, "smem", "smem", "wgmma", "bf16", 4, trans_b=True,
                           async_token=token)
            if j:
                yield GemmWait(f"{name}{j - 1}")
        if form != "mma":
            yield GemmWait(f"{name}{groups - 1}")

    groups = iters * 40 if softmaxes else 256
    roles = tuple(Role(f"gemm{i}", 4, lambda c, i=i: gemm_program(c, f"g{i}_", groups)) for i in range(gemms))
    roles += tuple(Role(f"softmax{i}", 4, lambda cta: _softmax_ops(64, 128, iters)) for i in range(softmaxes))
    kernel = Kernel("softmax_gemm", [(0, 0, 0)], roles, smem_bytes=0, regs_per_thread=128)
    gpu = Gpu(profile, sms=1, trace=[])
    gpu.run_kernel(kernel, dict, extrapolate=False)
    flops = {"rs": 2 * 64 * 64 * 128, "ss": 2 * 64 * 128 * 64, "mma": 2 * 256 * 16 * 128}[form]
    gemm_ends = sorted(end for track, name, _, end in gpu.trace if "gemm" in track and name.startswith("gemm"))
    out = {}
    horizon = gemm_ends[-1] if gemms else 0.0
    if softmaxes:
        out["softmax_cycles_per_iteration"] = _span(gpu.trace, "softmax") / iters
        horizon = max(end for track, _, _, end in gpu.trace if "softmax" in track)
    if gemms:
        finished = sum(1 for end in gemm_ends if end <= horizon)
        out["gemm_flops_per_clk_per_sm"] = finished * flops / horizon
    return out


def compare(points: list[dict], profile) -> list[dict]:
    """Each measured point beside the model's cycles for it."""
    out = []
    for p in points:
        model = model_cycles(profile, p["head_dim"], p["block_n"], p["warps_per_scheduler"])
        out.append({**p, "model_cycles": model, "model_error": model / p["cycles_per_iteration"] - 1})
    return out


# softmax_gemm.cu: (GEMM warpgroups, softmax warpgroups, GEMM form) of each kernel
MIXES = ((1, 0, "ss"), (1, 0, "rs"), (0, 1, "ss"), (0, 2, "ss"), (1, 1, "ss"), (1, 2, "ss"), (1, 1, "rs"),
         (1, 2, "rs"), (2, 1, "ss"), (1, 0, "mma"), (1, 1, "mma"), (1, 2, "mma"), (2, 1, "mma"))
# FLOPs of one GEMM step of a warpgroup: a wgmma m64n128k16 (SS) or m64n64k16 (RS), or one mma.sync m16n8k16
# on each of its 4 warps
GEMM_FLOPS = {"ss": 2 * 64 * 128 * 16, "rs": 2 * 64 * 64 * 16, "mma": 4 * 2 * 16 * 8 * 16}
LONG_STEPS = {"ss": 1, "rs": 2, "mma": 8}  # steps that outlast the softmax, relative to SS


def softmax_gemm(b) -> dict:
    """Each mix twice: GEMMs long enough that every softmax warpgroup's span lies within theirs (the softmax's
    rate beside the GEMMs), and softmaxes long enough that the GEMMs' spans lie within theirs (the GEMMs'
    rate beside the softmax). Per side: its spans' median over blocks."""
    cp = b.cp
    sink = cp.zeros(1, dtype=cp.float32)
    scale = 1 if b.quick else 8
    rows = []
    for g, w, form in MIXES:
        name = f"sg_g{g}_w{w}_{form}"
        fn = b.fn("softmax_gemm", name)
        blocks = b.gpu.sm_count
        long = 4096 * scale * LONG_STEPS[form]
        for inside, (gemm_iters, softmax_iters) in (("softmax", (long, 100 * scale)),
                                                    ("gemm", (512 * scale, 800 * scale))):
            if (inside == "softmax" and not w) or (inside == "gemm" and not g):
                continue
            times = cp.zeros(blocks * (g + w) * 3, dtype=cp.int64)
            args = (np.int32(gemm_iters), np.int32(softmax_iters), np.float32(SOFTMAX_SCALE_LOG2), sink, times)
            b.elapsed(lambda fn=fn, args=args, blocks=blocks, n=g + w: fn((blocks,), (128 * n,), args), reps=3)
            t = times.get().reshape(blocks, g + w, 3)
            spans = t[:, :, 1] - t[:, :, 0]
            row = {"kernel": name, "gemm_warpgroups": g, "softmax_warpgroups": w, "gemm_form": form,
                   "gemm_iters": gemm_iters, "softmax_iters": softmax_iters, "inside": inside,
                   "registers": int(getattr(fn, "num_regs", 0))}
            if g:
                span = float(np.median(spans[:, :g].max(axis=1)))
                row["gemm_span_cycles"] = span
                row["gemm_flops_per_clk_per_sm"] = g * gemm_iters * GEMM_FLOPS[form] / span
            if w:
                span = float(np.median(spans[:, g:].max(axis=1)))
                row["softmax_span_cycles"] = span
                row["softmax_cycles_per_iteration"] = span / softmax_iters
            rows.append(row)
    return {
        "points": rows,
        "how": ("softmax_gemm.cu: one block per SM of G GEMM warpgroups (wgmma m64n128k16 SS x 4 or m64n64k16 RS "
                "x 8 per commit group, one group in flight) and W softmax warpgroups (v3's consumer softmax at "
                "d64, block_n 128); each warpgroup's clock64 span from a common start; per side the median over "
                "blocks of its longest span; 'inside' names the side whose spans lie within the other's; mma: "
                "each warp per 8 steps one ldmatrix.x4 and 8 mma.sync m16n8k16 (A in registers), 8 accumulators"),
    }


def compare_mix(points: list[dict], profile) -> list[dict]:
    """Each softmax_gemm point beside the model's number for it: a softmax's cycles per iteration where the
    softmax ran inside the GEMMs' span, the GEMMs' FLOPs per cycle where they ran inside the softmax's."""
    out = []
    for p in points:
        g, w, form = p["gemm_warpgroups"], p["softmax_warpgroups"], p["gemm_form"]
        model = model_mix(profile, g, w, form)
        if p["inside"] == "softmax" and w:
            key = "softmax_cycles_per_iteration"
        elif p["inside"] == "gemm" and g:
            key = "gemm_flops_per_clk_per_sm"
        else:
            continue
        if key not in p or key not in model:
            continue
        out.append({"kernel": p["kernel"], "inside": p["inside"], "quantity": key, "measured": p[key],
                    "model": model[key], "model_error": model[key] / p[key] - 1})
    return out


def _slowdowns(points: list[dict], form: str) -> dict[tuple[int, int], float]:
    """(GEMM warpgroups, softmax warpgroups) -> the softmax's time beside the GEMMs over its time alone."""
    alone = {p["softmax_warpgroups"]: p["softmax_cycles_per_iteration"] for p in points
             if not p["gemm_warpgroups"] and p["inside"] == "softmax"}
    return {(p["gemm_warpgroups"], p["softmax_warpgroups"]): p["softmax_cycles_per_iteration"] /
            alone[p["softmax_warpgroups"]]
            for p in points if p["gemm_form"] == form and p["gemm_warpgroups"] and p["inside"] == "softmax"
            and p["softmax_warpgroups"] in alone}


def fit_steal(points: list[dict], profile, form: str, mixes: tuple = ((1, 1), (1, 2), (2, 1))) -> float:
    """The wgmma_<form>_pipe_steal_fraction with which the issue model's softmax slows beside the GEMMs as
    measured: least squares on the log of the slowdowns of `mixes` (those measured), by golden-section search
    on [0, 0.95] (the modelled slowdown grows with the fraction)."""
    measured = {m: r for m, r in _slowdowns(points, form).items() if m in mixes}
    if not measured:
        raise ValueError(f"no softmax_gemm points of form {form!r}")
    base = profile.with_overrides(["issue_model=1"])
    alone = {w: model_mix(base, 0, w, "ss", iters=12)["softmax_cycles_per_iteration"] for _, w in measured}

    def cost(f: float) -> float:
        p = base.with_overrides([f"wgmma_{form}_pipe_steal_fraction={f}"])
        return sum(math.log(model_mix(p, g, w, form, iters=12)["softmax_cycles_per_iteration"] / alone[w] / r) ** 2
                   for (g, w), r in measured.items())

    lo, hi = 0.0, 0.95
    golden = (math.sqrt(5) - 1) / 2
    a, b = hi - golden * (hi - lo), lo + golden * (hi - lo)
    fa, fb = cost(a), cost(b)
    while hi - lo > 0.005:
        if fa <= fb:
            hi, b, fb = b, a, fa
            a = hi - golden * (hi - lo)
            fa = cost(a)
        else:
            lo, a, fa = a, b, fb
            b = lo + golden * (hi - lo)
            fb = cost(b)
    return round((lo + hi) / 2, 2)


def _mma_sync_measured(points: list[dict]) -> tuple[dict, dict]:
    """From softmax_gemm's mma.sync mixes: (GEMM warpgroups, softmax warpgroups) -> the GEMMs' rate beside
    the softmax over one GEMM warpgroup's rate alone, and -> the softmax's time beside the GEMMs over its
    time alone."""
    rows = [p for p in points if p["gemm_form"] == "mma"]
    alone = [p["gemm_flops_per_clk_per_sm"] for p in rows if not p["softmax_warpgroups"] and p["inside"] == "gemm"]
    if not alone:
        raise ValueError("no softmax_gemm points of an mma.sync GEMM alone")
    gemm = {(p["gemm_warpgroups"], p["softmax_warpgroups"]): p["gemm_flops_per_clk_per_sm"] / alone[0]
            for p in rows if p["softmax_warpgroups"] and p["inside"] == "gemm"}
    return gemm, _slowdowns(points, "mma")


def mma_sync_mix_ratios(points: list[dict], profile, issue_cycles: float, steal: float) -> dict[str, float]:
    """Modelled over measured, per mma.sync mix and side ("g1w1 gemm", "g1w1 softmax", ...), with the issue
    model, an HMMA taking `issue_cycles` of its scheduler and a running mma.sync GEMM `steal` of the
    elementwise pipes. Each side is compared as a ratio to its own kind alone, as measured."""
    gemm, softmax = _mma_sync_measured(points)
    p = profile.with_overrides(["issue_model=1", f"mma_sync_issue_cycles={issue_cycles}",
                                f"mma_sync_pipe_steal_fraction={steal}"])
    gemm_alone = model_mix(p, 1, 0, "mma", iters=12)["gemm_flops_per_clk_per_sm"]
    softmax_alone = {w: model_mix(p, 0, w, "mma", iters=12)["softmax_cycles_per_iteration"]
                     for _, w in {*gemm, *softmax}}
    out = {}
    for g, w in sorted({*gemm, *softmax}):
        mix = model_mix(p, g, w, "mma", iters=12)
        if (g, w) in gemm:
            out[f"g{g}w{w} gemm"] = mix["gemm_flops_per_clk_per_sm"] / gemm_alone / gemm[g, w]
        if (g, w) in softmax:
            out[f"g{g}w{w} softmax"] = mix["softmax_cycles_per_iteration"] / softmax_alone[w] / softmax[g, w]
    return out


def mma_sync_fit_cost(points: list[dict], profile, issue_cycles: float, steal: float) -> float:
    """Sum of squared logs of mma_sync_mix_ratios: 0 when every mix's both sides slow as measured."""
    return sum(math.log(r) ** 2 for r in mma_sync_mix_ratios(points, profile, issue_cycles, steal).values())


def fit_mma_sync(points: list[dict], profile) -> tuple[float, float]:
    """(mma_sync_issue_cycles, mma_sync_pipe_steal_fraction) with which the issue model slows both sides of
    softmax_gemm's mma.sync mixes as measured: a grid over 1-8 cycles (half steps) and 0-0.8 (tenths), then
    quarter cycles and 0.05 around the best."""
    def best(hs, fs):
        return min((mma_sync_fit_cost(points, profile, h, f), h, f) for h in hs for f in fs)

    _, h, f = best([1 + 0.5 * i for i in range(15)], [0.1 * i for i in range(9)])
    _, h, f = best([max(1.0, h + 0.25 * i) for i in (-1, 0, 1)], [max(0.0, f + 0.05 * i) for i in (-1, 0, 1)])
    return h, round(f, 2)
