"""Discrete-event model of a GPU's memory hierarchy and units replaying attention schedules."""

from .api import SimResult, simulate

__all__ = ["SimResult", "simulate"]
