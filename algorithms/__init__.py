"""Attention schedules written once as programs of tile operations, and the interpreters that read them.

`attention` (the numeric interpreter's entry point) imports torch, so it is loaded on first use: the
simulator and the command line never pay torch's import time."""

from .problem import Problem
from .tiling import ALGORITHMS, Tiling, default_tiling, resolve_tiling

__all__ = ["ALGORITHMS", "Problem", "Tiling", "attention", "default_tiling", "resolve_tiling"]


def __getattr__(name: str):
    if name == "attention":
        from .api import attention

        return attention
    raise AttributeError(name)
