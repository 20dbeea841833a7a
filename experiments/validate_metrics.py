"""Error metrics of predictions against measurements: absolute percentage error per row, and per group its
mean (MAPE), maximum and mean signed error (bias: positive when the simulator predicts too much)."""

from __future__ import annotations

import math
from collections.abc import Iterable


def pct_error(predicted: float, measured: float) -> float:
    """Signed error in percent of the measurement."""
    if not (measured > 0 and math.isfinite(measured)):
        raise ValueError(f"measured value must be positive and finite, got {measured!r}")
    return (predicted - measured) / measured * 100.0


def summarize(pairs: Iterable[tuple[float, float]]) -> dict:
    """{"n", "mape", "max_err", "bias"} in percent over (predicted, measured) pairs; None values if empty."""
    errs = [pct_error(p, m) for p, m in pairs]
    if not errs:
        return {"n": 0, "mape": None, "max_err": None, "bias": None}
    abs_errs = [abs(e) for e in errs]
    return {
        "n": len(errs),
        "mape": sum(abs_errs) / len(abs_errs),
        "max_err": max(abs_errs),
        "bias": sum(errs) / len(errs),
    }


def summarize_groups(rows: list[dict], group: str, quantities: Iterable[str]) -> dict[str, dict[str, dict]]:
    """group value -> quantity -> summary, over rows holding {"predicted": {q: x}, "measured": {q: y}}.
    A row counts for a quantity only when it has both values."""
    out: dict[str, dict[str, dict]] = {}
    quantities = list(quantities)
    for name in sorted({r[group] for r in rows}):
        mine = [r for r in rows if r[group] == name]
        out[name] = {q: summarize(_pairs(mine, q)) for q in quantities}
    return out


def _pairs(rows: list[dict], q: str) -> list[tuple[float, float]]:
    pairs = []
    for r in rows:
        p, m = r.get("predicted", {}).get(q), r.get("measured", {}).get(q)
        if p is not None and m is not None and m > 0:
            pairs.append((p, m))
    return pairs
