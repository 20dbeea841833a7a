"""Which form of ldmatrix / mma.sync interference the ldsm_form sweep supports.

    python3 -m flashsim.experiments.ldsm_form_fit CALIBRATION.json [OUT.md]

From the sweep's points alone (calibrate --only ldsm_form): each point's loads-alone cycles (its ldmatrix
instructions at the per-instruction cost that loads-only points of the same kind took at the same warps per
SM) and products-alone cycles (its mma.sync at the products-only point's cost), and each candidate form's
prediction of the point's cycles per warp k-step from those two, with its one coefficient fitted by least
squares on the relative error. Writes the table of points and forms.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

# form name -> (prediction from loads-alone L, products-alone P, the coefficient; what it says)
FORMS: dict[str, tuple[Callable[[float, float, float], float], str]] = {
    "overlap": (lambda L, P, s: max(L, P), "the larger alone (no interference; no coefficient)"),
    "port_share": (lambda L, P, s: max(P, L + s * P), "loads plus s of the products' cycles on one port, "
                   "against the products (the form before this sweep)"),
    "min_share": (lambda L, P, s: max(L, P) + s * min(L, P), "the larger alone plus s of the smaller"),
    "serial": (lambda L, P, s: L + P, "the two in turn (no coefficient)"),
    "soft_max": (lambda L, P, s: (L ** s + P ** s) ** (1 / s) if s > 0 else max(L, P),
                 "(L^s + P^s)^(1/s): s large is the larger, s = 1 the sum"),
}


FIXED = frozenset({"overlap", "serial"})  # forms without a coefficient


def _cost_tables(points: list[dict]) -> tuple[dict, dict]:
    """Per-instruction cycles at each warps per SM: ldmatrix by (x, trans) from the loads-only points (the
    median over their load counts), mma.sync from the products-only point."""
    load: dict[tuple, list[float]] = {}
    mma: dict[int, float] = {}
    for p in points:
        c = p.get("cycles_per_warp_kstep")
        if c is None or p["kind"] != "form":
            continue
        if p["mma"] == 0:
            load.setdefault((p["ldsm_x"], p["ldsm_trans"] > 0, p["warps_per_sm"]), []).append(c / p["ldsm"])
        elif p["ldsm"] == 0:
            mma[p["warps_per_sm"]] = c / p["mma"]
    return {k: float(np.median(v)) for k, v in load.items()}, mma


def alone(p: dict, load: dict, mma: dict) -> tuple[float, float] | None:
    """(loads-alone, products-alone) cycles per warp k-step of a point, or None where a cost is missing."""
    w = p["warps_per_sm"]
    if w not in mma:
        return None
    trans, plain = p["ldsm_trans"], p["ldsm"] - p["ldsm_trans"]
    parts = []
    for count, is_trans in ((plain, False), (trans, True)):
        if count:
            cost = load.get((p["ldsm_x"], is_trans, w))
            if cost is None:
                return None
            parts.append(count * cost)
    return float(sum(parts)), p["mma"] * mma[w]


def fit(rows: list[tuple[float, float, float]], form: Callable) -> tuple[float, float]:
    """(coefficient, RMS relative error) of a form over (L, P, measured) rows; a grid then a refinement."""
    def rms(s: float) -> float:
        return float(np.sqrt(np.mean([(form(L, P, s) / m - 1) ** 2 for L, P, m in rows])))

    grid = np.linspace(0.0, 1.0, 101) if form is not FORMS["soft_max"][0] else np.linspace(1.0, 12.0, 111)
    best = min(grid, key=rms)
    step = grid[1] - grid[0]
    fine = np.linspace(best - step, best + step, 41)
    best = min(fine, key=rms)
    return float(best), rms(best)


def analyse(points: list[dict]) -> dict:
    load, mma = _cost_tables(points)
    rows = []
    for p in points:
        c = p.get("cycles_per_warp_kstep")
        if c is None or p["mma"] == 0 or p["ldsm"] == 0 or p["kind"] == "split":
            continue
        la = alone(p, load, mma)
        if la is not None:
            rows.append({**p, "loads_alone": la[0], "products_alone": la[1]})
    dependent = [r for r in rows if r.get("products_wait_on_loads", True)]
    forms = _fit_forms(dependent)
    for name, (form, _) in FORMS.items():
        for r in rows:
            r[f"pred_{name}"] = form(r["loads_alone"], r["products_alone"], forms[name]["coefficient"] or 0.0)
    subsets = {"every point whose products wait on its loads": dependent}
    for w in sorted({r["warps_per_sm"] for r in rows}):
        subsets[f"our kernels' k-steps (tile_*), {w} warps per SM"] = [
            r for r in rows if r["kind"] == "tile" and r["warps_per_sm"] == w]
        subsets[f"form_*_m8 (dependent), {w} warps per SM"] = [
            r for r in dependent if r["kind"] == "form" and r["mma"] == 8 and r["warps_per_sm"] == w]
    return {"load_cycles_per_instr": {f"x{k[0]}{'t' if k[1] else ''}_w{k[2]}": v for k, v in load.items()},
            "mma_cycles_per_instr": mma, "forms": forms, "rows": rows,
            "subsets": {k: {"n": len(v), **_fit_forms(v)} for k, v in subsets.items() if v}}


def _fit_forms(rows: list[dict]) -> dict:
    data = [(r["loads_alone"], r["products_alone"], r["cycles_per_warp_kstep"]) for r in rows]
    out = {}
    for name, (form, what) in FORMS.items():
        s, err = fit(data, form)
        out[name] = {"coefficient": None if name in FIXED else s, "rms_relative_error": err, "what": what}
    return out


# the warps per SM our mma.sync kernels run at (v2 forward: 2 blocks of 4 warps; v2 backward: 1 block of 8)
KERNEL_WARPS_PER_SM = 8


def unhidden_fraction(points: list[dict], warps: int = KERNEL_WARPS_PER_SM) -> tuple[float, float, int]:
    """The profile's mma_sync_ldsm_unhidden_fraction: the min_share coefficient fitted to the sweep's tile
    points (our kernels' own k-steps) at `warps` per SM; with its RMS relative error and the point count."""
    rows = [r for r in analyse(points)["rows"] if r["kind"] == "tile" and r["warps_per_sm"] == warps]
    if not rows:
        raise ValueError(f"no tile points at {warps} warps per SM")
    s, err = fit([(r["loads_alone"], r["products_alone"], r["cycles_per_warp_kstep"]) for r in rows],
                 FORMS["min_share"][0])
    return s, err, len(rows)


def fill_port_fraction(points: list[dict], warps: int = KERNEL_WARPS_PER_SM,
                       kernel: str = "fill_l4x4_m0") -> tuple[float, dict]:  # fmt: skip
    """The profile's smem_fill_port_fraction: the shared-memory load rate the loading warps lose while the
    other warps' cp.async copies fill shared memory (fill_* against idle_* at `warps` per SM), per byte of
    those fills; with the rates it came from. kernel "tmafill_l4x4_m0": the same for the copy engine's (TMA's)
    bulk copies."""
    at = {p["kernel"]: p for p in points if p["warps_per_sm"] == warps and p.get("cycles_per_warp_kstep")}
    fill, idle = at.get(kernel), at.get("idle_l4x4_m0")
    if fill is None or idle is None:
        raise ValueError(f"no {kernel} and idle points at {warps} warps per SM")
    lost = idle["smem_bytes_per_clk_per_sm"] - fill["smem_bytes_per_clk_per_sm"]
    rates = {"loads_alone": idle["smem_bytes_per_clk_per_sm"], "loads_beside_fills": fill["smem_bytes_per_clk_per_sm"],
             "fills": fill["fill_bytes_per_clk_per_sm"]}
    return min(1.0, max(0.0, lost / fill["fill_bytes_per_clk_per_sm"])), rates


SUB_PARTITIONS = 4  # per SM (Hopper, Ampere): a block's warps are dealt out over them


def latency_form(loads: float, products: float, latency: float, warps: int) -> float:
    """A k-step with n = warps / 4 warps per sub-partition: its products, or its loads plus the part of
    their latency the sub-partition's n warps leave exposed, latency / n^2."""
    n = max(1.0, warps / SUB_PARTITIONS)
    return max(products, loads + latency / (n * n))


def load_latency(points: list[dict]) -> tuple[float, float, int]:
    """The profile's mma_sync_ldsm_latency_cycles: the latency of latency_form fitted to the sweep's tile
    points (our kernels' own k-steps) at every warps per SM at once; with its RMS relative error and the
    point count."""
    rows = [r for r in analyse(points)["rows"] if r["kind"] == "tile"]
    if not rows:
        raise ValueError("no tile points")

    def rms(latency: float) -> float:
        return float(np.sqrt(np.mean([(latency_form(r["loads_alone"], r["products_alone"], latency,
                                                    r["warps_per_sm"]) / r["cycles_per_warp_kstep"] - 1) ** 2
                                      for r in rows])))

    best = min(np.linspace(0.0, 200.0, 401), key=rms)
    best = float(min(np.linspace(best - 0.5, best + 0.5, 51), key=rms))
    return best, rms(best), len(rows)


def markdown(result: dict) -> str:
    names = list(FORMS)
    lines = ["Each form fitted to a subset of the points: coefficient / RMS relative error.", "",
             "| points | n | " + " | ".join(names) + " |", "|" + " --- |" * (2 + len(names))]
    for subset, fits in result["subsets"].items():
        cells = []
        for n in names:
            coef = fits[n]["coefficient"]
            cells.append(("" if coef is None else f"{coef:.3f} / ") + f"{100 * fits[n]['rms_relative_error']:.1f}%")
        lines.append(f"| {subset} | {fits['n']} | " + " | ".join(cells) + " |")
    lines += ["", "Fitted to every point whose products wait on its loads:", "",
              "| form | coefficient | RMS rel. error | what |", "| --- | --- | --- | --- |"]
    for n in names:
        f = result["forms"][n]
        coef = "-" if f["coefficient"] is None else f"{f['coefficient']:.3f}"
        lines.append(f"| {n} | {coef} | {100 * f['rms_relative_error']:.1f}% | {f['what']} |")
    lines += ["", "| kernel | warps | ldsm | x | trans | mma | loads alone | products alone | measured | "
              + " | ".join(names) + " |", "|" + " --- |" * (9 + len(names))]
    for r in result["rows"]:
        preds = " | ".join(f"{r[f'pred_{n}']:.0f}" for n in names)
        lines.append(f"| {r['kernel']} | {r['warps_per_sm']} | {r['ldsm']} | {r['ldsm_x']} | {r['ldsm_trans']} | "
                     f"{r['mma']} | {r['loads_alone']:.0f} | {r['products_alone']:.0f} | "
                     f"{r['cycles_per_warp_kstep']:.0f} | {preds} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    if not 1 <= len(argv) <= 2:
        sys.stderr.write("usage: ldsm_form_fit CALIBRATION.json [OUT.md]\n")
        return 2
    points = json.loads(Path(argv[0]).read_text())["results"]["ldsm_form"]["points"]
    result = analyse(points)
    text = markdown(result)
    if len(argv) == 2:
        Path(argv[1]).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
