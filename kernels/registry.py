"""Launch descriptions: what each algorithm's .cu file is built with and how its kernels are launched.

Adding an algorithm takes two files:
  kernels/<name>.cu   defines an instantiation macro MACRO(NAME, DTYPE, D, BM, BN, WARPS, STAGES) that
                      emits `extern "C"` kernels NAME_<entry>, each taking one `flashsim::AttnParams` by
                      value (include/common.cuh); DTYPE is fp16 or bf16 (FLASHSIM_T_<DTYPE> is the type).
  kernels/<name>.py   calls register(KernelFamily(...)) with the variants to build (head dim, dtype and a
                      Tiling of algorithms/tiling.py), the target archs, the dynamic shared memory of each
                      entry, the default tiling, and run(kernels, variant, call), which allocates any
                      workspace and calls kernels.launch(entry, grid, threads, smem, params).
and the module's name in FAMILY_MODULES. `flashsim kernels build` then compiles it and the API serves it:
kernels.attention(q, k, v, algo=<name>). The Hopper kernels (hopper_family.py) register the same way but
instantiate one entry point per row of their tile table (entry_lines, kernels_of) and launch through
kernels/hopper.py (TMA tensor maps instead of AttnParams).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from flashsim.algorithms.tiling import Tiling
from flashsim.errors import FlashsimError

DTYPES = ("fp16", "bf16")
ARCHS = ("sm_80", "sm_90a")
# Modules that register families; every one must import (a typo here would hide a family).
FAMILY_MODULES = tuple(
    f"flashsim.kernels.{name}" for name in ("standard", "v1", "v2", "v2_bwd", "decode", "hopper_family")
)


@dataclass(frozen=True)
class Variant:
    """One template instantiation."""

    headdim: int
    dtype: str
    tiling: Tiling

    def symbol(self, algo: str) -> str:
        t = self.tiling
        ident = algo.replace("-", "_")
        return f"flashsim_{ident}_d{self.headdim}_{self.dtype}_{t.block_m}x{t.block_n}w{t.warps}s{t.stages}"

    def describe(self) -> str:
        return f"d{self.headdim} {self.dtype} {self.tiling.describe()}"


@dataclass(frozen=True)
class KernelFamily:
    algo: str  # a name of algorithms.tiling.ALGORITHMS
    source: str  # file name in kernels/
    macro: str  # the instantiation macro the source defines
    entries: tuple[str, ...]  # kernel suffixes each instantiation emits
    variants: tuple[Variant, ...]
    smem_bytes: Callable[[Variant, str], int]  # dynamic shared memory of one entry
    default_tiling: Callable[[int, object], Tiling]  # (headdim, device properties or None) -> Tiling
    run: Callable  # run(kernels: launch.BoundKernels, variant, call: launch.Call) -> None
    archs: tuple[str, ...] = ARCHS
    summary: str = ""
    headers: tuple[str, ...] = ()  # other files of kernels/ the source includes (they decide the cubin too)
    # Optional, for families whose instantiations are not one MACRO(...) line per variant:
    entry_lines: Callable[[], list[str]] | None = None  # the translation unit's lines after the #include
    kernels_of: Callable[[Variant], dict[str, str]] | None = None  # entry label -> kernel symbol
    causal_tiling: Callable[[int, bool], Tiling] | None = None  # (headdim, causal) -> default Tiling
    # Optional, for families with an entry point of their own (decode: kernels.decode):
    attention: Callable | None = None  # serves attention(q, k, v, causal=, tiling=, softmax_scale=, out=,
    #                                    return_lse=, splits=) for this algo
    launched_splits: Callable | None = None  # (q, k) -> the split count a call with no splits launches

    def kernel_symbols(self, variant: Variant) -> dict[str, str]:
        """Entry label -> the extern "C" symbol the build emits for it."""
        if self.kernels_of is not None:
            return self.kernels_of(variant)
        return {entry: f"{variant.symbol(self.algo)}_{entry}" for entry in self.entries}

    def tiling_for(self, headdim: int, limits, causal: bool = False) -> Tiling:
        """The tiling a call with this head dim runs when it names none."""
        if self.causal_tiling is not None:
            return self.causal_tiling(headdim, causal)
        return self.default_tiling(headdim, limits)

    def __post_init__(self) -> None:
        bad = [a for a in self.archs if a not in ARCHS]
        if bad:
            raise ValueError(f"{self.algo}: unknown arch {bad}; known: {', '.join(ARCHS)}")
        symbols = [v.symbol(self.algo) for v in self.variants]
        if len(set(symbols)) != len(symbols):
            raise ValueError(f"{self.algo}: duplicate variants")

    @property
    def headdims(self) -> tuple[int, ...]:
        return tuple(sorted({v.headdim for v in self.variants}))

    def variant(self, headdim: int, dtype: str, tiling: Tiling) -> Variant:
        """The built variant for this call, or a FlashsimError listing the built ones."""
        if headdim not in self.headdims:
            raise FlashsimError(
                f"{self.algo} kernels are built for head dims {', '.join(map(str, self.headdims))}, not {headdim}"
            )
        wanted = Variant(headdim, dtype, tiling)
        if wanted in self.variants:
            return wanted
        built = sorted({v.tiling.describe() for v in self.variants if v.headdim == headdim and v.dtype == dtype})
        raise FlashsimError(
            f"{self.algo} has no kernel for tiling {tiling.describe()} at d={headdim} {dtype}; "
            f"built: {'; '.join(built)}"
        )

    def arch_for(self, capability: tuple[int, int]) -> str:
        """The built arch whose SASS runs on a GPU of this compute capability ('a' targets: exact match)."""
        major, minor = capability
        for arch in sorted(self.archs, reverse=True):
            digits = arch[3:].rstrip("a")
            a_major, a_minor = int(digits[:-1]), int(digits[-1])
            exact = arch.endswith("a")
            if a_major == major and (a_minor == minor if exact else a_minor <= minor):
                return arch
        raise FlashsimError(f"{self.algo} kernels are built for {', '.join(self.archs)}; this GPU is sm_{major}{minor}")


_families: dict[str, KernelFamily] = {}
_loaded = False


def register(family: KernelFamily) -> KernelFamily:
    _families[family.algo] = family
    return family


def families() -> dict[str, KernelFamily]:
    global _loaded
    if not _loaded:
        for name in FAMILY_MODULES:
            importlib.import_module(name)
        _loaded = True
    return dict(_families)


def family(algo: str) -> KernelFamily:
    from flashsim.algorithms.tiling import check_algo

    check_algo(algo)
    found = families().get(algo)
    if found is None:
        raise FlashsimError(f"no kernels for {algo!r}; kernels exist for {', '.join(sorted(families()))}")
    return found
