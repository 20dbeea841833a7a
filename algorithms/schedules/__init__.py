"""The schedules, one module each; build(algo, problem, tiling) returns the program of tile ops."""

from __future__ import annotations

from importlib import import_module

from ..ir import Schedule
from ..problem import Problem
from ..tiling import Tiling, check_algo

_MODULES = {"standard": "standard", "v1": "v1", "v2": "v2", "v3": "v3", "v3-fp8": "v3_fp8"}


def build(algo: str, problem: Problem, tiling: Tiling) -> Schedule:
    check_algo(algo)
    return import_module(f".{_MODULES[algo]}", __name__).build(problem, tiling)
