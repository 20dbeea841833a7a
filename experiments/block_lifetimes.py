"""How long the simulator keeps each thread block resident, to set beside Nsight Compute's warp lifetimes.

A block's warps live from its launch to its last exit; Nsight Compute's `sm__warps_active.sum /
smsp__warps_launched.sum` is their mean lifetime in SM cycles (experiments/h200_short_blocks.sh collects
it). This runs one problem whole-chip and event by event (no shortcut leaves a block out) and reports the
simulated blocks' residency, from the moment an SM takes a block (after its launch cycles) to its end:
mean, quartiles and per Q-block row, with the kernel's cycles.

    python3 -m flashsim.experiments.block_lifetimes --hw h200 --algo v2 -b 16 --heads 48 --kv-heads 6 \
        -n 256 -d 64 --causal [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import replace

from ..algorithms.mapping import Tiling
from ..algorithms.problem import Problem
from ..hw_profiles.loader import load_profile
from ..simulator import api, gpu
from ..simulator.sdpa import fa2_tiling


def lifetimes(algo: str, problem: Problem, profile, tiling=None, flushed_l2: bool = False) -> dict:
    """Residency of every block of `problem` (whole chip, no skips), in the simulated SM's cycles; from an empty
    L2, or from the flushed one validate's timings start with (`flushed_l2`)."""
    spans: list[tuple[int, int]] = []
    machines: list = []
    made = gpu.Gpu.__init__

    def recording(self, *args, **kwargs):
        made(self, *args, **kwargs)
        machines.append(self)

    class Counted(gpu.Sm):
        """An SM whose resident-block count records when each block starts and ends."""

        @property
        def blocks(self):
            return self.__dict__.get("_blocks", 0)

        @blocks.setter
        def blocks(self, n):
            was = self.__dict__.get("_blocks", 0)
            self.__dict__["_blocks"] = n
            if machines:
                now = machines[-1].env.now
                if n > was:
                    self.__dict__.setdefault("_open", []).append(now)
                elif n < was:
                    spans.append((self.__dict__["_open"].pop(0), now))

    sm_class = gpu.Sm
    gpu.Gpu.__init__, gpu.Sm = recording, Counted
    try:
        result = api.simulate(algo, problem, profile, tiling, sms=None, extrapolate=False, max_steps=None,
                              flushed_l2=flushed_l2)
    finally:
        gpu.Gpu.__init__, gpu.Sm = made, sm_class
    life = sorted(end - start for start, end in spans)
    if not life:
        return {"blocks": 0, "kernel_cycles": result.cycles}
    q = statistics.quantiles(life, n=4) if len(life) > 1 else [life[0]] * 3
    return {"blocks": len(life), "kernel_cycles": result.cycles, "mean_cycles": statistics.fmean(life),
            "quartiles_cycles": q, "min_cycles": life[0], "max_cycles": life[-1],
            "first_start_cycle": min(start for start, _ in spans)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m flashsim.experiments.block_lifetimes", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hw", default="h200")
    ap.add_argument("--algo", default="v2")
    ap.add_argument("-b", "--batch", type=int, default=1)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--kv-heads", type=int)
    ap.add_argument("-n", "--seqlen", type=int, default=1024)
    ap.add_argument("--seqlen-kv", type=int)
    ap.add_argument("-d", "--headdim", type=int, default=128)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--sdpa-flash", action="store_true",
                    help="v2 as SDPA's flash kernel launches (FA2's tiles and split rule, its exp2f)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    problem = Problem(batch=args.batch, heads=args.heads, kv_heads=args.kv_heads or args.heads,
                      seqlen_q=args.seqlen, seqlen_k=args.seqlen_kv or args.seqlen, headdim=args.headdim,
                      causal=args.causal)
    profile = load_profile(args.hw)
    tiling = None
    if args.sdpa_flash:
        tiling = replace(Tiling(**fa2_tiling(problem, profile)), exp2="exp2f")
    out = lifetimes(args.algo, problem, profile, tiling)
    if args.json:
        print(json.dumps(out))
    else:
        for key, value in out.items():
            print(f"{key:18} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
