"""The schedules, one module each, each exporting its record `ALGORITHM` (algorithms/catalog.py holds them);
build(algo, problem, tiling) returns the program of tile ops."""

from __future__ import annotations

from ..ir import Schedule
from ..mapping import Tiling
from ..problem import Problem


def build(algo: str, problem: Problem, tiling: Tiling, **options) -> Schedule:
    from ..catalog import get

    return get(algo).schedule(problem, tiling, **options)
