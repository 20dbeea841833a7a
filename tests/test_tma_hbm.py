"""TMA copies' share of the HBM read rate (hbm_tma_read_fraction): the microbenchmark behind it, and what it
changes: the HBM-bound time of schedules that copy by TMA, and nothing of those that do not, nor any byte."""

import json
import statistics
from pathlib import Path

import pytest
from flashsim.algorithms.problem import Problem
from flashsim.errors import FlashsimError
from flashsim.hw_profiles import load_profile
from flashsim.simulator import simulate

RESULTS = Path(__file__).resolve().parents[1] / "experiments" / "results" / "h200" / "tma-heads.json"
H200 = load_profile("h200")
SHARE = 0.925


def test_the_share_is_the_microbenchmarks():
    """16 MiB a block through tensor-map copies: the same rate for any number of interleaved heads, box and
    stage count, after the flush or not; about 0.925 of the warps' load stream."""
    rows = [r for r in json.loads(RESULTS.read_text())["rows"] if r["bytes_per_block"] >= 15 << 20]
    rates = [r["bytes_per_s"] for r in rows]
    assert max(rates) < 1.05 * min(rates)
    assert {r["heads"] for r in rows} >= {1, 132}
    measured = statistics.median(rates) / H200.hbm_bandwidth_bytes_per_s
    assert measured == pytest.approx(SHARE, abs=0.005)
    if H200.hbm_tma_read_fraction != 1:
        assert H200.hbm_tma_read_fraction == pytest.approx(measured, abs=0.005)
        assert H200.source("hbm_tma_read_fraction").startswith("measured")


def _run(algo, problem, share):
    return simulate(algo, problem, H200.with_overrides({"hbm_tma_read_fraction": share}))


def test_an_hbm_bound_tma_kernel_slows_by_the_share():
    """Our v3 reading each head's 4 MiB of K/V once (one query block a head): its time follows the HBM."""
    p = Problem(2, 132, 128, 128, seqlen_k=8192)
    full, shared = _run("v3", p, 1.0), _run("v3", p, SHARE)
    assert shared.bytes == full.bytes
    assert shared.cycles / full.cycles == pytest.approx(1 / SHARE, rel=0.02)


def test_kernels_without_tma_are_unchanged():
    """Our v2 loads by cp.async: one query block per SM, HBM-bound as the v3 above, its time stays."""
    p = Problem(1, 132, 128, 128, seqlen_k=8192)
    assert _run("v2", p, SHARE).cycles == _run("v2", p, 1.0).cycles


def test_bad_values_are_refused():
    for bad in (0, 1.2):
        with pytest.raises(FlashsimError, match="hbm_tma_read_fraction"):
            H200.with_overrides({"hbm_tma_read_fraction": bad})
