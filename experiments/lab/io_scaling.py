"""Claim (FlashAttention Theorem 2): standard attention moves Theta(N^2) bytes of global memory whatever the
on-chip memory M; FlashAttention moves Theta(N^2 d^2 / M). The counting interpreter's bytes on the sweeps of
`flashsim io` (N, d and M varied one at a time), with exponents fitted on log-log axes."""

from __future__ import annotations

from .base import Outcome, figure, profile, save

NAME = "io-complexity"
CLAIM = "global-memory bytes grow as N^2 for standard attention and as N^2 d^2 / M for FlashAttention"
EXPONENT_TOLERANCE = 0.15
EXPECTED = {"standard": {"N": 2.0, "M": 0.0}, "v1": {"N": 2.0, "d": 2.0, "M": -1.0},
            "v2": {"N": 2.0, "d": 2.0, "M": -1.0}}
SWEEPS = ("N", "d", "M")


def run(quick: bool) -> Outcome:
    from dataclasses import asdict

    from flashsim.experiments import io_complexity as io

    hw = profile("h100")
    plan = [pt for pt in io.plan(hw, "fp16") if pt[0] in SWEEPS]
    if quick:  # two points per sweep still fix a slope; the ends of each sweep keep its range
        plan = [pt for i, pt in enumerate(plan) if i % len(io.PASSES) in (0, len(io.PASSES) - 1)]
    points = [io.measure(sweep, algo, n, d, m, hw, "fp16") for sweep, n, d, m in plan for algo in io.ALGOS]
    fits = io.fits(points)
    misses = {f"{algo}/{var}": fits[algo][var] for algo, want in EXPECTED.items() for var, x in want.items()
              if abs(fits[algo][var] - x) > EXPONENT_TOLERANCE}
    holds = not misses
    verdict = ("fitted exponents (N, d, M): " + "; ".join(
        f"{a} {f['N']:.2f}, {f['d']:.2f}, {f['M']:.2f}" for a, f in fits.items())
        + f"; Theorem 2: standard N^2 M^0, flash N^2 d^2 M^-1 (tolerance {EXPONENT_TOLERANCE})"
        + (f"; off: {misses}" if misses else ""))
    numbers = {"hw": hw.name, "dtype": "fp16", "fits": fits, "expected": EXPECTED,
               "tolerance": EXPONENT_TOLERANCE, "points": [asdict(p) for p in points]}
    return Outcome(holds, verdict, numbers)


def plot(outcome: Outcome, path: str) -> None:
    nb = outcome.numbers
    fig, axes = figure(3, width=4.0, height=3.6)
    attrs = {"N": ("N", "N (d, M fixed)"), "d": ("d", "d (N, M fixed)"), "M": ("M_elements", "M elements (N, d fixed)")}
    for ax, sweep in zip(axes, SWEEPS, strict=True):
        attr, label = attrs[sweep]
        for algo, marker in zip(nb["fits"], "sox", strict=True):
            sel = [p for p in nb["points"] if p["algo"] == algo and p["sweep"] == sweep]
            ax.loglog([p[attr] for p in sel], [p["hbm_bytes"] for p in sel], marker=marker,
                      label=f"{algo} (slope {nb['fits'][algo][sweep]:.2f})")
        ax.set_xlabel(label)
        ax.set_ylabel("global-memory bytes")
        ax.legend(fontsize=7)
        ax.grid(True, which="both", alpha=0.3)
    save(fig, path, "IO complexity: standard ~ N^2, FlashAttention ~ N^2 d^2 / M (counted bytes, fp16)")
