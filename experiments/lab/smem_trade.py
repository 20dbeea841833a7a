"""Claim: on-chip memory buys global-memory traffic. FlashAttention's bytes fall as 1 / M while the tiles
grow with the shared memory M, until one K/V block holds the whole sequence (Bc = N, M = 4 N d elements):
then they settle at one pass over Q, K, V and O. Standard attention's bytes do not depend on M at all.

M is set through the profile (smem_per_block_max_bytes, as `flashsim io` does); V1 takes Algorithm 1's tiles
from it, V2 square tiles of V1's Bc (see experiments/io_complexity.py)."""

from __future__ import annotations

from .base import Outcome, figure, profile, save

NAME = "smem-trade"
CLAIM = "global-memory bytes fall as on-chip memory M grows, down to one pass over Q, K, V, O once Bc = N"
BLOCKS = (16, 32, 64, 128, 256, 512, 1024, 2048)  # Bc = M / 4d
ONE_PASS_TOLERANCE = 0.02  # V2 also writes its logsumexp, N * 4 bytes beside the 4 N d elements


def run(quick: bool) -> Outcome:
    from flashsim.experiments import io_complexity as io

    hw = profile("h100")
    n, d, dtype = (256, 64, "fp16") if quick else (1024, 64, "fp16")
    e = 2
    one_pass = 4 * n * d * e
    blocks = [b for b in BLOCKS if b <= 2 * n]
    rows = []
    for bc in blocks:
        m_bytes = 4 * d * bc * e
        for algo in io.ALGOS:
            pt = io.measure("M", algo, n, d, m_bytes, hw, dtype)
            rows.append({"algo": algo, "block_n": bc, "M_bytes": m_bytes, "M_over_Nd": 4 * bc / n,
                         "gmem_bytes": pt.hbm_bytes, "passes": pt.hbm_bytes / one_pass})
    checks = []
    for algo in ("v1", "v2"):
        falling = [r["gmem_bytes"] for r in rows if r["algo"] == algo and r["block_n"] <= n]
        settled = [r["passes"] for r in rows if r["algo"] == algo and r["block_n"] >= n]
        checks.append(all(a > b for a, b in zip(falling, falling[1:], strict=False))
                      and all(abs(x - 1) <= ONE_PASS_TOLERANCE for x in settled))
    by_algo = {a: [r for r in rows if r["algo"] == a] for a in io.ALGOS}
    std = {r["gmem_bytes"] for r in by_algo["standard"]}
    holds = all(checks) and len(std) == 1
    first = {a: next(r for r in rows if r["algo"] == a) for a in io.ALGOS}
    last = {a: [r for r in rows if r["algo"] == a][-1] for a in io.ALGOS}
    verdict = (f"N={n}, d={d}: from Bc={blocks[0]} to Bc=N, v1 {first['v1']['passes']:.1f} -> "
               f"{last['v1']['passes']:.2f} passes, v2 {first['v2']['passes']:.1f} -> {last['v2']['passes']:.2f} "
               f"(one pass = Q, K, V, O once), flat past M = 4 N d; standard "
               f"{first['standard']['passes']:.1f} passes at every M")
    return Outcome(holds, verdict, {"hw": hw.name, "seqlen": n, "headdim": d, "dtype": dtype,
                                    "one_pass_bytes": one_pass, "rows": rows})


def plot(outcome: Outcome, path: str) -> None:
    nb = outcome.numbers
    fig, ax = figure(width=6.5)
    for algo, marker in (("standard", "s"), ("v1", "o"), ("v2", "x")):
        sel = [r for r in nb["rows"] if r["algo"] == algo]
        ax.loglog([r["M_over_Nd"] for r in sel], [r["passes"] for r in sel], marker=marker, label=algo)
    ax.axvline(4.0, color="grey", linestyle="--", linewidth=1, label="Bc = N (M = 4 N d)")
    ax.axhline(1.0, color="grey", linestyle=":", linewidth=1, label="one pass over Q, K, V, O")
    ax.set_xlabel("on-chip memory M / (N d) elements")
    ax.set_ylabel("global-memory bytes / one pass")
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    save(fig, path, f"The tiling trade: more SMEM, fewer bytes, down to one pass (N={nb['seqlen']}, d={nb['headdim']})")
