"""Discrete-event model of a GPU's memory hierarchy and units replaying attention schedules.

simulate and SimResult load on first use, so command modules import without simpy (a GPU machine that only
builds and runs kernels need not have it)."""

__all__ = ["SimResult", "simulate"]


def __getattr__(name: str):
    if name in __all__:
        from . import api

        return getattr(api, name)
    raise AttributeError(name)
