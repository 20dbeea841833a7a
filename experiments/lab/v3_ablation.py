"""Claim: each of FA3's three scheduling techniques makes the kernel faster (the FA3 paper's ablation).

The v3 schedule is simulated with all three on and with each one off (its build switches: the same loads,
GEMMs and softmax, only ordered and synchronised differently), on the paper's ablation problem: batch 4,
16 heads, seqlen 8448, head dim 128, non-causal, on an H100. Published (Shah et al. 2024, FlashAttention-3):
Table 2 gives 661 TFLOP/s for FA3, 582 without the intra-warpgroup 2-stage pipelining and 570 without warp
specialisation; Section 3.1 says ping-pong scheduling takes the d128 seqlen-8k forward pass from about 570
to 620-640 TFLOP/s (a different baseline, so its slowdown is compared as a fraction, as are the others).

Ping-pong's effect is the one the simulator misses: its tensor cores take the warpgroups' wgmma in issue
order, so once one warpgroup's GEMMs finish before the other's, their softmaxes stay staggered without the
named barriers (a lone SM whose warpgroups start in lockstep does lose time without them)."""

from __future__ import annotations

from .base import Outcome, figure, profile, save

NAME = "v3-ablation"
CLAIM = "each of FA3's warp specialisation, ping-pong and intra-warpgroup overlap makes v3 faster"
# (switch, label, published TFLOP/s without it, published TFLOP/s with it, source)
SWITCHES = (
    ("warp_specialization", "no warp specialisation", 570.0, 661.0, "FA3 Table 2"),
    ("pingpong", "no ping-pong", 570.0, 630.0, "FA3 Section 3.1 (620-640 with it)"),
    ("intra_overlap", "no intra-warpgroup overlap", 582.0, 661.0, "FA3 Table 2"),
)
PUBLISHED_ALL_ON = 661.0  # FA3 Table 2


def run(quick: bool) -> Outcome:
    from flashsim.algorithms import Problem
    from flashsim.simulator.api import simulate

    hw = profile("h100")
    p = Problem(4, 16, 2048 if quick else 8448, 128, dtype="fp16")
    base = simulate("v3", p, hw)
    rows = [{"switch": "", "label": "all on", "tflops": base.tflops, "time_s": base.time_s, "slowdown": 0.0,
             "published_tflops": PUBLISHED_ALL_ON, "published_slowdown": 0.0, "source": "FA3 Table 2"}]
    for switch, label, without, with_it, source in SWITCHES:
        sim = simulate("v3", p, hw, options={switch: False})
        rows.append({"switch": switch, "label": label, "tflops": sim.tflops, "time_s": sim.time_s,
                     "slowdown": 1 - sim.tflops / base.tflops, "published_tflops": without,
                     "published_slowdown": 1 - without / with_it, "source": source})
    off = rows[1:]
    holds = all(r["tflops"] < base.tflops for r in off)
    sizes = "; ".join(f"{r['label']} {-r['slowdown']:+.1%} (paper {-r['published_slowdown']:+.0%})" for r in off)
    verdict = (f"all on {base.tflops:.0f} TFLOP/s (paper {PUBLISHED_ALL_ON:.0f}); {sizes}"
               + ("" if holds else " -- a switch off is not slower"))
    return Outcome(holds, verdict, {"hw": hw.name, "problem": p.as_dict(), "tiling": base.tiling.as_dict(),
                                    "rows": rows})


def plot(outcome: Outcome, path: str) -> None:
    import numpy as np

    rows = outcome.numbers["rows"]
    fig, ax = figure(width=8.0)
    x = np.arange(len(rows))
    ax.bar(x - 0.2, [r["tflops"] for r in rows], 0.4, label="simulated (v3, h100 profile)")
    ax.bar(x + 0.2, [r["published_tflops"] for r in rows], 0.4, label="published (FA3 paper)", color="tab:grey")
    for i, r in enumerate(rows):
        ax.annotate(f"{r['tflops']:.0f}", (i - 0.2, r["tflops"]), ha="center", va="bottom", fontsize=8)
        ax.annotate(f"{r['published_tflops']:.0f}", (i + 0.2, r["published_tflops"]), ha="center", va="bottom",
                    fontsize=8)
    ax.set_xticks(x, [r["label"].replace("no ", "no\n", 1) for r in rows], fontsize=8)
    ax.set_ylabel("TFLOP/s")
    ax.set_xlabel("published: FA3 Table 2; no ping-pong from its Section 3.1 (570, and 620-640 with it)",
                  fontsize=8)
    ax.set_ylim(0, 1.15 * max(max(r["tflops"], r["published_tflops"]) for r in rows))
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(True, axis="y", alpha=0.3)
    p = outcome.numbers["problem"]
    save(fig, path, f"FA3's ablation as v3 switches (B={p['batch']} H={p['heads']} N={p['seqlen_q']} "
         f"d={p['headdim']}, non-causal)")
