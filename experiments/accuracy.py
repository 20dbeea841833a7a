"""`flashsim accuracy`: the simulator's accuracy as committed in validation.json (no GPU needed).

One table per quantity (time, HBM read and write bytes, L2 bytes): MAPE, max error and bias per measured
implementation and the algorithm it is simulated as; the provenance of the measurements; the plot's path.
"""

from __future__ import annotations

import json
from pathlib import Path

from flashsim.console import make_console
from flashsim.errors import FlashsimError

# Packaged with flashsim.experiments (package data), so found from any working directory.
RESULTS_DIR = Path(__file__).resolve().parent / "results"
DEFAULT_FILE = RESULTS_DIR / "h200" / "validation.json"


def load(path: Path) -> dict:
    if not path.is_file():
        raise FlashsimError(f"no validation results at {path}; run `flashsim validate` on a GPU to make them")
    try:
        report = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise FlashsimError(f"{path} is not valid JSON: {exc}") from None
    for key in ("summary", "quantities", "provenance"):
        if key not in report:
            raise FlashsimError(f"{path} is not a validation report (no {key!r})")
    return report


def summary(report: dict, path: Path) -> dict:
    """What --json prints: accuracy per implementation and quantity, overall, provenance, plot path."""
    plot = path.parent / report.get("plot", "validation.png")
    return {
        "file": str(path),
        "profile": report.get("profile", {}).get("name"),
        "provenance": report["provenance"],
        "summary": report["summary"],
        "overall": report.get("overall", {}),
        "impl_algo": report.get("impl_algo", {}),
        "plot": str(plot),
        "failed": len(report.get("failed", [])),
    }


def render(report: dict, path: Path, console=None) -> None:
    from rich.table import Table

    console = console or make_console()
    prov = report["provenance"].get("measured", {})
    console.print(
        f"Measured on {prov.get('gpu', '?')} (driver {prov.get('driver', '?')}, CUDA {prov.get('cuda_runtime', '?')}, "
        f"torch {prov.get('torch', '?')}), {prov.get('date', '?')}; predicted with profile "
        f"{report.get('profile', {}).get('name', '?')}. Error = (predicted - measured) / measured."
    )
    impl_algo = report.get("impl_algo", {})
    for q, meta in report["quantities"].items():
        rows = [(impl, s[q]) for impl, s in report["summary"].items() if s.get(q, {}).get("n")]
        if not rows:
            continue
        table = Table(title=f"{meta['label']} ({q})")
        for col in ("implementation", "simulated as", "n", "MAPE %", "max %", "bias %"):
            table.add_column(col, justify="left" if col in ("implementation", "simulated as") else "right")
        for impl, s in rows:
            table.add_row(impl, impl_algo.get(impl, "?"), str(s["n"]), _pct(s["mape"]), _pct(s["max_err"]),
                          _pct(s["bias"], signed=True))  # fmt: skip
        o = report.get("overall", {}).get(q)
        if o and o.get("n"):
            table.add_row("all", "", str(o["n"]), _pct(o["mape"]), _pct(o["max_err"]), _pct(o["bias"], signed=True),
                          style="bold")  # fmt: skip
        console.print(table)
    failed = report.get("failed", [])
    if failed:
        console.print(f"{len(failed)} measurements or predictions failed; see validation.md")
    console.print(f"plot: {path.parent / report.get('plot', 'validation.png')}")


def _pct(x: float | None, signed: bool = False) -> str:
    if x is None:
        return "-"
    return f"{x:+.1f}" if signed else f"{x:.1f}"


def main(args) -> int:
    path = Path(args.file) if args.file else DEFAULT_FILE
    report = load(path)
    if args.json:
        print(json.dumps(summary(report, path), indent=2))
        return 0
    render(report, path)
    return 0
