"""Many independent simulator runs: here, in local worker processes, or on a Dask cluster's workers.

Runs are deterministic and share nothing, so where they run changes only the wall time: every result
comes back in job order and equals the run made here.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from flashsim.algorithms.problem import Problem
from flashsim.errors import FlashsimError

from .gpu import EventLimitReached

# Seconds to wait for a Dask scheduler before calling its address bad.
DASK_CONNECT_TIMEOUT_S = 5


def run_many(jobs: list[tuple], sms_of, quiet: bool, label: str, extrapolate: bool = True,
             workers: int | None = None, dask: str | None = None, max_events: int | None = None) -> tuple:
    """Simulate each (algo, problem, profile[, splits[, options]]) with a progress bar on stderr; returns (results,
    skipped), skipped being what a profile can't run. splits: the K/V splits (an int or 'auto'; default the
    record's tiles); options: the record's build options (V3's ablation switches). `workers` local processes
    (default: the CPUs, at most 8; 1 runs here), or the workers of the Dask scheduler at address `dask`. A run
    that reaches `max_events` stops them all."""
    tasks = [(algo, problem, profile, sms_of(profile), extrapolate, max_events, splits, options)
             for algo, problem, profile, splits, options in (_complete(job) for job in jobs)]
    progress = _progress(label, quiet)
    if dask:
        outcomes = _run_dask(tasks, dask, progress)
    else:
        outcomes = _run_local(tasks, min(len(tasks), workers or min(8, os.cpu_count() or 1)), progress)
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
        tiling = None if splits is None else resolve_tiling(algo, problem, profile, splits=splits)
        return simulate(algo, problem, profile, tiling, sms=sms, extrapolate=extrapolate, max_events=max_events,
                        options=options)
    except EventLimitReached:
        raise
    except FlashsimError as exc:
        return {"algo": algo, "hw": profile.name, "problem": problem.as_dict(), "reason": str(exc)}


def _progress(label: str, quiet: bool):
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn(label),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
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
