"""Claim: FlashAttention does the same matmul FLOPs as standard attention but moves far fewer bytes of
global memory, and so runs faster. The counting interpreter counts the FLOPs and bytes of both programs;
the timing interpreter times them on an H100."""

from __future__ import annotations

from .base import Outcome, figure, profile, save

NAME = "same-flops-fewer-bytes"
CLAIM = "standard and v2 do equal matmul FLOPs; v2 moves far fewer global-memory bytes and runs faster"
FLOPS_TOLERANCE = 0.01
FEWER_BYTES_FACTOR = 4.0  # "far fewer": at most a quarter of standard's bytes


def run(quick: bool) -> Outcome:
    from flashsim.algorithms import Problem, resolve_tiling
    from flashsim.algorithms.counting import count_io
    from flashsim.algorithms.schedules import build
    from flashsim.simulator.api import simulate

    hw = profile("h100")
    p = Problem(1, 4, 2048, 64, dtype="fp16") if quick else Problem(2, 16, 4096, 64, dtype="fp16")
    per = {}
    for algo in ("standard", "v2"):
        counts = count_io(build(algo, p, resolve_tiling(algo, p, hw)))
        sim = simulate(algo, p, hw)
        per[algo] = {"matmul_flops": sum(counts.flops.values()), "gmem_bytes": counts.gmem_bytes,
                     "hbm_bytes_simulated": sim.bytes["hbm_read"] + sim.bytes["hbm_write"],
                     "time_s": sim.time_s, "tflops": sim.tflops, "bound_by": sim.bound_by}
    std, v2 = per["standard"], per["v2"]
    flops_equal = all(abs(x["matmul_flops"] - p.flops()) <= FLOPS_TOLERANCE * p.flops() for x in per.values())
    bytes_ratio = std["gmem_bytes"] / v2["gmem_bytes"]
    speedup = std["time_s"] / v2["time_s"]
    holds = flops_equal and bytes_ratio >= FEWER_BYTES_FACTOR and speedup > 1.0
    verdict = (f"matmul FLOPs {std['matmul_flops']:.3g} vs {v2['matmul_flops']:.3g} (problem: {p.flops():.3g}); "
               f"global-memory bytes {std['gmem_bytes'] / 2**20:.0f} MiB vs {v2['gmem_bytes'] / 2**20:.0f} MiB "
               f"({bytes_ratio:.1f}x fewer); time {std['time_s'] * 1e6:.0f} us vs {v2['time_s'] * 1e6:.0f} us "
               f"({speedup:.2f}x faster, h100)")
    numbers = {"problem": p.as_dict(), "hw": hw.name, "standard": std, "v2": v2, "bytes_ratio": bytes_ratio,
               "speedup": speedup, "flops_tolerance": FLOPS_TOLERANCE, "fewer_bytes_factor": FEWER_BYTES_FACTOR}
    return Outcome(holds, verdict, numbers)


def plot(outcome: Outcome, path: str) -> None:
    nb = outcome.numbers
    std, v2 = nb["standard"], nb["v2"]
    fig, axes = figure(3, width=3.2, height=3.6)
    panels = (("matmul_flops", "matmul FLOPs (G)", 1e9), ("gmem_bytes", "global-memory bytes (MiB)", 2**20),
              ("time_s", "simulated time (us)", 1e-6))
    for ax, (key, label, unit) in zip(axes, panels, strict=True):
        values = [std[key] / unit, v2[key] / unit]
        ax.bar(["standard", "v2"], values, color=["tab:red", "tab:green"])
        for i, val in enumerate(values):
            ax.text(i, val, f"{val:.3g}", ha="center", va="bottom", fontsize=9)
        ax.set_title(label, fontsize=9)
    p = nb["problem"]
    save(fig, path, f"Same FLOPs, fewer bytes, faster (B={p['batch']} H={p['heads']} N={p['seqlen_q']} "
         f"d={p['headdim']} fp16, {nb['hw']})")
