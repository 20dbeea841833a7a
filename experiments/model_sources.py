"""Which files make up the model: the code a prediction depends on, so that a change to any of it makes earlier
predictions stale (experiments/validate_compare.py hashes it for the reports, simulator/result_cache.py for
its keys). Kept apart from both so that the result cache finds the files without importing the reports' code."""

from __future__ import annotations

from pathlib import Path

# The code a prediction depends on: a change to any of it makes earlier predictions stale.
MODEL_SOURCES = ("algorithms", "simulator", "hw_profiles")
# ... less the modules of those packages that only present or drive simulations (the command line, result
# tables, the animation, the advisor, progress bars, sweeps): predicting imports none of them
# (tests/test_validate.py checks), so a change to one stales no report.
PRESENTATION = frozenset({
    "algorithms/cli_args.py", "algorithms/commands.py", "algorithms/explain.py", "simulator/advise.py",
    "simulator/animate.py", "simulator/commands.py", "simulator/guide_commands.py", "simulator/progress.py",
    "simulator/report.py", "simulator/result_cache.py", "simulator/runner.py", "hw_profiles/commands.py",
    "simulator/sdpa_launch.py",
})
# ... and the code that turns a measurement into the simulator's inputs (the tiles each kernel ran)
INPUT_SOURCES = ("prediction_inputs.py", "validate_impls.py")


def model_source_paths(root: Path | None = None, leave_out: frozenset = frozenset()) -> list[Path]:
    """The model's source files under `root` (the package), less `leave_out` (paths relative to it), in a fixed
    order: each MODEL_SOURCES package's modules but its PRESENTATION ones, then the INPUT_SOURCES."""
    root = root or Path(__file__).resolve().parents[1]
    paths = [p for pkg in MODEL_SOURCES for p in sorted((root / pkg).rglob("*.py"))
             if p.relative_to(root).as_posix() not in PRESENTATION | leave_out]
    inputs = [root / "experiments" / name for name in INPUT_SOURCES]
    return paths + [p for p in inputs if p.is_file()]
