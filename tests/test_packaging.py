"""An installed (non-editable) flashsim holds every subpackage: pyproject's explicit list must name each
folder of the package that has an __init__.py."""

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _packages(root: Path) -> set[str]:
    """The package's folders with an __init__.py, as flashsim.* names; not the tests, a build, a hidden folder
    (.git, .venv, ...) or a virtual environment made inside the checkout under any name (its pyvenv.cfg)."""
    found = set()
    for init in root.rglob("__init__.py"):
        parts = init.parent.relative_to(root).parts
        if any(p in {"tests", "build"} or p.startswith(".") for p in parts):
            continue
        if any((root.joinpath(*parts[:i]) / "pyvenv.cfg").is_file() for i in range(1, len(parts) + 1)):
            continue
        found.add(".".join(("flashsim", *parts)))
    return found


def test_every_subpackage_is_listed_in_pyproject():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    found = _packages(ROOT)
    assert found <= listed, f"not in pyproject's packages: {sorted(found - listed)}"


def test_a_virtual_environment_in_the_checkout_is_not_the_package(tmp_path: Path):
    for folder in ("", "simulator", "tests/helpers", ".venv/lib/pip", "env/lib/pip", "build/lib/x"):
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
        (tmp_path / folder / "__init__.py").touch()
    (tmp_path / "env" / "pyvenv.cfg").touch()
    assert _packages(tmp_path) == {"flashsim", "flashsim.simulator"}
