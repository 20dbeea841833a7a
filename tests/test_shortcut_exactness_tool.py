"""experiments/shortcut_exactness.py takes earlier plain runs only from the model that took them."""

from __future__ import annotations

import json

import pytest
from flashsim.experiments import shortcut_exactness as se
from flashsim.experiments.validate_compare import model_fingerprint

ROW = {"name": "v2 d64", "algo": "v2", "hw": "h100", "problem": {"batch": 2}, "plain_cycles": 123,
       "plain_bytes": {"hbm_read": 4}, "plain_ops": 5, "plain_cpu_s": 6.0}


def _plain_file(tmp_path, provenance: dict):
    path = tmp_path / "plain.json"
    path.write_text(json.dumps({"provenance": provenance, "rows": [ROW]}))
    return path


def test_plain_runs_of_this_model_are_taken(tmp_path) -> None:
    path = _plain_file(tmp_path, {"model_fingerprint": model_fingerprint()})
    answers = se._plain_answers([str(path)], model_fingerprint())
    assert list(answers.values()) == [{"cycles": 123, "bytes": {"hbm_read": 4}, "ops": 5, "cpu_s": 6.0}]


@pytest.mark.parametrize("provenance", [{"model_fingerprint": "0123456789abcdef"}, {}])
def test_plain_runs_of_another_or_unrecorded_model_are_refused_in_one_line(tmp_path, capsys, provenance) -> None:
    out = tmp_path / "out.json"
    path = _plain_file(tmp_path, provenance)
    assert se.main(["--only", "v2 d64", "--plain-from", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "take them again" in err
    assert not out.exists()  # refused before any simulation or output


def test_an_unreadable_plain_file_is_refused_in_one_line(tmp_path, capsys) -> None:
    out = tmp_path / "out.json"
    assert se.main(["--only", "v2 d64", "--plain-from", str(tmp_path / "missing.json"), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "cannot read --plain-from" in err
    assert not out.exists()
