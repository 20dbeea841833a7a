"""The share of a block's time its warps wait for code in the model, against the share of warp time Nsight Compute
found waiting for an instruction (`no_inst`) on the H200 (experiments/results/h200/session18/causal-short/: SDPA
flash and our v2 at B32 N512, bf16).

    python3 -m flashsim.experiments.fetch_wait_share [--set KEY=VALUE ...]

--set overrides the h200 profile (e.g. fetch_model=1). Each problem runs on the default sample with the trace on;
the waits are the trace's "fetch" marks, over the blocks' spans.
"""

from __future__ import annotations

import argparse
import sys

from flashsim.algorithms import Problem, Tiling
from flashsim.errors import FlashsimError
from flashsim.hw_profiles import load_profile
from flashsim.simulator import simulate
from flashsim.simulator.sdpa import fa2_tiling

# (kernel, head dim, causal) -> Nsight Compute's no_inst share of warp time, % (session18/README.md)
MEASURED_PCT = {("fa2", 64, True): 29.7, ("ours", 64, True): 2.1, ("fa2", 64, False): 4.9, ("ours", 64, False): 0.9,
                ("fa2", 128, True): 13.2, ("ours", 128, True): 1.4}  # fmt: skip


def wait_share(trace: list) -> float:
    """Percent of the tracks' spans spent in fetch marks."""
    spans, waits = {}, 0
    for track, name, start, end in trace:
        lo, hi = spans.get(track, (start, end))
        spans[track] = (min(lo, start), max(hi, end))
        if name.startswith("fetch"):
            waits += end - start
    total = sum(hi - lo for lo, hi in spans.values())
    return 100 * waits / total if total else 0.0


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args(argv)
    try:
        profile = load_profile("h200", args.set)
    except FlashsimError as exc:
        print(f"fetch_wait_share: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    model = " ".join(args.set) or "h200"
    print(f"| kernel | d | causal | Nsight Compute no_inst % | modelled fetch wait % ({model}) |")
    print("|---|---|---|---|---|")
    for (kernel, d, causal), measured in MEASURED_PCT.items():
        problem = Problem(32, 32 if d == 64 else 16, 512, d, causal=causal)
        # SDPA flash as validate runs it: FA2's launch rule and its compiled exponential; ours: the v2 record's tiles
        tiling = Tiling(**fa2_tiling(problem, profile), exp2="exp2f") if kernel == "fa2" else None
        trace: list = []
        simulate("v2", problem, profile, tiling, trace=trace)
        print(f"| {'SDPA flash' if kernel == 'fa2' else 'our v2'} | {d} | {causal} | {measured} | "
              f"{wait_share(trace):.1f} |")


if __name__ == "__main__":
    main()
