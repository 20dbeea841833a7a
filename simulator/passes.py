"""Simulating a pass: the forward schedule, its backward, or both one after the other (their times summed).

FLOPs follow the FA2 paper's convention (algorithms/problem.py): the backward counts 2.5x the forward's
matmul FLOPs (5 matmuls against 2), so fwd+bwd counts 3.5x.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from flashsim.algorithms.backward import FORWARD_OF, pass_algos
from flashsim.algorithms.problem import BACKWARD_FLOPS_RATIO
from flashsim.errors import FlashsimError

from .api import SimResult, check_features, simulate

FLOPS_NOTE = (f"FLOPs: backward = {BACKWARD_FLOPS_RATIO:g}x forward (FA2 paper's convention: 5 matmuls vs 2), "
              f"fwd+bwd = {1 + BACKWARD_FLOPS_RATIO:g}x")


def simulate_pass(algo: str, problem, profile, pass_: str = "fwd", tiling=None, **kwargs) -> SimResult:
    """Simulate `algo`'s pass; fwd+bwd runs the forward and its backward and sums them (`combine`). tiling
    applies to a single pass only (the two passes take different tiles)."""
    algos = pass_algos(algo, pass_)
    if len(algos) > 1 and tiling is not None:
        raise FlashsimError("tile overrides apply to one pass: use --pass fwd or --pass bwd with them")
    for a in algos:
        check_features(a, problem, profile)
    results = [simulate(a, problem, profile, tiling, **kwargs) for a in algos]
    return results[0] if len(results) == 1 else combine(results[0], results[1])


def combine(fwd: SimResult, bwd: SimResult) -> SimResult:
    """One result for a forward and a backward run back to back: times, cycles and bytes add; utilisation
    is the time-weighted mean; each pass's time stays in sim['pass_time_s'] and its kernels are labelled."""
    total = fwd.time_s + bwd.time_s

    def mean(a: dict, b: dict) -> dict:
        return {k: (a.get(k, 0.0) * fwd.time_s + b.get(k, 0.0) * bwd.time_s) / total for k in {**a, **b}}

    def added(a: dict, b: dict) -> dict:
        return {k: a.get(k, 0) + b.get(k, 0) for k in {**a, **b}}

    util = mean(fwd.utilization, bwd.utilization)
    kernels = [{**k, "pass": "fwd"} for k in fwd.kernels] + [{**k, "pass": "bwd"} for k in bwd.kernels]
    sim = {key: fwd.sim.get(key, 0) + bwd.sim.get(key, 0)
           for key in ("wall_s", "events", "ops", "blocks_extrapolated", "launch_overhead_s")}
    sim["sms_simulated"] = max(fwd.sim["sms_simulated"], bwd.sim["sms_simulated"])
    sim["pass_time_s"] = {"fwd": fwd.time_s, "bwd": bwd.time_s}
    sim["pass_tflops"] = {"fwd": fwd.tflops, "bwd": bwd.tflops}
    sim["algos"] = {"fwd": fwd.algo, "bwd": bwd.algo}
    return replace(
        fwd, algo=f"{fwd.algo} fwd+bwd", cycles=fwd.cycles + bwd.cycles, time_s=total,
        bytes={k: fwd.bytes.get(k, 0) + bwd.bytes.get(k, 0) for k in {**fwd.bytes, **bwd.bytes}},
        utilization=util, bound_by=f"{fwd.bound_by} / {bwd.bound_by}",
        roofline_time_s=fwd.roofline_time_s + bwd.roofline_time_s, roofline=added(fwd.roofline, bwd.roofline),
        kernels=kernels, kernel_time_s=fwd.kernel_time_s + bwd.kernel_time_s, sim=sim, pass_="fwd+bwd")


def pass_jobs(algos, pass_: str) -> tuple[list[str], list[tuple[str, str]]]:
    """The schedules to run for `algos` in a pass, and (algo, reason) for those that have no such pass."""
    out, refused = [], []
    for algo in algos:
        try:
            out += pass_algos(algo, pass_)
        except FlashsimError as exc:
            refused.append((algo, str(exc)))
    return list(dict.fromkeys(out)), refused


def combine_runs(results: list[SimResult], pass_: str) -> list[SimResult]:
    """fwd+bwd: pair each forward run with its backward on the same profile and problem and combine them;
    other passes come back as they are."""
    if pass_ != "fwd+bwd":
        return results
    runs: dict = defaultdict(dict)
    for r in results:
        fwd = FORWARD_OF.get(r.algo, r.algo)
        runs[(fwd, r.hw, r.problem)][r.pass_] = r
    return [combine(pair["fwd"], pair["bwd"]) for pair in runs.values() if len(pair) == 2]
