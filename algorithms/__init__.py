"""Attention schedules written once as programs of tile operations, and the interpreters that read them."""

from .api import attention
from .problem import Problem
from .tiling import ALGORITHMS, Tiling, default_tiling, resolve_tiling

__all__ = ["ALGORITHMS", "Problem", "Tiling", "attention", "default_tiling", "resolve_tiling"]
