"""The committed sampling-exactness table (experiments/sampling_exactness.py) covers the whole FA2 grid and its
differences and summary recompute from its runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from flashsim.experiments import sampling_exactness as ex

RESULTS = Path(ex.__file__).parent / "results" / "sampling-exactness.json"


def test_the_committed_table_covers_the_grid_and_recomputes():
    doc = json.loads(RESULTS.read_text())
    assert [r["key"] for r in doc["rows"]] == [f"{hw} {a} {p.describe()}" for hw, a, p in ex.grid()]
    for r in doc["rows"]:
        assert r["difference"] == pytest.approx(r["default"]["cycles"] / r["full"]["cycles"] - 1)
        assert r["full"]["sms_simulated"] == {"h100": 132, "h200": 132, "a100": 108}[r["key"].split()[0]]
    within = sum(abs(r["difference"]) <= 0.02 for r in doc["rows"])
    assert doc["summary"]["within_2pct"] == within and doc["summary"]["points"] == len(doc["rows"]) == 120
