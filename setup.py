"""Build hook: compile the simulator's hot modules with Cython, where a C compiler is at hand.

The modules stay plain Python. Cython compiles the same source files, with type annotations ignored; a
module's .pxd beside it may declare its classes' fields (C doubles only for rates and byte totals, whose
values a double holds exactly), so the arithmetic is Python's own and the answers equal the source's to the bit
(tests/test_compiled.py). The compiled modules go to `_compiled/` with the hash of each source they came
from. flashsim/__init__.py loads a compiled module only while its source is unchanged, so an edited module
runs as its source until the next build. No compiler, or a failed build: the package installs without them
and runs its Python source, with the same answers.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import warnings

from setuptools import setup
from setuptools.command.build_ext import build_ext

# The modules a profile of the FA2-grid point and of a whole-chip grid point finds the time in (the SM units'
# sharing, the roles' op loop, the ports, the L2, the loop skip and the launch's dispatch, the instruction
# cache, and the V2 and V3 schedules' op generators with the parts they share).
COMPILED = ("simulator/resources", "simulator/timing", "simulator/gpu", "simulator/l2", "simulator/loopskip",
            "simulator/launch", "simulator/icache", "algorithms/schedules/v2", "algorithms/schedules/v3",
            "algorithms/oplists", "algorithms/parts")
MANIFEST = "manifest.json"
# The package data's folders (experiments/results/..., kernels/include, kernels/microbench) hold no modules, but
# setuptools takes each for a package left out and prints a screenful per folder on every install (hundreds).
warnings.filterwarnings("ignore", message=r"(?s).*is absent from the `packages` configuration")
# Cython releases whose modules do not answer as the source does: the package runs its source instead.
BAD_CYTHON = {
    "3.3.0": "it types a local variable by its annotation although annotation_typing is off: a defaultdict "
             "assigned to one annotated dict raises TypeError where it is used",
}
# Cython directives: Python semantics throughout (annotations are documentation here, not C types).
DIRECTIVES = {"language_level": 3, "annotation_typing": False, "binding": True}


def _sha256(paths: list[str]) -> str:
    """What compiled.py checks at import: the module's source and its declarations (.pxd), if any."""
    h = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as f:
            h.update(f.read())
    return h.hexdigest()


class CompiledBuild(build_ext):
    """build_ext that puts the compiled modules under flashsim/_compiled/ (not beside their sources, where an
    edited source would be shadowed by the module built from the old one) with a manifest of their sources'
    hashes; an editable install gets them in the checkout's _compiled/."""

    def finalize_options(self) -> None:
        super().finalize_options()
        if not self.parallel:
            self.parallel = os.cpu_count() or 1

    def get_ext_fullpath(self, ext_name: str) -> str:
        parts = self.get_ext_fullname(ext_name).split(".")
        return os.path.join(self.build_lib, "flashsim", "_compiled", *parts[1:-1], self.get_ext_filename(parts[-1]))

    def run(self) -> None:
        inplace, self.inplace = self.inplace, False
        try:
            super().run()
        finally:
            self.inplace = inplace
        built = {}
        for ext in self.extensions:
            path = self.get_ext_fullpath(ext.name)
            if os.path.exists(path):
                rel = os.path.relpath(path, os.path.join(self.build_lib, "flashsim", "_compiled"))
                sources = [p for p in (ext.flashsim_source, ext.flashsim_source[:-3] + ".pxd") if os.path.exists(p)]
                built[ext.name] = {"file": rel, "sources": sources, "sha256": _sha256(sources)}
        target = os.path.join(self.build_lib, "flashsim", "_compiled")
        os.makedirs(target, exist_ok=True)
        with open(os.path.join(target, MANIFEST), "w") as f:
            json.dump(built, f, indent=1, sort_keys=True)
        if inplace:
            self._copy_to_checkout(target, built)

    def copy_extensions_to_source(self) -> None:
        """The editable copy is made by run() (setuptools' own would put the modules beside their sources)."""

    def _copy_to_checkout(self, target: str, built: dict) -> None:
        dest = os.path.join(self.get_finalized_command("build_py").get_package_dir("flashsim") or ".", "_compiled")
        shutil.rmtree(dest, ignore_errors=True)
        os.makedirs(dest)
        for entry in built.values():
            os.makedirs(os.path.dirname(os.path.join(dest, entry["file"])), exist_ok=True)
            shutil.copyfile(os.path.join(target, entry["file"]), os.path.join(dest, entry["file"]))
        shutil.copyfile(os.path.join(target, MANIFEST), os.path.join(dest, MANIFEST))

    def get_outputs(self) -> list[str]:
        return [self.get_ext_fullpath(ext.name) for ext in self.extensions]


def _package_link() -> list[str]:
    """An include directory in which flashsim/ is this checkout: Cython finds a module's declarations (.pxd) by
    the module's package path (flashsim/simulator/resources.pxd), and the checkout's root is the package itself,
    under whatever name its directory has."""
    where = os.path.abspath(os.path.join("build", "cython-include"))
    link = os.path.join(where, "flashsim")
    os.makedirs(where, exist_ok=True)
    if not os.path.islink(link) or os.path.realpath(link) != os.path.abspath("."):
        if os.path.lexists(link):
            os.remove(link)
        os.symlink(os.path.abspath("."), link)
    return [where]


def _extensions() -> list:
    if os.environ.get("FLASHSIM_PURE_PYTHON"):
        return []
    try:
        import Cython
        from Cython.Build import cythonize
    except ImportError:
        return []
    version = Cython.__version__
    if version in BAD_CYTHON:
        print(f"flashsim: not compiling the simulator's modules with Cython {version} ({BAD_CYTHON[version]})")
        return []
    from setuptools import Extension

    exts = []
    for module in COMPILED:
        ext = Extension("flashsim." + module.replace("/", "."), [module + ".py"], optional=True)
        ext.flashsim_source = module + ".py"
        exts.append(ext)
    try:
        compiled = cythonize(exts, compiler_directives=DIRECTIVES, build_dir=os.path.join("build", "cython"),
                             include_path=_package_link(), quiet=True, force=True,
                             nthreads=os.cpu_count() or 1)
    except Exception as exc:  # the package runs its source: the same answers, slower
        print(f"flashsim: not compiling the simulator's modules ({exc})")
        return []
    for ext, source in zip(compiled, exts, strict=True):
        ext.flashsim_source = source.flashsim_source
        ext.optional = True
    return compiled


setup(ext_modules=_extensions(), cmdclass={"build_ext": CompiledBuild})
