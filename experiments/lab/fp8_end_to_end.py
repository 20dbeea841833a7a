"""Claim: FP8 speeds up the attention kernel, but the quantisation pre-pass that turns bf16 Q, K, V into e4m3
(with block scales and the Hadamard transform) costs about the same for every token, whatever the sequence
length, while attention's work per token grows with it. So FP8 loses end to end on short sequences and wins
only on long ones, sooner at d256, where the GEMMs weigh more. The timing interpreter runs our v3-fp8 (pre-pass
then attention kernel) against v3 in bf16 on the FA2 benchmark's shapes (16k tokens, hidden 2048) on the H200
profile; the H200's own measurements of the same calls (experiments/results/h200/fp8/fp8-bench.json) are set
beside them. The pre-pass's measured instruction count covers d64 and d128; at d256 it runs on its lowered
arithmetic alone, a little fast."""

from __future__ import annotations

import json
from pathlib import Path

from .base import Outcome, figure, profile, save

NAME = "fp8-end-to-end"
CLAIM = "fp8's quantisation pre-pass is a fixed cost per token: fp8 loses end to end on short sequences, wins on long"
TOKENS, HIDDEN = 16384, 2048  # the FA2 benchmark's shapes: batch = 16k / seqlen, heads = 2048 / d
HEADDIMS = (128, 256)
BENCH = Path(__file__).resolve().parents[1] / "results/h200/fp8/fp8-bench.json"


def measured() -> dict:
    """(d, seqlen) -> the H200's bf16-over-fp8 end-to-end time ratio, non-causal, where it was measured."""
    if not BENCH.is_file():
        return {}
    rows = json.loads(BENCH.read_text())["rows"]
    return {(r["d"], r["seqlen"]): r["v3 ms"] / r["v3-fp8 ms"] for r in rows if not r["causal"]}


def run(quick: bool) -> Outcome:
    from flashsim.algorithms import Problem
    from flashsim.simulator.api import simulate

    hw = profile("h200")
    seqlens = (1024, 16384) if quick else (1024, 2048, 4096, 8192, 16384)
    bench = measured()
    rows = []
    for d in HEADDIMS:
        for n in seqlens:
            b, h = TOKENS // n, HIDDEN // d
            fp8 = simulate("v3-fp8", Problem(b, h, n, d, dtype="fp8"), hw)
            bf16 = simulate("v3", Problem(b, h, n, d), hw)
            prepass, attention = (k["cycles"] / k["clock_hz"] for k in fp8.kernels)
            rows.append({"d": d, "seqlen": n, "batch": b, "heads": h, "bf16_s": bf16.kernel_time_s,
                         "fp8_s": fp8.kernel_time_s, "prepass_s": prepass, "attention_s": attention,
                         "end_to_end": bf16.kernel_time_s / fp8.kernel_time_s,
                         "kernel_only": bf16.kernel_time_s / attention,
                         "measured_end_to_end": bench.get((d, n))})
    by_d = {d: [r for r in rows if r["d"] == d] for d in HEADDIMS}
    holds = all(
        all(r["kernel_only"] > 1 for r in rs)
        and rs[0]["end_to_end"] < 1 < rs[-1]["end_to_end"]
        and all(a["end_to_end"] < b["end_to_end"] for a, b in zip(rs, rs[1:], strict=False))
        for rs in by_d.values()
    ) and all(a["end_to_end"] <= b["end_to_end"] for a, b in zip(by_d[128], by_d[256], strict=True))
    def ratio(r: dict) -> str:
        meas = r["measured_end_to_end"]
        return f"{r['end_to_end']:.2f}x" + (f" (H200: {meas:.2f}x)" if meas else "")

    parts = []
    for d, rs in by_d.items():
        first, last = rs[0], rs[-1]
        parts.append(f"d{d}: end to end {ratio(first)} at N {first['seqlen']} -> {ratio(last)} at N "
                     f"{last['seqlen']}, the kernel alone "
                     f"{min(r['kernel_only'] for r in rs):.2f}-{max(r['kernel_only'] for r in rs):.2f}x, the pre-pass "
                     f"{first['prepass_s'] * 1e6:.0f}-{max(r['prepass_s'] for r in rs) * 1e6:.0f} us")
    verdict = "bf16 time over fp8 time on the H200 profile: " + "; ".join(parts)
    return Outcome(holds, verdict, {"hw": hw.name, "tokens": TOKENS, "hidden": HIDDEN, "rows": rows})


def plot(outcome: Outcome, path: str) -> None:
    fig, (ax, bx) = figure(ncols=2, width=5.0)
    colors = {128: "tab:blue", 256: "tab:orange"}
    for d, color in colors.items():
        rs = [r for r in outcome.numbers["rows"] if r["d"] == d]
        n = [r["seqlen"] for r in rs]
        ax.plot(n, [r["end_to_end"] for r in rs], "o-", color=color, label=f"d{d} end to end (simulated)")
        ax.plot(n, [r["kernel_only"] for r in rs], "--", color=color, label=f"d{d} attention kernel alone")
        meas = [(r["seqlen"], r["measured_end_to_end"]) for r in rs if r["measured_end_to_end"]]
        if meas:
            ax.plot(*zip(*meas, strict=True), "x", color=color, markersize=9, label=f"d{d} end to end (H200)")
        bx.plot(n, [100 * r["prepass_s"] / r["fp8_s"] for r in rs], "o-", color=color,
                label=f"d{d}: pre-pass {min(r['prepass_s'] for r in rs) * 1e6:.0f}-"
                      f"{max(r['prepass_s'] for r in rs) * 1e6:.0f} us a call")
    ax.axhline(1.0, color="grey", linewidth=1)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("sequence length (16k tokens a call)")
    ax.set_ylabel("speed-up over bf16 v3")
    ax.legend(fontsize=7)
    ax.grid(True, alpha=0.3)
    bx.set_xscale("log", base=2)
    bx.set_ylim(0, 100)
    bx.set_xlabel("sequence length (16k tokens a call)")
    bx.set_ylabel("pre-pass share of the fp8 call (%, simulated)")
    bx.legend(fontsize=7)
    bx.grid(True, alpha=0.3)
    save(fig, path, "FP8 end to end: the pre-pass costs the same for every token")
