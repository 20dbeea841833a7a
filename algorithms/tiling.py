"""Tile sizes for an (algorithm, problem, profile): the record's mapper, shrunk until it fits, and the checks.

Each default is a pure function of (algorithm, problem, profile): the record's mapper (the public kernel's
choice; the schedule modules' comments name what limits it), made smaller by footprint.fit where the profile
or dtype cannot hold it. A tiling that does not fit is refused with what needs how much and what is available.
These functions are thin lookups in algorithms/catalog.py.
"""

from __future__ import annotations

from dataclasses import replace
from importlib import import_module

from flashsim.errors import FlashsimError

from . import catalog, footprint
from .footprint import REG_OVERHEAD
from .ir import O_STORE_FORMS, PIPELINE_FORMS
from .mapping import Tiling
from .problem import Problem

# names of the V1 and V3 schedules' tile rules, re-exported on first use: a run of another algorithm does not
# import those schedules
_LAZY = {
    "fa1_block_n": "v1", "fa1_split_count": "v1", "fa1_splits": "v1", "fa1_tiling": "v1", "sram_elements": "v1",
    "v1_blocks": "v1", "V3_CONSUMER_REGS": "v3", "V3_PRODUCER_REGS": "v3", "v3_launch_registers": "v3",
}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(f"{__package__}.schedules.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "ALGORITHMS", "REG_OVERHEAD", "Tiling", "check_algo", "check_fits", "default_tiling", "registers_per_thread",
    "resolve_tiling", "smem_bytes",
]  # and the _LAZY names

# The shipped algorithms (catalog.names() also lists records registered at run time).
ALGORITHMS = catalog.names()


def check_algo(algo: str) -> None:
    catalog.get(algo)


def default_tiling(algo: str, problem: Problem, profile) -> Tiling:
    """The record's mapper; with a profile, shrunk until it fits (footprint.fit)."""
    rec = catalog.get(algo)
    t = rec.mapper(problem, profile)
    return footprint.fit(rec, problem, t, profile) if profile is not None else t


def smem_bytes(algo: str, problem: Problem, t: Tiling) -> int:
    """Shared memory one thread block holds (what each kernel stages there)."""
    return catalog.get(algo).smem_bytes(problem, t)


def registers_per_thread(algo: str, problem: Problem, t: Tiling) -> int:
    """fp32 accumulators per thread plus a fixed overhead."""
    return catalog.get(algo).registers(problem, t)


def check_fits(algo: str, problem: Problem, t: Tiling, profile) -> None:
    """Refuse a tiling that no tensor-core instruction can tile or that the profile's SM cannot hold."""
    footprint.check_fits(catalog.get(algo), problem, t, profile)


# the schedules whose epilogue stores O in either form (Tiling.o_store) and whose consumers order their GEMMs
# either way (Tiling.pipeline)
O_STORE_ALGOS = ("v3", "v3-fp8")


def resolve_tiling(algo: str, problem: Problem, profile, paper: bool = False, **overrides) -> Tiling:
    """The default tiling (with `paper`: the paper's own blocks, where the record has them) with any of
    block_m/block_n/warps/stages/splits overridden, checked against the SM. splits="auto": the record's
    own rule (FA2's split-KV heuristic for v2, v3 and decode; FA1's for v1)."""
    rec = catalog.get(algo)
    if paper and rec.paper_tiling is None:
        raise FlashsimError(f"--paper-tiles applies to v1 only (Algorithm 1's block sizes), not {algo}")
    t = rec.paper_tiling(problem, profile) if paper else default_tiling(algo, problem, profile)
    given = {k: v for k, v in overrides.items() if v is not None}
    if given.get("o_store", O_STORE_FORMS[0]) != O_STORE_FORMS[0] and algo not in O_STORE_ALGOS:
        raise FlashsimError(f"--o-store applies to {' and '.join(O_STORE_ALGOS)} (their epilogue's O store), "
                            f"not {algo}")
    if given.get("pipeline", PIPELINE_FORMS[0]) != PIPELINE_FORMS[0] and algo not in O_STORE_ALGOS:
        raise FlashsimError(f"--pipeline applies to {' and '.join(O_STORE_ALGOS)} (their consumers' GEMM order), "
                            f"not {algo}")
    splits = given.get("splits")
    if splits is not None and rec.auto_splits is None and splits != 1:
        raise FlashsimError(f"{algo} does not split its work over more thread blocks (--splits); "
                            f"{', '.join(r.name for r in catalog.records() if r.auto_splits)} do")
    if splits == "auto":
        given["splits"] = rec.auto_splits(problem, replace(t, **{k: v for k, v in given.items() if k != "splits"}),
                                          profile)
    if given:
        t = replace(t, **given)
        if rec.complete_tiling and "warps" not in given:
            t = rec.complete_tiling(t)
    footprint.check_fits(rec, problem, t, profile)
    return t
