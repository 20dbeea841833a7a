"""The result cache of sweep, compare and tour (simulator/result_cache.py): runs asked again come back from disk
equal to the runs made, marked; anything that decides a result gives another key; a bad file is a miss."""

import json

import pytest
from flashsim.algorithms.problem import Problem
from flashsim.cli import main
from flashsim.hw_profiles import load_profile
from flashsim.simulator import result_cache, runner

PROBLEM = Problem(batch=1, heads=4, seqlen_q=512, headdim=64)


def _run(jobs, **kw):
    return runner.run_many(jobs, lambda prof: 8, True, "test", workers=1, cache=True, **kw)


def test_second_run_comes_from_the_cache(monkeypatch):
    jobs = [("v2", PROBLEM, load_profile("h100")), ("v3", PROBLEM, load_profile("h100"))]
    first, _ = _run(jobs)
    assert not any(r.sim.get("from_cache") for r in first)

    def no_simulation(task):
        raise AssertionError("a cached run was simulated again")

    monkeypatch.setattr(runner, "simulate_task", no_simulation)
    again, skipped = _run(jobs)
    assert not skipped and all(r.sim["from_cache"] for r in again)
    for a, b in zip(first, again, strict=True):
        assert (a.algo, a.cycles, a.bytes, a.time_s) == (b.algo, b.cycles, b.bytes, b.time_s)


def test_key_follows_what_decides_the_result():
    h100 = load_profile("h100")
    task = ("v2", PROBLEM, h100, 8, True, None, None, None)
    same = ("v2", Problem(batch=1, heads=4, seqlen_q=512, headdim=64), load_profile("h100"), 8, True, None, None, None)
    assert result_cache.key(task) == result_cache.key(same)
    others = [
        ("v3", *task[1:]),
        ("v2", Problem(batch=1, heads=4, seqlen_q=512, headdim=64, causal=True), *task[2:]),
        ("v2", PROBLEM, load_profile("h100", ["hbm_bandwidth_bytes_per_s=6e12"]), *task[3:]),
        ("v2", PROBLEM, load_profile("h200"), *task[3:]),
        (*task[:3], None, *task[4:]),
        (*task[:4], False, *task[5:]),
        (*task[:5], 1000, *task[6:]),
        (*task[:6], 2, None),
    ]
    keys = {result_cache.key(t) for t in others}
    assert result_cache.key(task) not in keys and len(keys) == len(others)


def test_key_follows_every_byte_of_the_model_and_none_of_its_presentation(tmp_path):
    """The code in the key is the model's files as the reports' fingerprint chooses them, read whole."""
    for rel in ("simulator/gpu.py", "simulator/runner.py", "algorithms/ir.py", "experiments/prediction_inputs.py",
                "experiments/lab/causal.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x = 1\n")
    before = result_cache.source_hash(tmp_path)
    (tmp_path / "simulator/runner.py").write_text("x = 2\n")  # presentation: drives runs, decides none
    (tmp_path / "experiments/lab/causal.py").write_text("x = 2\n")  # no model source
    assert result_cache.source_hash(tmp_path) == before
    for rel in ("simulator/gpu.py", "algorithms/ir.py", "experiments/prediction_inputs.py"):
        (tmp_path / rel).write_text("x = 1  # a comment\n")
        assert result_cache.source_hash(tmp_path) != before
        before = result_cache.source_hash(tmp_path)
    (tmp_path / "simulator/new.py").write_text("")
    assert result_cache.source_hash(tmp_path) != before


def test_unreadable_file_is_a_miss():
    task = ("v2", PROBLEM, load_profile("h100"), 8, True, None, None, None)
    path = result_cache._path(result_cache.key(task))
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not a pickle")
    assert result_cache.load(task) is None
    (result,), _ = _run([task[:3]])
    assert not result.sim.get("from_cache")
    assert result_cache.load(task).cycles == result.cycles  # written again, readable now


def test_refused_runs_are_not_kept():
    huge = Problem(batch=1, heads=4, seqlen_q=1 << 30, headdim=64)
    results, skipped = _run([("v2", huge, load_profile("h100"))])
    assert not results and skipped
    assert result_cache.load(("v2", huge, load_profile("h100"), 8, True, None, None, None)) is None


@pytest.mark.parametrize("command", ["sweep", "compare"])
def test_cli_answers_from_the_cache_unless_told_not_to(command, capsys):
    args = {"sweep": ["sweep", "--seqlens", "512", "--headdims", "64", "--causal", "off", "--algos", "v2"],
            "compare": ["compare", "--algos", "v2", "--seqlen", "512", "--batch", "1", "--heads", "4"]}[command]
    args += ["--jobs", "1", "--json"]

    def results(extra=()):
        assert main([*args, *extra]) == 0
        out = json.loads(capsys.readouterr().out)
        return out["results"] if command == "compare" else out["rows"]

    first = results()
    again = results()
    fresh = results(["--no-cache"])
    if command == "compare":
        assert not first[0]["sim"].get("from_cache") and again[0]["sim"]["from_cache"]
        assert not fresh[0]["sim"].get("from_cache")
        assert first[0]["cycles"] == again[0]["cycles"] == fresh[0]["cycles"]
    else:
        assert [r["from_cache"] for r in first + again + fresh] == [False, True, False]
        for row in first, again, fresh:
            del row[0]["from_cache"], row[0]["sim_wall_s"]
        assert first == again == fresh


def test_cache_command_counts_and_clears(capsys):
    _run([("v2", PROBLEM, load_profile("h100"))])
    assert main(["cache", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["runs"] == 1 and info["bytes"] > 0
    assert main(["cache", "clear", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["removed"] == 1
    assert main(["cache", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["runs"] == 0
    with pytest.raises(SystemExit) as exc:  # a bad action: one line, exit status 2
        main(["cache", "drop"])
    assert exc.value.code == 2 and capsys.readouterr().err.count("\n") == 1
