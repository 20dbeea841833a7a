"""The simulator's hot modules as Cython built them from their own source (setup.py), where that build is there.

setup.py compiles a few modules of flashsim.simulator and flashsim.algorithms unchanged and records the hash of
each source beside them (_compiled/manifest.json). `install()` puts a finder first on the import path that
loads a compiled module in place of its source, and only while the source still has that hash: an edited module
runs as its source until the next build (`pip install -e .`). The answers are the same either way
(tests/test_compiled.py); only the time differs. FLASHSIM_PURE_PYTHON=1 runs every module from its source (and,
set at install, builds nothing).
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
MANIFEST = ROOT / "_compiled" / "manifest.json"


class CompiledFinder(importlib.abc.MetaPathFinder):
    """Finds the compiled build of a module whose source is unchanged since it was built."""

    def __init__(self, entries: dict, root: Path = ROOT):
        self.entries = entries  # module name -> {"file", "sources", "sha256"}
        self.root = root
        self.loaded: dict[str, bool] = {}  # module name -> whether its compiled build was taken

    def find_spec(self, fullname, path=None, target=None):
        entry = self.entries.get(fullname)
        if entry is None:
            return None
        built = self.root / "_compiled" / entry["file"]
        fresh = built.is_file() and _sha256([self.root / s for s in entry["sources"]]) == entry["sha256"]
        self.loaded[fullname] = fresh
        if not fresh:
            return None  # edited since the build (or the build is gone): the source runs
        loader = importlib.machinery.ExtensionFileLoader(fullname, str(built))
        return importlib.util.spec_from_file_location(fullname, str(built), loader=loader)


def _sha256(paths: list[Path]) -> str:
    """The hash setup.py recorded: the module's source and its declarations (.pxd), if any."""
    h = hashlib.sha256()
    try:
        for path in paths:
            h.update(path.read_bytes())
    except OSError:
        return ""
    return h.hexdigest()


def _manifest() -> dict:
    try:
        return json.loads(MANIFEST.read_text())
    except (OSError, ValueError):
        return {}


def install() -> CompiledFinder | None:
    """Put the finder first on sys.meta_path (once); None where nothing is built or FLASHSIM_PURE_PYTHON is set."""
    for finder in sys.meta_path:
        if isinstance(finder, CompiledFinder):
            return finder
    entries = _manifest()
    if not entries or os.environ.get("FLASHSIM_PURE_PYTHON"):
        return None
    finder = CompiledFinder(entries)
    sys.meta_path.insert(0, finder)
    return finder


def status() -> dict:
    """Each module the build holds: "compiled" (its build is loaded), "source" (loaded from its source: edited
    since the build, or FLASHSIM_PURE_PYTHON) or "not loaded" (not imported yet). Empty where nothing is built."""
    out = {}
    for name in sorted(_manifest()):
        module = sys.modules.get(name)
        if module is None:
            state = "not loaded"
        elif str(getattr(module, "__file__", "")).endswith(".py"):
            state = "source"
        else:
            state = "compiled"
        out[name] = state
    return out


def describe() -> str:
    """How the simulator's hot modules run in this process, in words: "compiled", "from source" (none built, or
    FLASHSIM_PURE_PYTHON) or "partly compiled" (some edited since the build)."""
    states = {state for state in status().values() if state != "not loaded"}
    if states == {"compiled"}:
        return "compiled"
    return "partly compiled" if "compiled" in states else "from source"
