"""An installed (non-editable) flashsim holds every subpackage: pyproject's explicit list must name each
folder of the package that has an __init__.py."""

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_subpackage_is_listed_in_pyproject():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    skip = {"tests", ".git", "build"}
    found = {
        ".".join(("flashsim", *init.parent.relative_to(ROOT).parts))
        for init in ROOT.rglob("__init__.py")
        if not skip & set(init.relative_to(ROOT).parts)
    }
    assert found <= listed, f"not in pyproject's packages: {sorted(found - listed)}"
