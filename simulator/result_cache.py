"""Runs already made, kept on disk so that sweeps, comparisons and tours asked again answer at once.

A run is deterministic: its result follows from the model's code, the profile's numbers and the run's own
arguments (algorithm, problem, sampled SMs, shortcuts, event limit, splits, build options). The key hashes all
three, the code as the bytes of the files the model fingerprint covers (experiments/model_sources.py; the call
work that `--sdpa` runs add, too), so an edit to the model or a `--set` gives new keys and never an old answer.
Runs that were refused or stopped at their event limit are not kept.

The cache lives in $FLASHSIM_CACHE_DIR, else ~/.cache/flashsim/results: one pickled result per file, written
atomically. A file that cannot be read is a miss. `--no-cache` (sweep, compare, tour) leaves it alone;
`flashsim cache` says how much it holds and `flashsim cache clear` empties it.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import pickle
import tempfile
from dataclasses import replace
from pathlib import Path


def cache_dir() -> Path:
    env = os.environ.get("FLASHSIM_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "flashsim" / "results"


@functools.cache
def _model() -> str:
    """A hash of the model's source files as they are: the files the reports' model fingerprint covers, read
    whole. An edit to a comment gives new keys too, but the hash takes milliseconds, where the fingerprint, which
    parses every file to leave comments out, took longer than a cached sweep's whole answer."""
    return source_hash(Path(__file__).resolve().parents[1])


def source_hash(root: Path) -> str:
    """The hash of the model's source files under the package root `root`, their paths and bytes."""
    from flashsim.experiments.model_sources import model_source_paths

    h = hashlib.sha256()
    for path in model_source_paths(root):
        h.update(path.relative_to(root).as_posix().encode())
        h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


def key(task: tuple) -> str:
    """The hash of what decides a run's result: the model's code, the profile's numbers, the run's arguments."""
    algo, problem, profile, sms, extrapolate, max_events, splits, options = task
    text = json.dumps({"model": _model(), "profile": [profile.name, profile.params], "algo": algo,
                       "problem": problem.as_dict(), "sms": sms, "extrapolate": extrapolate,
                       "max_events": max_events, "splits": splits, "options": options or {}},
                      sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()


def _path(k: str) -> Path:
    return cache_dir() / k[:2] / f"{k}.pkl"


def load(task: tuple):
    """The kept result of this run (its sim['from_cache'] set), or None."""
    try:
        with open(_path(key(task)), "rb") as f:
            result = pickle.load(f)
    except Exception:  # absent, unreadable or from an incompatible version: run it again
        return None
    return replace(result, sim={**result.sim, "from_cache": True})


def store(task: tuple, result) -> None:
    """Keep a finished run's result; a cache that cannot be written is skipped."""
    path = _path(key(task))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(suffix=".tmp", dir=path.parent)
    except OSError:
        return
    try:
        with os.fdopen(fd, "wb") as f:
            pickle.dump(result, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def entries() -> list[Path]:
    """The kept results' files."""
    root = cache_dir()
    return sorted(root.glob("??/*.pkl")) if root.is_dir() else []


def clear() -> tuple[int, int]:
    """Remove every kept result (and what an interrupted write left); returns (files, bytes) removed."""
    files = nbytes = 0
    root = cache_dir()
    for path in [*entries(), *(root.glob("??/*.tmp") if root.is_dir() else [])]:
        try:
            size = path.stat().st_size
            path.unlink()
        except OSError:
            continue
        files += path.suffix == ".pkl"
        nbytes += size
    for folder in root.glob("??") if root.is_dir() else []:
        with contextlib.suppress(OSError):  # a folder another process is writing into stays
            folder.rmdir()
    return files, nbytes
