"""The compiled build of the simulator's hot modules (setup.py, compiled.py): the same answers as their source,
to the bit, and never a build of an older source."""

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from importlib.machinery import ExtensionFileLoader
from pathlib import Path

import pytest
from flashsim import compiled

CASES = [
    ("h100", "v2", dict(batch=1, heads=16, seqlen_q=16384, headdim=128), {}),
    ("h100", "v2", dict(batch=1, heads=16, seqlen_q=2048, headdim=128), {"extrapolate": False}),
    ("h200", "v2", dict(batch=1, heads=16, seqlen_q=4096, headdim=64, causal=True), {}),
    ("h100", "v3", dict(batch=2, heads=16, seqlen_q=2048, headdim=128, causal=True), {}),
    ("h100", "v3-fp8", dict(batch=1, heads=16, seqlen_q=2048, headdim=128, dtype="fp8"), {}),
    ("h100", "standard", dict(batch=2, heads=8, seqlen_q=1024, headdim=64), {}),
    ("h100", "v2-bwd", dict(batch=1, heads=8, seqlen_q=2048, headdim=64), {}),
    ("h200", "v2", dict(batch=1, heads=8, kv_heads=2, seqlen_q=2048, headdim=128), {"sms": None}),
    ("h100", "v3", dict(batch=8, heads=16, seqlen_q=512, headdim=128), {}),  # whole-chip, tiles carried
]

ANSWERS = textwrap.dedent("""
    import json, sys
    from flashsim import compiled
    from flashsim.algorithms.problem import Problem
    from flashsim.hw_profiles.loader import load_profile
    from flashsim.simulator.api import simulate
    out = []
    for hw, algo, problem, kwargs in json.loads(sys.argv[1]):
        r = simulate(algo, Problem(**problem), load_profile(hw), **kwargs)
        answer = {k: v for k, v in vars(r).items() if k != "problem" and k != "tiling"}
        answer["sim"] = {k: v for k, v in r.sim.items() if k != "wall_s"}
        out.append(answer)
    print(json.dumps({"status": compiled.status(), "answers": out}, default=repr))
""")


def _answers(pure: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "FLASHSIM_PURE_PYTHON"}
    if pure:
        env["FLASHSIM_PURE_PYTHON"] = "1"
    run = subprocess.run([sys.executable, "-c", ANSWERS, json.dumps(CASES)], capture_output=True, text=True,
                         env=env, check=True)
    return json.loads(run.stdout)


def test_compiled_modules_answer_as_their_source_to_the_bit():
    if not compiled._manifest():
        pytest.skip("no compiled build (pip install -e . with a C compiler makes one)")
    built, source = _answers(pure=False), _answers(pure=True)
    assert set(built["status"].values()) == {"compiled"}, built["status"]
    assert set(source["status"].values()) == {"source"}, source["status"]
    assert built["answers"] == source["answers"]


def _tree(tmp_path, text: str, digest_of: str):
    (tmp_path / "simulator").mkdir()
    (tmp_path / "simulator" / "unit.py").write_text(text)
    (tmp_path / "_compiled" / "simulator").mkdir(parents=True)
    (tmp_path / "_compiled" / "simulator" / "unit.so").write_bytes(b"")
    entry = {"file": "simulator/unit.so", "sources": ["simulator/unit.py"],
             "sha256": hashlib.sha256(digest_of.encode()).hexdigest()}
    return compiled.CompiledFinder({"flashsim.simulator.unit": entry}, root=tmp_path)


def test_a_build_of_the_unchanged_source_is_found(tmp_path):
    finder = _tree(tmp_path, "x = 1\n", "x = 1\n")
    spec = finder.find_spec("flashsim.simulator.unit")
    assert isinstance(spec.loader, ExtensionFileLoader)
    assert spec.origin == str(tmp_path / "_compiled" / "simulator" / "unit.so")
    assert finder.loaded == {"flashsim.simulator.unit": True}
    assert finder.find_spec("flashsim.simulator.other") is None  # not built: the usual import


def test_an_edited_source_runs_instead_of_its_older_build(tmp_path):
    finder = _tree(tmp_path, "x = 2\n", "x = 1\n")
    assert finder.find_spec("flashsim.simulator.unit") is None
    assert finder.loaded == {"flashsim.simulator.unit": False}
    (tmp_path / "_compiled" / "simulator" / "unit.so").unlink()
    (tmp_path / "simulator" / "unit.py").write_text("x = 1\n")
    assert finder.find_spec("flashsim.simulator.unit") is None  # the build is gone


def test_setup_compiles_only_modules_that_exist():
    root = Path(__file__).resolve().parents[1]
    listed = (root / "setup.py").read_text().split("COMPILED = (", 1)[1].split(")", 1)[0]
    modules = [m.strip().strip('"') for m in listed.replace("\n", " ").split(",") if m.strip()]
    assert modules and all((root / f"{m}.py").is_file() for m in modules)


@pytest.mark.parametrize("states, words", [
    ({"a": "compiled", "b": "compiled", "c": "not loaded"}, "compiled"),
    ({"a": "compiled", "b": "source"}, "partly compiled"),
    ({"a": "source", "b": "not loaded"}, "from source"),
    ({}, "from source"),
])
def test_the_build_is_named_as_the_modules_run(monkeypatch, states, words):
    monkeypatch.setattr(compiled, "status", lambda: states)
    assert compiled.describe() == words


def test_simulate_says_how_its_modules_ran(capsys):
    from flashsim.cli import main

    assert main(["simulate", "--hw", "h100", "--algo", "v2", "--batch", "1", "--heads", "2", "--seqlen", "512",
                 "--headdim", "64", "--json"]) in (0, None)
    out = json.loads(capsys.readouterr().out)
    assert out["build"] == compiled.describe() and out["build"] in ("compiled", "partly compiled", "from source")
