"""Many independent simulator runs: here, in local worker processes, or on a Dask cluster's workers; and a
pass of an algorithm: its forward schedule, its backward, or both one after the other (their times summed).

Runs are deterministic and share nothing, so where they run changes only the wall time: every result
comes back in job order and equals the run made here. A pass of several schedules runs each as a job of its
own (forward and backward may go to different workers) and `combine_runs` pairs them afterwards.

FLOPs follow the FA2 paper's convention (algorithms/problem.py): the backward counts 2.5x the forward's
matmul FLOPs (5 matmuls against 2), so fwd+bwd counts 3.5x.
"""

from __future__ import annotations

import os
import sys
from collections import defaultdict
from dataclasses import replace
from typing import Any

from flashsim.algorithms import catalog
from flashsim.algorithms.backward import forward_of, pass_algos
from flashsim.algorithms.problem import BACKWARD_FLOPS_RATIO, Problem
from flashsim.errors import FlashsimError

from .gpu import EventLimitReached

# Seconds to wait for a Dask scheduler before calling its address bad.
DASK_CONNECT_TIMEOUT_S = 5
FLOPS_NOTE = (f"FLOPs: backward = {BACKWARD_FLOPS_RATIO:g}x forward (FA2 paper's convention: 5 matmuls vs 2), "
              f"fwd+bwd = {1 + BACKWARD_FLOPS_RATIO:g}x")


def run_many(jobs: list[tuple], sms_of, quiet: bool, label: str, extrapolate: bool = True,
             workers: int | None = None, dask: str | None = None, max_events: int | None = None,
             cache: bool = False) -> tuple:
    """Simulate each (algo, problem, profile[, splits[, options]]) with a progress bar on stderr; returns (results,
    skipped), skipped being what a profile can't run. splits: the K/V splits (an int or 'auto'; default the
    record's tiles); options: the record's build options (V3's ablation switches). `workers` local processes
    (default: the CPUs, at most 8; 1 runs here), or the workers of the Dask scheduler at address `dask`. A run
    that reaches `max_events` stops them all. cache: answer runs made before from the result cache
    (simulator/result_cache.py) and keep the new ones there."""
    tasks = [(algo, problem, profile, sms_of(profile), extrapolate, max_events, splits, options)
             for algo, problem, profile, splits, options in (_complete(job) for job in jobs)]
    outcomes: list = [None] * len(tasks)
    if cache:
        from . import result_cache

        outcomes = [result_cache.load(task) for task in tasks]
    todo = [i for i, out in enumerate(outcomes) if out is None]
    if todo:
        progress = _progress(label, quiet)
        pending = [tasks[i] for i in todo]
        if dask:
            ran = _run_dask(pending, dask, progress)
        else:
            ran = _run_local(pending, min(len(pending), workers or min(8, os.cpu_count() or 1)), progress)
        for i, out in zip(todo, ran, strict=True):
            outcomes[i] = out
            if cache and not isinstance(out, dict):
                result_cache.store(tasks[i], out)
    if cache and len(todo) < len(tasks) and not quiet:
        from rich.console import Console

        Console(stderr=True).print(f"{len(tasks) - len(todo)} of {len(tasks)} runs answered from the result cache "
                                   f"({result_cache.cache_dir()}; --no-cache runs them again)")
    results = [out for out in outcomes if not isinstance(out, dict)]
    skipped = [out for out in outcomes if isinstance(out, dict)]
    return results, skipped


def _complete(job: tuple) -> tuple[str, Problem, Any, int | str | None, dict | None]:
    return (*job, None, None)[:5]


def simulate_task(task: tuple):
    """One run (in a worker process or here): its SimResult, or a dict saying why it was skipped. A run
    stopped at its event limit is no skip: the limit error goes up to the caller."""
    from flashsim.algorithms.tiling import resolve_tiling

    from .api import simulate

    algo, problem, profile, sms, extrapolate, max_events, splits, options = task
    try:
        if options and "sdpa" in options:  # PyTorch SDPA's backend under its own launch rule (compare --sdpa)
            from .sdpa_launch import sdpa_result

            return sdpa_result(options["sdpa"], problem, profile, sms=sms, extrapolate=extrapolate,
                               max_events=max_events)
        tiling = None if splits is None else resolve_tiling(algo, problem, profile, splits=splits)
        return simulate(algo, problem, profile, tiling, sms=sms, extrapolate=extrapolate, max_events=max_events,
                        options=options)
    except EventLimitReached:
        raise
    except FlashsimError as exc:
        name = f"sdpa-{options['sdpa']}" if options and "sdpa" in options else algo
        return {"algo": name, "hw": profile.name, "problem": problem.as_dict(), "reason": str(exc)}


def simulate_pass(algo: str, problem, profile, pass_: str = "fwd", tiling=None, progress=None, **kwargs):
    """Simulate `algo`'s pass; fwd+bwd runs the forward and its backward and sums them (`combine`). tiling
    applies to a single pass only (the two passes take different tiles). kwargs go to every run (max_steps,
    max_events, options, ...); progress sees the fraction of the whole pass done."""
    from .api import check_features, simulate

    algos = pass_algos(algo, pass_)
    if len(algos) > 1 and tiling is not None:
        raise FlashsimError("tile overrides apply to one pass: use --pass fwd or --pass bwd with them")
    for a in algos:
        check_features(a, problem, profile)
    results = []
    for i, a in enumerate(algos):
        part = None if progress is None else (lambda f, i=i: progress((i + f) / len(algos)))
        opts = {k: v for k, v in (kwargs.get("options") or {}).items() if k in catalog.get(a).options}
        results.append(simulate(a, problem, profile, tiling, progress=part, **{**kwargs, "options": opts}))
    return results[0] if len(results) == 1 else combine(results[0], results[1])


def combine(fwd, bwd):
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
    sim["loop_skip"] = added(fwd.sim.get("loop_skip", {}), bwd.sim.get("loop_skip", {}))
    units = [r.sim["unit_skip"] for r in (fwd, bwd) if "unit_skip" in r.sim]
    if units:
        sim["unit_skip"] = {"skips": sum(u["skips"] for u in units), "worst": max(u["worst"] for u in units),
                            "units_left_out": sum(u["units_left_out"] for u in units)}
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


def combine_runs(results: list, pass_: str) -> list:
    """fwd+bwd: pair each forward run with its backward on the same profile and problem and combine them;
    other passes come back as they are."""
    if pass_ != "fwd+bwd":
        return results
    forward = forward_of()
    runs: dict = defaultdict(dict)
    for r in results:
        runs[(forward.get(r.algo, r.algo), r.hw, r.problem)][r.pass_] = r
    return [combine(pair["fwd"], pair["bwd"]) for pair in runs.values() if len(pair) == 2]


def _progress(label: str, quiet: bool):
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    return Progress(
        TextColumn(label),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
        TextColumn("{task.description}"),
        console=Console(stderr=True),
        transient=True,
        disable=quiet and not sys.stderr.isatty(),
    )


def _run_local(tasks: list, workers: int, progress) -> list:
    from concurrent.futures import ProcessPoolExecutor, as_completed

    outcomes: list = [None] * len(tasks)
    if workers <= 1:
        with progress:
            bar = progress.add_task("", total=len(tasks))
            for i, task in enumerate(tasks):
                progress.update(bar, description=f"{task[0]} {task[1].describe()}")
                outcomes[i] = simulate_task(task)
                progress.advance(bar)
        return outcomes
    # every task is submitted (so every worker forked) before the progress bar starts its thread
    pool = ProcessPoolExecutor(max_workers=workers)
    try:
        futures = {pool.submit(simulate_task, task): i for i, task in enumerate(tasks)}
        with progress:
            bar = progress.add_task(f"{workers} processes", total=len(tasks))
            for future in as_completed(futures):
                outcomes[futures[future]] = future.result()
                progress.advance(bar)
    finally:
        pool.shutdown(cancel_futures=True)
    return outcomes


def dask_client(address: str):
    """A Client of the scheduler at `address`; a missing package or an unreachable address is a FlashsimError."""
    try:
        from distributed import Client
        from distributed.comm import get_address_host_port, parse_address
        from distributed.comm.registry import backends
    except ImportError:
        raise FlashsimError("--dask needs dask.distributed: pip install 'flashsim[dask]'") from None
    # a malformed address is refused here: a Client that fails on one leaves a close that hangs at exit
    scheme, location = parse_address(address)
    try:
        if scheme not in backends or not location:
            raise ValueError(address)
        if scheme != "inproc":
            get_address_host_port(address)
    except ValueError:
        raise FlashsimError(f"not a Dask scheduler address: {address!r} (expected e.g. tcp://host:8786)") from None
    try:
        return Client(address, timeout=DASK_CONNECT_TIMEOUT_S)
    except (OSError, ValueError, TypeError) as exc:  # TimeoutError is an OSError
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise FlashsimError(f"no Dask scheduler at {address!r} (waited {DASK_CONNECT_TIMEOUT_S} s): {reason}") from None


def _run_dask(tasks: list, address: str, progress) -> list:
    from distributed import as_completed

    client = dask_client(address)
    try:
        outcomes: list = [None] * len(tasks)
        # pure=False: equal tasks are still separate runs (a result is never reused by key)
        futures = client.map(simulate_task, tasks, pure=False)
        index = {future.key: i for i, future in enumerate(futures)}
        workers = len(client.scheduler_info().get("workers", {}))
        with progress:
            bar = progress.add_task(f"dask, {workers} workers", total=len(tasks))
            for future in as_completed(futures):
                outcomes[index[future.key]] = future.result()
                progress.advance(bar)
        return outcomes
    finally:
        client.close()
