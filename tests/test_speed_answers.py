"""experiments/speed_answers.py: the answers of a case list, and the cases whose answers differ."""

from __future__ import annotations

import json
from pathlib import Path

from flashsim.experiments import speed_answers


def _write(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def test_a_case_answers_its_cycles_bytes_and_events():
    row = speed_answers.answer("--hw h100 --algo standard --batch 1 --heads 2 --seqlen 256 --headdim 64")
    answer = row["answer"]
    assert answer["cycles"] > 0 and answer["events"] > 0 and answer["bytes"]["hbm_read"] > 0
    assert "loop_skip" in answer


def test_cases_whose_answers_differ_are_named_and_wall_times_do_not_count(tmp_path):
    same = {"case": "a", "wall_s": 1.0, "answer": {"cycles": 10}}
    a = _write(tmp_path / "a.jsonl", [same, {"case": "b", "answer": {"cycles": 5}}])
    b = _write(tmp_path / "b.jsonl", [{**same, "wall_s": 2.0}, {"case": "b", "answer": {"cycles": 6}}])
    assert speed_answers.differences(a, b) == ["b"]
    assert speed_answers.main(["--compare", a, b]) == 1
    assert speed_answers.main(["--compare", a, a]) == 0


def test_a_differing_case_names_what_of_its_answer_differs(tmp_path):
    """A shortcut newly taken moves events and its own count, not cycles or bytes: the comparison says so."""
    base = {"cycles": 10, "bytes": {"hbm_read": 4}, "events": 100, "periodic_skips": 0}
    a = _write(tmp_path / "a.jsonl", [{"case": "c", "answer": base}])
    b = _write(tmp_path / "b.jsonl", [{"case": "c", "answer": {**base, "events": 80, "periodic_skips": 1}}])
    assert speed_answers.changed(a, b, "c") == ["events", "periodic_skips"]
    c = _write(tmp_path / "c.jsonl", [{"case": "c", "answer": {**base, "bytes": {"hbm_read": 5}}}])
    assert speed_answers.changed(a, c, "c") == ["bytes"]
