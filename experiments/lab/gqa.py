"""Claim: grouped-query attention (kv_heads = heads / g) cuts the K/V bytes read from HBM by g.

Two interpreters answer at two levels. The counting interpreter counts requests to global memory: every
query head's thread blocks still ask for their K/V head's tiles, so those requests do not fall with g. The
timing interpreter's HBM bytes do: the g query heads sharing a K/V head run at about the same time, and all
but the first find the tiles in L2."""

from __future__ import annotations

from .base import Outcome, figure, profile, save

NAME = "gqa-kv-bytes"
CLAIM = "GQA with g query heads per K/V head reads 1/g of the K/V bytes from HBM"
GROUPS = (1, 2, 4, 8)
TOLERANCE = 0.02


def run(quick: bool) -> Outcome:
    from flashsim.algorithms import Problem, resolve_tiling
    from flashsim.algorithms.counting import count_io
    from flashsim.algorithms.schedules import build
    from flashsim.simulator.api import simulate

    hw = profile("h100")
    heads, n, d = (8, 1024, 64) if quick else (32, 4096, 128)
    rows = []
    for g in GROUPS:
        p = Problem(1, heads, n, d, kv_heads=heads // g, dtype="bf16")
        t = resolve_tiling("v2", p, hw)
        counts = count_io(build("v2", p, t))
        sim = simulate("v2", p, hw, t)
        q_bytes = heads * n * d * p.elem_bytes  # Q is read from HBM once whatever g is
        rows.append({"g": g, "kv_heads": heads // g,
                     "kv_tensor_bytes": 2 * (heads // g) * n * d * p.elem_bytes,
                     "kv_gmem_requests_bytes": counts.gmem_read["K"] + counts.gmem_read["V"],
                     "kv_hbm_bytes_simulated": sim.bytes["hbm_read"] - q_bytes,
                     "time_s": sim.time_s})
    base = rows[0]["kv_hbm_bytes_simulated"]
    holds = all(abs(r["kv_hbm_bytes_simulated"] * r["g"] / base - 1) <= TOLERANCE for r in rows)
    verdict = ("K/V bytes from HBM (simulated) " + ", ".join(
        f"g={r['g']}: {r['kv_hbm_bytes_simulated'] / 2**20:.3g} MiB" for r in rows)
        + f" (1/g within {TOLERANCE:.0%}); K/V requests to global memory "
        + " -> ".join(f"{r['kv_gmem_requests_bytes'] / 2**20:.3g}" for r in rows)
        + " MiB: each query head's blocks still ask for their K/V tiles, the L2 serves the repeats")
    return Outcome(holds, verdict, {"hw": hw.name, "heads": heads, "seqlen": n, "headdim": d, "dtype": "bf16",
                                    "rows": rows, "tolerance": TOLERANCE})


def plot(outcome: Outcome, path: str) -> None:
    rows = outcome.numbers["rows"]
    g = [r["g"] for r in rows]
    mib = 2**20
    fig, ax = figure(width=6.5)
    ax.plot(g, [r["kv_gmem_requests_bytes"] / mib for r in rows], "s--",
            label="K/V requests to global memory (counted)")
    ax.plot(g, [r["kv_hbm_bytes_simulated"] / mib for r in rows], "o-", label="K/V bytes from HBM (simulated)")
    ax.plot(g, [rows[0]["kv_hbm_bytes_simulated"] / x / mib for x in g], ":", color="grey", label="1 / g")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("g = query heads per K/V head")
    ax.set_ylabel("MiB")
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    nb = outcome.numbers
    save(fig, path, f"GQA cuts K/V HBM bytes as 1/g (v2, H={nb['heads']} N={nb['seqlen']} d={nb['headdim']}, "
         f"{nb['hw']})")
