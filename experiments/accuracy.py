"""`flashsim accuracy`: the simulator's accuracy as committed in validation.json and testset.json (no GPU).

For the development set (validation.json) and, beside it, the held-out test set (testset.json): one table
per quantity (time, HBM read and write bytes, L2 bytes) with MAPE, max error and bias per measured
implementation and the algorithm it is simulated as, the provenance of the measurements and the plot's
path; then the GPU busy time of both sets side by side. A missing test report is one line, not an error.
The other sets follow where their reports are committed beside them (the LLM-shaped, per-tile and d256
development sets, the decode and backward test sets), and last every set's GPU busy time at a glance, with
whether the installed model and the shipped profile still give each report's predictions, and how far the
shortcuts come from the plain event-by-event run (shortcut-exactness.json) and whether this model was compared.
"""

from __future__ import annotations

import json
from pathlib import Path

from flashsim.console import make_console
from flashsim.errors import FlashsimError

from .validate_sets import BWD, DECODE, DEV, DEV_D256, DEV_LLM, DEV_TILES, TEST

# Packaged with flashsim.experiments (package data), so found from any working directory.
RESULTS_DIR = Path(__file__).resolve().parent / "results"
DEFAULT_FILE = RESULTS_DIR / "h200" / "validation.json"
# experiments/shortcut_exactness.py's comparison of the shortcuts with the plain run
SHORTCUTS_FILE = RESULTS_DIR / "shortcut-exactness.json"


SIDE_BY_SIDE = "kernel_time_s"  # the quantity compared across the sets: GPU busy time
# Kernels shorter than this (GPU busy time) are told apart: the model's known gap is there (one-wave kernels,
# docs/MODEL.md, Short one-wave kernels).
SHORT_KERNEL_S = 20e-6
NO_TEST = "test set: no measurements committed yet (run `flashsim validate --grid test` on a GPU)"


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


STALE = {
    "earlier model": "predicted with an earlier model (its sources have changed since)",
    "earlier profile": "predicted with other profile numbers than the shipped profile's (changed since, or --set)",
    "unknown": "predicted with a model of unknown date (the report carries no fingerprints)",
}


def taken_with(fingerprint: str | None, simulation: bool = False) -> str:
    """Whether a result stamped with this model fingerprint is the installed model's: "current", "earlier
    model" (its sources have changed since) or "unknown" (no fingerprint). simulation: the result is of
    simulations alone (the shortcut table), stamped with the simulation fingerprint."""
    from .validate_compare import model_fingerprint, simulation_fingerprint

    if not fingerprint:
        return "unknown"
    return "current" if fingerprint == (simulation_fingerprint() if simulation else model_fingerprint()) \
        else "earlier model"


def model_status(report: dict) -> str:
    """Whether the report's predictions are what the installed model and the shipped profile give today:
    "current", "earlier model" (the model's sources changed since), "earlier profile" (the profile's
    numbers changed, or it was predicted with --set or another file) or "unknown" (no fingerprints)."""
    from flashsim.hw_profiles import load_profile

    from .validate_compare import profile_fingerprint

    prof = report.get("profile", {})
    if not prof.get("fingerprint"):
        return "unknown"
    made_by = taken_with(report.get("model_fingerprint"))
    if made_by != "current":
        return made_by
    try:
        shipped = profile_fingerprint(load_profile(prof.get("hw") or prof.get("name", "")))
    except Exception:  # a profile file that is not here: not the shipped one
        return "earlier profile"
    return "current" if shipped == prof["fingerprint"] else "earlier profile"


def summary(report: dict, path: Path) -> dict:
    """What --json prints: accuracy per implementation and quantity, overall, provenance, plot path."""
    plot = path.parent / report.get("plot", "validation.png")
    return {
        "file": str(path),
        "profile": report.get("profile", {}).get("name"),
        "predicted_with": model_status(report),
        "provenance": report["provenance"],
        "summary": report["summary"],
        "overall": report.get("overall", {}),
        "impl_algo": report.get("impl_algo", {}),
        "plot": str(plot),
        "failed": len(report.get("failed", [])),
    }


def test_path(path: Path) -> Path:
    """The test-set report that goes with a development report."""
    return path.parent / TEST.report


def load_test(path: Path) -> dict | None:
    """The test-set report beside `path`, or None when none is committed."""
    return load(test_path(path)) if test_path(path).is_file() else None


def side_by_side(dev: dict | None, test: dict | None, q: str = SIDE_BY_SIDE) -> dict[str, dict]:
    """impl -> {"dev": summary, "test": summary} of quantity q; a set without that implementation: None."""
    impls = sorted({*(dev or {}).get("summary", {}), *(test or {}).get("summary", {})})
    out = {}
    for impl in impls:
        cells = {name: (r or {}).get("summary", {}).get(impl, {}).get(q) for name, r in (("dev", dev), ("test", test))}
        if any(c and c.get("n") for c in cells.values()):
            out[impl] = {name: c if c and c.get("n") else None for name, c in cells.items()}
    return out


def by_duration(report: dict, short_s: float = SHORT_KERNEL_S) -> dict[str, dict]:
    """impl -> {"short": ..., "long": ...}: n, MAPE and max error (%) of the GPU busy time over the rows whose
    measured busy time is under `short_s` and over the rest."""
    groups: dict = {}
    for row in report.get("rows", []):
        measured = (row.get("measured") or {}).get(SIDE_BY_SIDE)
        predicted = (row.get("predicted") or {}).get(SIDE_BY_SIDE)
        if not measured or predicted is None:
            continue
        err = abs(predicted / measured - 1) * 100
        groups.setdefault(row["impl"], {"short": [], "long": []})["short" if measured < short_s else "long"].append(err)
    return {impl: {name: {"n": len(e), "mape": sum(e) / len(e), "max_err": max(e)} if e else None
                   for name, e in g.items()} for impl, g in sorted(groups.items())}


def summary_sets(dev: dict, path: Path, test: dict | None) -> dict:
    """--json: the development set's summary at the top level, the test set's under "test" (or why it is
    missing), and both sets' GPU busy-time errors side by side."""
    out = {**summary(dev, path), "set": "dev"}
    out["test"] = summary(test, test_path(path)) if test else {"file": str(test_path(path)), "missing": NO_TEST}
    out["dev_vs_test"] = {"quantity": SIDE_BY_SIDE, "impls": side_by_side(dev, test)}
    if test:
        out["test_by_duration"] = {"quantity": SIDE_BY_SIDE, "short_below_s": SHORT_KERNEL_S,
                                   "impls": by_duration(test)}
    return out


def render_one(report: dict, path: Path, console=None) -> None:
    """One set's tables under its title."""
    console = console or _console()
    console.print(f"\n[bold]{report['set']['title']}[/bold]: {path.name}")
    render(report, path, console)


def render_sets(dev: dict | None, path: Path, test: dict | None, console=None) -> None:
    """Each set's tables under its title, then the GPU busy time of both side by side."""
    console = console or _console()
    for report, where in ((dev, path), (test, test_path(path))):
        if report is None:
            continue
        title = report.get("set", {}).get("title", "development set")
        console.print(f"\n[bold]{title}[/bold]: {where.name}")
        render(report, where, console)
    if test is None:
        console.print(NO_TEST, soft_wrap=True, markup=False)
        return
    rows = side_by_side(dev, test)
    if not rows:
        return
    console.print(_paired_table("GPU busy time, development set against test set (error %)", rows,
                                (("dev", "dev"), ("test", "test"))))
    us = f"{SHORT_KERNEL_S * 1e6:.0f} us"
    console.print(_paired_table(f"GPU busy time, test set: kernels under {us} against the rest (error %)",
                                by_duration(test), (("short", "short"), ("long", "rest"))))


def _paired_table(title: str, rows: dict[str, dict], groups: tuple[tuple[str, str], ...]):
    """Per implementation, n, MAPE and max of each group (key, column label); a group without rows: 0, -, -."""
    from rich.table import Table

    table = Table(title=title)
    table.add_column("implementation", justify="left")
    for _, label in groups:
        for col in ("n", "MAPE", "max"):
            table.add_column(f"{label} {col}", justify="right")
    for impl, cells in rows.items():
        row = [impl]
        for key, _ in groups:
            c = cells[key]
            row += [str(c["n"]), _pct(c["mape"]), _pct(c["max_err"])] if c else ["0", "-", "-"]
        table.add_row(*row)
    return table


def _console():
    return make_console()


def render(report: dict, path: Path, console=None) -> None:
    from rich.table import Table

    console = console or _console()
    prov = report["provenance"].get("measured", {})
    console.print(
        f"Measured on {prov.get('gpu', '?')} (driver {prov.get('driver', '?')}, CUDA {prov.get('cuda_runtime', '?')}, "
        f"torch {prov.get('torch', '?')}), {prov.get('date', '?')}; predicted with profile "
        f"{report.get('profile', {}).get('name', '?')}. Error = (predicted - measured) / measured."
    )
    status = model_status(report)
    if status != "current":
        grid = {"dev": "fa2"}.get(report.get("set", {}).get("name", "dev"), report.get("set", {}).get("name"))
        console.print(f"[yellow]{STALE[status]}[/yellow]; `flashsim validate --compare-only --grid {grid}` "
                      "predicts it again", soft_wrap=True)
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
        md = Path(report.get("plot", "validation.png")).with_suffix(".md").name
        console.print(f"{len(failed)} measurements or predictions failed or were skipped; see {md}")
    console.print(f"plot: {path.parent / report.get('plot', 'validation.png')}")


def _pct(x: float | None, signed: bool = False) -> str:
    if x is None:
        return "-"
    return f"{x:+.1f}" if signed else f"{x:.1f}"


# The sets after the development and test sets, by their --json key, in the order they are shown.
OTHER_SETS = (("dev_llm", DEV_LLM), ("dev_tiles", DEV_TILES), ("dev_d256", DEV_D256), ("test_decode", DECODE),
              ("test_bwd", BWD))  # fmt: skip


def overview(reports: dict[str, dict], q: str = SIDE_BY_SIDE) -> list[dict]:
    """One row per set and implementation of quantity q (GPU busy time): n, MAPE, max, bias, and whether the
    report's predictions are today's model's (model_status)."""
    rows = []
    for name, report in reports.items():
        status = model_status(report)
        for impl, s in report["summary"].items():
            c = s.get(q) or {}
            if c.get("n"):
                rows.append({"set": name, "impl": impl, "n": c["n"], "mape": c["mape"], "max_err": c["max_err"],
                             "bias": c["bias"], "predicted_with": status})  # fmt: skip
    return rows


def render_overview(rows: list[dict], console=None) -> None:
    from rich.table import Table

    console = console or _console()
    table = Table(title="GPU busy time, every set at a glance (error %)")
    for col in ("set", "implementation", "n", "MAPE %", "max %", "bias %", "predicted with"):
        table.add_column(col, justify="right" if col in ("n", "MAPE %", "max %", "bias %") else "left")
    for r in rows:
        stale = r["predicted_with"] != "current"
        table.add_row(r["set"], r["impl"], str(r["n"]), _pct(r["mape"]), _pct(r["max_err"]),
                      _pct(r["bias"], signed=True), r["predicted_with"], style="yellow" if stale else None)  # fmt: skip
    console.print(table)


def shortcuts(path: Path = SHORTCUTS_FILE) -> dict | None:
    """The committed comparison of the shortcuts with the plain run: problems compared, the largest relative
    difference in cycles and in any byte count, how many equal in every byte, and whether the installed model
    took it ("current", "earlier model", "unknown"); None where no readable comparison is committed."""
    try:
        data = json.loads(path.read_text())
        rows = data["rows"]
    except (OSError, json.JSONDecodeError, KeyError, TypeError):
        return None
    return {"file": str(path), "problems": len(rows),
            "worst_cycles": max((abs(r["rel_diff_cycles"]) for r in rows), default=0.0),
            "worst_bytes": max((r["worst_rel_diff_bytes"] for r in rows), default=0.0),
            "bytes_equal": sum(bool(r["bytes_equal"]) for r in rows),
            "predicted_with": taken_with(stamp(data.get("provenance", {})), simulation=True)}


def stamp(provenance: dict) -> str | None:
    """The simulation fingerprint a table of simulations was taken with (files from before the simulation and
    model fingerprints were told apart carry it as model_fingerprint)."""
    return provenance.get("simulation_fingerprint", provenance.get("model_fingerprint"))


def render_shortcuts(info: dict, console=None) -> None:
    console = console or _console()
    line = (f"Shortcuts against the plain run ({Path(info['file']).name}): {info['problems']} problems, cycles within "
            f"{100 * info['worst_cycles']:.4f}%, every byte count equal in {info['bytes_equal']} "
            f"(the others within {100 * info['worst_bytes']:.2g}%)")
    if info["predicted_with"] == "current":
        console.print(f"{line}; taken with this model", soft_wrap=True, markup=False)
    else:
        which = "an earlier" if info["predicted_with"] == "earlier model" else "an unknown"
        console.print(f"{line}; taken with {which} model: `python3 -m flashsim.experiments.shortcut_exactness --large` "
                      "takes it again", soft_wrap=True, markup=False, style="yellow")


def main(args) -> int:
    path = Path(args.file) if args.file else DEFAULT_FILE
    report, test = load(path), load_test(path)
    extra = {key: path.parent / ds.report for key, ds in OTHER_SETS if (path.parent / ds.report).is_file()}
    loaded = {key: load(p) for key, p in extra.items()}
    names = {DEV.name: report, **({TEST.name: test} if test else {})}
    names.update({ds.name: loaded[key] for key, ds in OTHER_SETS if key in loaded})
    if args.json:
        out = summary_sets(report, path, test)
        for key, p in extra.items():
            out[key] = summary(loaded[key], p)
        out["overview"] = {"quantity": SIDE_BY_SIDE, "rows": overview(names)}
        out["shortcuts"] = shortcuts()
        print(json.dumps(out, indent=2))
        return 0
    render_sets(report, path, test)
    for key, p in extra.items():
        render_one(loaded[key], p)
    render_overview(overview(names))
    info = shortcuts()
    if info is not None:
        render_shortcuts(info)
    return 0
