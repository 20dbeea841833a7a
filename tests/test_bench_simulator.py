"""bench_simulator times whole flashsim processes; --against times another checkout run for run beside it and
says whether both answer alike (a run's wall seconds aside)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from flashsim.experiments import bench_simulator as bench

ROOT = Path(bench.__file__).resolve().parents[1]
TINY = ("tiny", "simulate --hw h100 --algo v2 --batch 1 --heads 1 --seqlen 256 --headdim 64", 10.0, None)


def test_answers_agree_apart_from_the_runs_bookkeeping():
    a = {"cycles": 10, "bytes": {"hbm_read": 4}, "sim": {"wall_s": 0.3, "events": 9}}
    assert bench._same(a, {**a, "sim": {"wall_s": 0.5, "events": 9}})
    assert not bench._same(a, {**a, "cycles": 11})
    assert not bench._same(a, {**a, "bytes": {"hbm_read": 5}})


def test_against_times_the_other_tree_run_for_run(tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "CASES", [TINY])
    out = tmp_path / "speed.json"
    assert bench.main(["--repeats", "2", "--against", str(ROOT), "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    case = doc["tiny"]
    assert len(case["wall_s"]) == len(case["against"]["wall_s"]) == 2
    assert case["against"]["same_answer"] is True  # the same sources answer alike
    assert case["answer"]["cycles"] > 0
    assert doc["provenance"]["against"] == str(ROOT) and doc["provenance"]["loop_s"] > 0


def test_against_refuses_a_folder_that_is_no_checkout(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        bench.main(["--against", str(tmp_path), "--out", str(tmp_path / "x.json")])
    assert exit_.value.code == 2
    assert "not a flashsim checkout" in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()
