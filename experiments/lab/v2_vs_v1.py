"""Claim (FlashAttention-2): V2 is about 2x faster than V1 on an A100. The ways it differs, measured apart:
loop order (V1: outer over K/V, so O, m, l travel to global memory every step; V2: outer over Q), the warp
split (V1 split-K: partial products meet in shared memory; V2 split-Q: none), and fewer non-matmul FLOPs
(V2 rescales O once at the end). The counting interpreter sums each program's work, the timing interpreter
times them on the a100 profile."""

from __future__ import annotations

from .base import Outcome, figure, profile, save

NAME = "v2-vs-v1"
CLAIM = "v2 beats v1 on an A100 (the FA2 paper: ~2x) through loop order, split-Q warps and fewer non-matmul FLOPs"
# The FA2 paper (arXiv 2307.08691): forward up to 73% of the A100's peak, FA1 30-50%: 1.5-2.4x.
PAPER_SPEEDUP = (1.5, 2.4)
FA1_TILES, EQUAL_TILES = "v1 (FA1 tiles)", "v1 (v2's tile)"


def _measure(algo: str, p, t, hw) -> dict:
    from flashsim.algorithms.counting import SOFTMAX_STATS, WARP_REDUCE, count_io
    from flashsim.algorithms.ir import Gemm
    from flashsim.algorithms.schedules import build
    from flashsim.simulator.api import simulate

    schedule = build(algo, p, t)
    counts = count_io(schedule)
    kernel = schedule.kernels[0]
    splits = sorted({op.split for role in kernel.roles for op in role.program(kernel.ctas[0]) if isinstance(op, Gemm)})
    sim = simulate(algo, p, hw, t)
    return {
        "tiling": t.as_dict(), "time_s": sim.time_s, "tflops": sim.tflops, "bound_by": sim.bound_by,
        "warp_split": splits, "exps": counts.exps, "alu_flops": counts.alu_flops,
        "non_matmul_flops": counts.exps + counts.alu_flops, "matmul_flops": sum(counts.flops.values()),
        "cross_warp_smem_bytes": sum(counts.smem_read[k] + counts.smem_write[k] for k in (WARP_REDUCE, SOFTMAX_STATS)),
        "gmem_bytes": counts.gmem_bytes,
    }


def run(quick: bool) -> Outcome:
    from flashsim.algorithms import Problem, Tiling, resolve_tiling

    hw = profile("a100")
    p = Problem(4, 16, 1024, 64, dtype="fp16") if quick else Problem(8, 16, 2048, 64, dtype="fp16")
    v2_tile = resolve_tiling("v2", p, hw)
    # V1 at V2's tile with as many thread blocks: one Q block each, so only the loop order and warp split differ
    equal = Tiling(v2_tile.block_m, v2_tile.block_n, v2_tile.warps, 1, splits=-(-p.seqlen_q // v2_tile.block_m))
    v1_runs = {FA1_TILES: _measure("v1", p, resolve_tiling("v1", p, hw), hw), EQUAL_TILES: _measure("v1", p, equal, hw)}
    v2 = _measure("v2", p, v2_tile, hw)
    runs = {**v1_runs, "v2": v2}
    speedups = {name: r["time_s"] / v2["time_s"] for name, r in v1_runs.items()}
    eq = runs[EQUAL_TILES]
    holds = all(s > 1.0 for s in speedups.values()) and v2["non_matmul_flops"] < eq["non_matmul_flops"]
    verdict = (f"v2 {speedups[FA1_TILES]:.2f}x faster than v1 at FA1's tiles and "
               f"{speedups[EQUAL_TILES]:.2f}x at v2's tile (FA2 paper: "
               f"{PAPER_SPEEDUP[0]}-{PAPER_SPEEDUP[1]}x); non-matmul FLOPs {eq['non_matmul_flops']:.3g} vs "
               f"{v2['non_matmul_flops']:.3g}; cross-warp shared-memory bytes {eq['cross_warp_smem_bytes']:.3g} "
               f"(split-K) vs {v2['cross_warp_smem_bytes']} (split-Q)")
    numbers = {"problem": p.as_dict(), "hw": hw.name, "runs": runs, "speedup_of_v2": speedups,
               "paper_speedup_range": PAPER_SPEEDUP}
    return Outcome(holds, verdict, numbers)


def plot(outcome: Outcome, path: str) -> None:
    nb = outcome.numbers
    runs = nb["runs"]
    names = list(runs)
    colors = ["tab:orange", "tab:red", "tab:green"]
    fig, axes = figure(3, width=3.6, height=3.8)
    panels = (("tflops", "simulated TFLOP/s (a100)", 1), ("non_matmul_flops", "non-matmul FLOPs + exps (G)", 1e9),
              ("cross_warp_smem_bytes", "cross-warp SMEM bytes (GB)", 1e9))
    for ax, (key, label, unit) in zip(axes, panels, strict=True):
        values = [runs[n][key] / unit for n in names]
        ax.bar([n.replace(" (", "\n(") for n in names], values, color=colors)
        for i, val in enumerate(values):
            ax.text(i, val, f"{val:.3g}", ha="center", va="bottom", fontsize=8)
        ax.set_title(label, fontsize=9)
        ax.tick_params(axis="x", labelsize=8)
    lo, hi = nb["paper_speedup_range"]
    save(fig, path, f"V2 vs V1 on an A100: {nb['speedup_of_v2'][FA1_TILES]:.2f}x over FA1's tiles "
         f"(paper {lo}-{hi}x)")
