"""The comparison with published FlashAttention throughput (experiments/published.py): the committed results
hold exactly the table's points, each cited, and their errors and MAPE are what the predictions give."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest
from flashsim.experiments import published as pub

RESULTS = Path(pub.__file__).parent / "results"
POINT_FIELDS = ("source", "gpu", "hw", "impl", "algo", "dtype", "batch", "heads", "seqlen", "headdim", "causal",
                "published_tflops", "approximate", "flops", "options")


@pytest.fixture(scope="module")
def committed() -> dict:
    return json.loads((RESULTS / "published.json").read_text())


def test_the_committed_comparison_holds_every_published_point_once(committed):
    expected = [asdict(p) for p in pub.points()]
    assert len(committed["rows"]) == len(expected)
    for row, point in zip(committed["rows"], expected, strict=True):
        assert {k: row[k] for k in POINT_FIELDS} == {k: point[k] for k in POINT_FIELDS}
        assert row["pass"] == point["pass_"]


def test_errors_and_mape_are_recomputed_from_the_predictions(committed):
    rows = committed["rows"]
    for r in rows:
        assert r["error"] == pytest.approx(r["predicted_tflops"] / r["published_tflops"] - 1, rel=1e-12)
    # the same sums, maybe in another order (the file may come from another machine): equal to 1e-12
    assert _rounded(committed["summary"]) == _rounded(pub.summarise(rows))
    worst = max(rows, key=lambda r: abs(r["error"]))
    assert committed["summary"]["max_abs_error"] == pytest.approx(abs(worst["error"]))
    assert (RESULTS / "published.md").read_text() == pub.markdown(committed)


def test_mape_is_the_mean_of_absolute_relative_errors():
    rows = [{"error": pub.error(110, 100)}, {"error": pub.error(80, 100)}]
    assert pub.mape(rows) == pytest.approx((0.10 + 0.20) / 2)


def test_every_point_cites_its_paper_and_figure_and_follows_the_papers_grid():
    for p in pub.points():
        assert "arXiv" in p.source and ("Figure" in p.source or "Table" in p.source)
        assert p.flops in (pub.FLOPS_FWD, pub.FLOPS_FWD_BWD)
        if "Table" not in p.source:
            assert p.batch * p.seqlen == 16384 and p.heads * p.headdim == 2048
    # the schedule follows the implementation: FA2 on mma.sync (v2), FA3 on wgmma (v3)
    assert {(p.impl, p.algo) for p in pub.points()} == {("FlashAttention-2", "v2"), ("FlashAttention-3", "v3")}


def test_the_profiles_are_the_h100_and_a100_with_their_provenance(committed):
    seen = {(r["hw"], r["profile"], r["provenance"]) for r in committed["rows"]}
    assert seen == {("a100", "a100-sxm4-80gb", "datasheet-only"), ("h100", "h100-sxm5-80gb", "derived")}


def test_approximate_values_are_the_ones_read_off_a_plot():
    marked = {(s.headdim, s.causal, n) for s in pub.SERIES for n, v in zip(pub.SEQLENS, s.tflops, strict=True)
              if isinstance(v, str)}
    flagged = {(p.headdim, p.causal, p.seqlen) for p in pub.points() if p.approximate}
    assert flagged == marked and marked


def _rounded(x):
    if isinstance(x, dict):
        return {k: _rounded(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_rounded(v) for v in x]
    return float(f"{x:.12g}") if isinstance(x, float) else x
