"""The instruction-fetch sweeps committed from the GPU (experiments/results/h100/session46/ifetch/): fast code after
slow code pays the fetch of every line it lacks (fetched at the warps' front), which a fetch streamed in under the
slow code does not explain; and two blocks in different code overflowing the SM's cache share one fetch. Also the
modelled share of time spent waiting for code that experiments/fetch_wait_share.py sets beside Nsight Compute's."""

from pathlib import Path

import pytest
from flashsim.experiments import ifetch_summary as summary

DATA = Path(__file__).resolve().parents[1] / "experiments" / "results" / "h100" / "session46" / "ifetch"


def _ahead_points():
    pair, ahead = summary._rows(DATA / "ifetch-pair.json"), summary._rows(DATA / "ifetch-ahead.json")
    slow, fetch = summary.rates(pair, summary._rows(DATA / "ifetch-straight.json"))
    rows = [r for r in ahead if r["blocks"] == 1 and r["warps"] == 4 and r["slow_lines"] and r["fast_lines"]]
    return [(r, *summary.predict_ahead(r["slow_lines"], r["fast_lines"], slow, fetch)) for r in rows]


def test_fast_code_pays_its_fetch_after_slow_code():
    points = [(r, s, f) for r, s, f in _ahead_points() if r["slow_lines"] + r["fast_lines"] <= 768]  # up to 96 KiB
    assert len(points) == 4
    for r, streamed, front in points:
        measured = r["block_cycles_median"]
        assert abs(front / measured - 1) < 0.02, r["kernel"]
        if r["slow_lines"] >= 64:  # enough slow code for a streamed fetch to have brought the fast lines
            assert streamed / measured - 1 < -0.05, r["kernel"]


def test_two_blocks_in_different_code_share_the_fetch():
    from flashsim.hw_profiles import load_profile

    fetch = load_profile("h100").icache_fetch_cycles_per_line  # the streamed fetch's line, one SM's
    pair = summary._rows(DATA / "ifetch-pair.json")
    for r in pair:
        if r["mode"] == "different" and r["lines"] >= 192:  # 48-64 KiB on the SM: more than it keeps
            single = next(s for s in pair if s["kind"] == r["kind"] and s["lines"] == r["lines"]
                          and s["mode"] == "single")  # fmt: skip
            assert r["cycles_per_line"] == pytest.approx(2 * fetch, rel=0.03)  # two streams share the SM's fetch
            assert r["cycles_per_line"] >= single["cycles_per_line"]


def test_markdown_names_every_sweep():
    text = summary.markdown(DATA)
    assert "Two blocks per SM" in text and "at the warps' front" in text


def test_fetch_wait_share_is_the_fetch_marks_over_the_blocks_spans():
    from flashsim.experiments.fetch_wait_share import wait_share

    trace = [("SM0.0 warps", "gemm S", 0, 100), ("SM0.0 warps", "fetch wait", 100, 150),
             ("SM0.1 warps", "softmax", 50, 150), ("SM0.1 warps", "fetch prologue", 150, 200)]  # fmt: skip
    assert wait_share(trace) == 100 * (50 + 50) / (150 + 150)
    assert wait_share([]) == 0.0
