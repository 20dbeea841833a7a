"""The instruction counter (experiments/instruction_count.py): reading callgrind's count, and a clear refusal
where valgrind is missing. Counting itself runs a simulation 50 times slower, so it is left to the command."""

import pytest
from flashsim.experiments import instruction_count


def test_the_count_is_callgrind_s_last_collected_line():
    stderr = "==12== Callgrind, a call-graph generating cache profiler\n==12== Events    : Ir\n" \
             "==12== Collected : 4752020504\n==12==\n==12== I   refs:      4,752,020,504\n"
    assert instruction_count.collected(stderr) == 4_752_020_504
    assert instruction_count.collected("==12== Command: python\n") is None


def test_without_valgrind_it_says_so_and_exits_2(monkeypatch, capsys):
    monkeypatch.setattr(instruction_count.shutil, "which", lambda name: None)
    with pytest.raises(SystemExit) as stop:
        instruction_count.main(["--only", "point"])
    assert stop.value.code == 2
    assert "valgrind is not installed" in capsys.readouterr().err


def test_a_failed_run_is_reported_not_counted(monkeypatch):
    class Done:
        returncode, stdout, stderr = 1, "", "Traceback\nValueError: no such profile\n"

    monkeypatch.setattr(instruction_count.subprocess, "run", lambda *a, **k: Done())
    out = instruction_count.count(instruction_count.CASES[0], None, "valgrind")
    assert "instructions" not in out and out["failed"][-1] == "ValueError: no such profile"
