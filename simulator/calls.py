"""What a library's call puts on the GPU beside the kernels the simulator replays, and the busy time it adds.

GPU busy time is what every piece of work a call launches takes on the GPU (the profiler's durations, summed).
For most calls that is their kernels. cuDNN's fused forward on Hopper also clears 4 bytes with a memset before
each launch of its kernel: the profiler's trace of every development shape shows one `Memset (Device)` of 4
bytes per call, 0.70-0.80 us, and nothing else beside the kernel
(`python3 -m flashsim.experiments.call_events`, experiments/results/h200/call-events/). A memset is not a
kernel the simulator replays; the profile's `memset_busy_s` says what one takes (the same command's
microbenchmark: cudaMemsetAsync of 4 B to 1 MiB after validate's flush, 0.74-1.4 us).

A prediction of such a call adds this work to its simulated time (`experiments/validate_compare.py`, when it
makes a report), so a change here re-assembles the reports from the simulations they hold.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class CallWork:
    """What one call launches beside its simulated kernels."""

    memsets: int = 0  # small cudaMemsetAsync launches (a few bytes each)


# launch rule (experiments/validate_impls.Impl.launch) -> what its forward call launches beside the kernel
CALLS = {"cudnn-sm90": CallWork(memsets=1)}


def call_busy_s(launch: str | None, profile) -> dict[str, float]:
    """{piece: GPU busy seconds} that a forward call under `launch` adds to its simulated kernels (empty for
    a call that launches its kernels only)."""
    work = CALLS.get(launch or "")
    if work is None or not work.memsets:
        return {}
    return {"memset_s": work.memsets * profile.memset_busy_s}
