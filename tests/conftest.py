"""Shared test setup.

torch runs single-threaded: the interpreters multiply tiny tiles, where an OpenMP pool only adds contention
(two orders of magnitude slower on a busy two-core machine).

The suite runs in parallel workers (pytest-xdist, `-n auto` in pyproject.toml), which set COLUMNS=80: each test
starts without it, so the commands print at their piped width as they do for a user's pipe (a test that
checks COLUMNS sets it itself). Each test has a result cache of its own (sweep, compare and tour keep their runs
there), empty at its start.
"""

import pytest
import torch

torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _piped_width(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)


@pytest.fixture(autouse=True)
def _own_result_cache(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    monkeypatch.setenv("FLASHSIM_CACHE_DIR", str(tmp_path_factory.mktemp("result-cache")))
