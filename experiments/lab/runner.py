"""Run lab experiments: write each one's JSON and PNG, and report the verdicts."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from . import experiments, get

PACKAGE_ROOT = Path(__file__).resolve().parents[2]
REPO_RESULTS = Path("experiments") / "results" / "lab"


def default_out_dir() -> Path:
    """experiments/results/lab when run from the repository (the package's checkout), else ./flashsim-out/lab."""
    cwd = Path.cwd().resolve()
    if cwd == PACKAGE_ROOT or PACKAGE_ROOT in cwd.parents:
        return PACKAGE_ROOT / REPO_RESULTS
    return Path(os.environ.get("FLASHSIM_OUT", "flashsim-out")) / "lab"


def run_one(name: str, out_dir: Path | str | None = None, quick: bool = False, plot: bool = True) -> dict:
    """Run one experiment, write <out>/<name>.json (and .png); returns what the JSON holds."""
    module = get(name)
    out = Path(out_dir) if out_dir is not None else default_out_dir()
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    outcome = module.run(quick)
    result = {"name": module.NAME, "claim": module.CLAIM, "holds": bool(outcome.holds),
              "verdict": outcome.verdict, "size": "quick" if quick else "full",
              "wall_s": round(time.perf_counter() - start, 2), "numbers": outcome.numbers}
    if plot:
        png = out / f"{module.NAME}.png"
        module.plot(outcome, str(png))
        result["plot"] = png.name
    (out / f"{module.NAME}.json").write_text(json.dumps(result, indent=1) + "\n")
    return result


def run_all(out_dir: Path | str | None = None, quick: bool = False, plot: bool = True, on_done=None) -> list[dict]:
    results = []
    for name in experiments():
        results.append(run_one(name, out_dir, quick, plot))
        if on_done:
            on_done(results[-1])
    return results
