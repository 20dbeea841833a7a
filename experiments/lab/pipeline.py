"""Claim: with a ring of >= 2 K/V stages (FA3's TMA producer), loads overlap compute, so a kernel takes
about max(load time, compute time) plus one block's start-up, not their sum.

load: the compulsory HBM bytes (Q, K, V) at the profile's bandwidth (the simulator's HBM roofline);
compute: the same kernel simulated with 10x the HBM bandwidth, so that loads cost next to nothing (its
tensor-core and SFU rooflines are reported beside it: softmax and GEMMs do not overlap perfectly, so compute
sits above both); start-up: every SM's first Q, K and V tiles through HBM, plus its latency. HBM bandwidth
is scaled down (a what-if profile) until loads are as long as compute."""

from __future__ import annotations

from .base import Outcome, figure, profile, save

NAME = "pipeline-overlap"
CLAIM = "v3 with 2-4 stages takes max(load, compute) + one block's start-up, not load + compute"
STAGES = (2, 3, 4)
BANDWIDTH_FACTORS = (1.0, 0.25, 0.1)
AMPLE = 10.0  # bandwidth factor at which the compute time is measured
TOLERANCE = 0.15


def run(quick: bool) -> Outcome:
    from flashsim.algorithms import Problem, Tiling
    from flashsim.simulator.api import simulate

    base = profile("h100")
    p = Problem(2, 16, 4096, 64, dtype="fp16")  # > 4 waves of tiles: sampled, so fast
    stages = (2,) if quick else STAGES
    rows = []
    for s in stages:
        t = Tiling(192, 192, 16, s)  # FA3's d64 tile; 4 stages still fit the H100's shared memory
        ample = base.with_overrides({"hbm_bandwidth_bytes_per_s": base.hbm_bandwidth_bytes_per_s * AMPLE})
        compute = simulate("v3", p, ample, t).time_s
        for f in BANDWIDTH_FACTORS:
            hw = base.with_overrides({"hbm_bandwidth_bytes_per_s": base.hbm_bandwidth_bytes_per_s * f})
            sim = simulate("v3", p, hw, t)
            load = sim.roofline["hbm"]
            first_tiles = (t.block_m + 2 * t.block_n) * p.headdim * p.elem_bytes * hw.sm_count
            startup = first_tiles / hw.hbm_bandwidth_bytes_per_s + hw.hbm_latency_cycles / hw.sm_clock_hz
            predicted = max(load, compute) + startup
            rows.append({"stages": s, "bandwidth_factor": f, "time_s": sim.time_s, "load_s": load,
                         "compute_s": compute, "startup_s": startup, "predicted_s": predicted,
                         "serial_s": load + compute, "error": predicted / sim.time_s - 1,
                         "serial_error": (load + compute) / sim.time_s - 1, "bound_by": sim.bound_by,
                         "tensor_roofline_s": sim.roofline["tensor"], "sfu_roofline_s": sim.roofline["sfu"]})
    worst = max(rows, key=lambda r: abs(r["error"]))
    slow = [r for r in rows if r["bandwidth_factor"] == min(BANDWIDTH_FACTORS)]
    holds = abs(worst["error"]) <= TOLERANCE and all(abs(r["serial_error"]) > abs(r["error"]) for r in slow)
    verdict = (f"simulated vs max(load, compute) + start-up: worst {worst['error']:+.1%} (stages "
               f"{worst['stages']}, HBM x{worst['bandwidth_factor']}; tolerance {TOLERANCE:.0%}); at HBM "
               f"x{slow[0]['bandwidth_factor']} load {slow[0]['load_s'] * 1e6:.0f} us, compute "
               f"{slow[0]['compute_s'] * 1e6:.0f} us, simulated {slow[0]['time_s'] * 1e6:.0f} us; the sum would be "
               f"{slow[0]['serial_error']:+.0%} off")
    return Outcome(holds, verdict, {"hw": base.name, "problem": p.as_dict(), "tile": [192, 192],
                                    "rows": rows, "tolerance": TOLERANCE, "ample_factor": AMPLE})


def plot(outcome: Outcome, path: str) -> None:
    rows = outcome.numbers["rows"]
    fig, ax = figure(width=8.5)
    us = 1e6
    for s, marker in zip(sorted({r["stages"] for r in rows}), "os^", strict=False):
        sel = [r for r in rows if r["stages"] == s]
        ax.plot([r["bandwidth_factor"] for r in sel], [r["time_s"] * us for r in sel], marker=marker,
                label=f"simulated, {s} stages")
    sel = [r for r in rows if r["stages"] == rows[0]["stages"]]
    x = [r["bandwidth_factor"] for r in sel]
    ax.plot(x, [r["predicted_s"] * us for r in sel], "k--", label="max(load, compute) + start-up")
    ax.plot(x, [r["serial_s"] * us for r in sel], ":", color="tab:red", label="load + compute")
    ax.plot(x, [r["load_s"] * us for r in sel], ":", color="grey", label="load alone (HBM roofline)")
    ax.plot(x, [r["compute_s"] * us for r in sel], "-.", color="tab:purple", label="compute alone (10x HBM)")
    ax.set_xscale("log")
    ax.set_xlabel("HBM bandwidth, x the h100 profile's")
    ax.set_ylabel("time (us)")
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.0, 0.5))
    ax.grid(True, which="both", alpha=0.3)
    p = outcome.numbers["problem"]
    save(fig, path, f"Pipelined loads hide behind compute (v3 192x192, B={p['batch']} H={p['heads']} "
         f"N={p['seqlen_q']} d={p['headdim']})")
