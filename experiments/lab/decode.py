"""Claim: decoding one token is memory-bound. Its arithmetic intensity (FLOPs per byte of HBM traffic) is
about 1, far below the ridge point of the GPU (peak tensor FLOP/s over HBM bytes/s, ~300 on an H100),
while prefill of the same sequence lies far above it. Bytes, time and what bounds the kernel are the timing
interpreter's (its HBM bytes: the counting interpreter's requests to global memory include K/V re-reads that
the L2 serves; their intensity is reported too)."""

from __future__ import annotations

from .base import Outcome, figure, profile, save

NAME = "decode-memory-bound"
CLAIM = "one-token decode has arithmetic intensity ~1 FLOP/byte, far below the ridge point: memory-bound"
BELOW_RIDGE = 0.1  # decode's intensity must be under a tenth of the ridge point, prefill's above it


def run(quick: bool) -> Outcome:
    from flashsim.algorithms import Problem, resolve_tiling
    from flashsim.algorithms.counting import count_io
    from flashsim.algorithms.schedules import build
    from flashsim.simulator.api import simulate

    hw = profile("h100")
    batch, heads, n = (4, 16, 2048) if quick else (16, 16, 4096)
    ridge = hw.tensor_peak_flops_per_s("bf16", "mma_sync") / hw.hbm_bandwidth_bytes_per_s
    rows = {}
    for name, nq in (("decode", 1), ("prefill", n)):
        p = Problem(batch, heads, nq, 128, seqlen_k=n, dtype="bf16")
        t = resolve_tiling("v2", p, hw)
        gmem = count_io(build("v2", p, t)).gmem_bytes
        sim = simulate("v2", p, hw, t)
        hbm = sim.bytes["hbm_read"] + sim.bytes["hbm_write"]
        rows[name] = {"problem": p.as_dict(), "flops": p.flops(), "gmem_bytes": gmem, "hbm_bytes": hbm,
                      "intensity": p.flops() / hbm, "intensity_gmem_requests": p.flops() / gmem,
                      "time_s": sim.time_s, "bound_by": sim.bound_by,
                      "hbm_time_s": hbm / hw.hbm_bandwidth_bytes_per_s, "tflops": sim.tflops}
    dec, pre = rows["decode"], rows["prefill"]
    holds = dec["intensity"] < BELOW_RIDGE * ridge and pre["intensity"] > ridge
    verdict = (f"decode {dec['intensity']:.2f} FLOP/byte, prefill {pre['intensity']:.0f}, ridge point {ridge:.0f} "
               f"(h100 mma.sync bf16 peak / HBM bandwidth); decode simulated {dec['time_s'] * 1e6:.0f} us, bound by "
               f"{dec['bound_by']}, {dec['tflops']:.2f} TFLOP/s; reading its bytes at full HBM bandwidth takes "
               f"{dec['hbm_time_s'] * 1e6:.0f} us")
    return Outcome(holds, verdict, {"hw": hw.name, "ridge_flops_per_byte": ridge, "rows": rows,
                                    "peak_flops_per_s": hw.tensor_peak_flops_per_s("bf16", "mma_sync"),
                                    "hbm_bytes_per_s": hw.hbm_bandwidth_bytes_per_s})


def plot(outcome: Outcome, path: str) -> None:
    import numpy as np

    nb = outcome.numbers
    peak, bw = nb["peak_flops_per_s"], nb["hbm_bytes_per_s"]
    fig, ax = figure(width=6.5)
    x = np.logspace(-1, 4, 200)
    ax.loglog(x, np.minimum(peak, x * bw) / 1e12, color="black", label="roofline (h100, mma.sync bf16)")
    for name, marker in (("decode", "o"), ("prefill", "s")):
        r = nb["rows"][name]
        ax.loglog([r["intensity"]], [r["tflops"]], marker=marker, markersize=9, linestyle="none",
                  label=f"{name}: {r['intensity']:.3g} FLOP/B, {r['tflops']:.3g} TFLOP/s simulated")
    ax.axvline(nb["ridge_flops_per_byte"], color="grey", linestyle="--", linewidth=1,
               label=f"ridge point {nb['ridge_flops_per_byte']:.0f} FLOP/B")
    ax.set_xlabel("arithmetic intensity (FLOPs per HBM byte)")
    ax.set_ylabel("TFLOP/s")
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    save(fig, path, "Decode is memory-bound: one query row per K/V byte")
