"""`flashsim lab`: small experiments that each test one claim FlashAttention is taught by.

Each experiment is a module with NAME, CLAIM, run(quick) -> Outcome and plot(outcome, path); it drives the
numeric, counting and timing interpreters with controlled variables. `quick` is the small size the tests
use. Modules import their heavy dependencies (torch, the simulator, matplotlib) when they run."""

from __future__ import annotations

from importlib import import_module

from flashsim.errors import FlashsimError

# In teaching order: correctness first, then bytes, then time, then precision.
_MODULES = ("online_softmax", "fp16_overflow", "same_flops", "io_scaling", "smem_trade", "v2_vs_v1", "causal",
            "gqa", "pipeline", "v3_ablation", "decode", "fp8_scaling", "fp8_end_to_end")


def experiments() -> dict:
    """name -> experiment module, in teaching order."""
    modules = [import_module(f".{m}", __name__) for m in _MODULES]
    return {m.NAME: m for m in modules}


def get(name: str):
    found = experiments()
    if name not in found:
        raise FlashsimError(f"unknown experiment {name!r}; choose one of {', '.join(found)} (see flashsim lab --list)")
    return found[name]
