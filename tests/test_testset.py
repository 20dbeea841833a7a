"""The held-out test set: drawn from its seed exactly as committed, LLM-shaped, within the caps; measured into
its own file; reported apart from the development set by validate and accuracy (GPU-free)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from flashsim import cli
from flashsim.errors import FlashsimError
from flashsim.experiments import accuracy, testset, validate, validate_compare, validate_support
from flashsim.experiments import validate_store as store
from flashsim.experiments.validate_sets import DEV, TEST

# -- the generator --------------------------------------------------------------------------------------


def test_seed_reproduces_the_committed_list_exactly() -> None:
    """Nobody redraws the test set: the committed file is what the seed gives, in order."""
    drawn = testset.generate()
    assert testset.as_json(drawn) == testset.FILE.read_text()
    assert testset.committed() == drawn == validate.GRIDS["test"]()
    assert testset.generate(testset.SEED + 1) != drawn  # the seed decides


def test_llm_development_draw_is_committed_and_shares_no_shape_with_the_test_set() -> None:
    """The off-grid development data is another seed's draw, committed as drawn, and never a test shape."""
    dev = testset.generate_dev()
    header = {"seed": testset.DEV_SEED, "flop_cap": testset.FLOP_CAP, "memory_cap_bytes": testset.MEMORY_CAP}
    assert testset.as_json(dev, header) == testset.DEV_FILE.read_text()
    assert testset.committed(testset.DEV_FILE) == dev == validate.GRIDS["dev-llm"]()
    assert len(dev) == testset.DEV_COUNT
    assert not {c.id for c in dev} & {c.id for c in testset.committed()}
    assert validate.measured_name("dev-llm") != validate.measured_name("test")


def test_the_d256_development_set_is_d256_and_shares_no_shape_with_the_test_set() -> None:
    """The head-dim-256 development data looks where the test set's d256 rows go wrong without being them:
    d256 only, one to many blocks per SM, causal and not, its own measurement file."""
    dev = validate.GRIDS["dev-d256"]()
    assert {c.headdim for c in dev} == {256} and len({c.id for c in dev}) == len(dev)
    assert {c.causal for c in dev} == {False, True} and any(c.hkv < c.heads for c in dev)
    assert any(c.nk > c.seqlen_q for c in dev)
    assert not {c.id for c in dev} & {c.id for c in testset.committed()}
    assert validate.measured_name("dev-d256") not in {validate.measured_name(g) for g in ("test", "fa2", "dev-llm")}


def test_shapes_are_llm_like_and_cover_the_ranges() -> None:
    configs = testset.committed()
    assert len(configs) >= 64 and len({c.id for c in configs}) == len(configs)
    assert all(1 <= c.batch <= 64 and 8 <= c.heads <= 128 for c in configs)
    ratios = {c.heads // c.hkv for c in configs}
    assert all(c.heads % c.hkv == 0 for c in configs) and ratios == {1, 2, 4, 8}
    lengths = [n for c in configs for n in (c.seqlen_q, c.nk)]
    assert min(lengths) == 128 and max(lengths) == 128 << 10
    assert sum(n % 64 != 0 for n in lengths) >= 10  # odd lengths no tile divides
    assert {c.headdim for c in configs} == {64, 96, 128, 256}
    assert any(c.causal for c in configs) and any(not c.causal for c in configs)
    prefix = [c for c in configs if c.causal and c.seqlen_q < c.nk]
    assert len(prefix) >= 8  # prefill against a cached prefix
    assert not any(c.causal and c.seqlen_q > c.nk for c in configs)  # rows that see no key: none
    assert any(not c.causal and c.seqlen_q != c.nk for c in configs)


def test_every_shape_is_under_the_caps() -> None:
    for c in testset.committed():
        assert testset.work_flops(c) <= testset.FLOP_CAP, c.id
        assert testset.memory_bytes(c) <= testset.MEMORY_CAP, c.id


def test_caps_cut_the_batch_first_then_heads_then_queries() -> None:
    big = validate.Config(64, 64, 32768, 128, causal=True, kv_heads=8)
    cut = testset._fit(big)
    assert testset.work_flops(cut) <= testset.FLOP_CAP
    assert cut.batch == 1 and cut.heads // cut.hkv == 8 and cut.nk == 32768
    small = validate.Config(4, 32, 1024, 64)
    assert testset._fit(small) == small


def test_visible_pairs_match_an_explicit_mask() -> None:
    for nq, nk in ((5, 5), (3, 8), (8, 3), (1, 4)):
        explicit = sum(1 for r in range(nq) for j in range(nk) if j <= r + nk - nq)
        assert testset.visible_pairs(nq, nk, True) == explicit
        assert testset.visible_pairs(nq, nk, False) == nq * nk


def test_device_time_estimate_fits_the_budget() -> None:
    e = testset.estimate(testset.committed())
    assert e["seconds"] < 4 * 60
    assert e["flops"] > sum(testset.work_flops(c) for c in testset.committed())  # repeats counted
    # a call at the cap: 10 timed calls at least, about 0.5 s of them, plus the untimed ones
    t = testset.call_seconds(testset.FLOP_CAP)
    assert testset.calls_per_measurement(t) == testset.UNTIMED_CALLS + 14
    assert testset.calls_per_measurement(1e-6) == testset.UNTIMED_CALLS + testset.MAX_REPS


def test_testset_module_prints_the_estimate(capsys: pytest.CaptureFixture[str]) -> None:
    assert testset.main([]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert "TFLOP in all calls" in last and "min of device time at 400 TFLOP/s" in last


# -- measuring: files, implementations, alignment ----------------------------------------------------------


def test_test_grid_measures_into_its_own_file_with_its_own_implementations() -> None:
    assert validate.measured_name("test") == TEST.measured == "testset-measured.jsonl"
    assert validate.measured_name("fa2") == validate.measured_name("smoke") == DEV.measured
    assert validate.DEFAULT_IMPLS["test"] == ["v2", "v3", "sdpa-flash", "sdpa-cudnn"]


def test_causal_alignment_is_recorded_only_where_it_changes_the_mask() -> None:
    ours, flash = validate.IMPLS["v3"], validate.IMPLS["sdpa-flash"]
    assert validate_support.causal_align(ours) == "bottom-right"
    assert validate_support.causal_align(flash) == "top-left"
    prefix = validate.Config(1, 8, 512, 128, causal=True, seqlen_k=2048)
    assert prefix.problem_dict("bf16", "top-left")["causal_align"] == "top-left"
    assert "causal_align" not in prefix.problem_dict("bf16", "bottom-right")  # the default
    square = validate.Config(1, 8, 512, 128, causal=True)
    assert "causal_align" not in square.problem_dict("bf16", "top-left")  # same mask either way
    assert "causal_align" not in validate.Config(1, 8, 512, 128, seqlen_k=2048).problem_dict("bf16", "top-left")


def test_refusals_are_told_from_failures() -> None:
    assert validate_support.is_refusal(FlashsimError("v3 kernels are built for head dims 64, 128, not 96"))
    assert validate_support.is_refusal(RuntimeError("No available kernel. Aborting execution."))
    assert not validate_support.is_refusal(RuntimeError("CUDA error: an illegal memory access was encountered"))


def test_a_top_left_row_is_simulated_top_left_or_refused_with_the_reason() -> None:
    pytest.importorskip("simpy")
    from flashsim.algorithms.problem import Problem

    cfg = validate.Config(1, 2, 128, 64, causal=True, seqlen_k=384)
    res = validate_compare._simulate(("v2", cfg.problem_dict("bf16", "top-left"), None, "h200", []))
    if hasattr(Problem, "causal_align"):
        bottom = validate_compare._simulate(("v2", cfg.problem_dict("bf16"), None, "h200", []))
        # top-left, the 128 queries see the first 128 keys only: less work than bottom-right's 256 + triangle
        assert res["predicted"]["kernel_time_s"] < bottom["predicted"]["kernel_time_s"]
    else:
        assert "causal_align" in res["predict_error"]


# -- dev and test reported apart ---------------------------------------------------------------------------


def _write_set(out: Path, data_set, rows: list[tuple[str, str, validate.Config, float]]) -> Path:
    """A measured file of (impl, algo, config, busy seconds) rows, one session."""
    path = out / data_set.measured
    store.append(path, {"type": "session", "gpu": "Test GPU", "driver": "1.0", "cuda_runtime": "13.0",
                        "torch": "2.x", "date": "2026-01-01", "command": "flashsim validate"})  # fmt: skip
    for impl, algo, cfg, busy in rows:
        align = validate_support.causal_align(validate.IMPLS[impl])
        store.append(path, {"type": "time", "key": validate.key("time", impl, cfg), "impl": impl, "algo": algo,
                            "config": cfg.problem_dict("bf16", align), "config_id": cfg.id, "tiling": None,
                            "causal_align": align, "status": "ok", "time_s": busy * 1.1,
                            "kernel_time_s": busy})  # fmt: skip
    return path


def _fixed_prediction(job):  # 1 ms of GPU busy time whatever the configuration
    return {"predicted": {"time_s": 1.1e-3, "kernel_time_s": 1e-3, "hbm_read": 1e6, "hbm_write": 1e5,
                          "l2_bytes": 1e7}, "sim": {"bound_by": "tensor"}}  # fmt: skip


@pytest.fixture
def two_sets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Dev: v2 measured 1.25 ms (prediction -20%). Test: v2 at 0.5 ms (+100%) and 2 ms (-50%), v3 refused d96."""
    monkeypatch.setattr(validate_compare, "_simulate", _fixed_prediction)
    _write_set(tmp_path, DEV, [("v2", "v2", validate.Config(2, 4, 512, 64), 1.25e-3)])
    path = _write_set(tmp_path, TEST, [("v2", "v2", validate.Config(1, 8, 300, 128), 0.5e-3),
                                       ("v2", "v2", validate.Config(1, 8, 700, 64), 2e-3)])  # fmt: skip
    cfg = validate.Config(1, 8, 300, 96)
    store.append(path, {"type": "time", "key": validate.key("time", "v3", cfg), "impl": "v3", "algo": "v3",
                        "config": cfg.problem_dict("bf16"), "config_id": cfg.id, "status": "skipped",
                        "error": "FlashsimError: v3 kernels are built for head dims 64, 128, not 96"})  # fmt: skip
    return tmp_path


def test_compare_only_reports_each_set_from_its_own_file(two_sets: Path, capsys) -> None:
    assert cli.main(["validate", "--compare-only", "--out-dir", str(two_sets), "--jobs", "1"]) == 0
    out = capsys.readouterr().out
    assert "development set" in out and "test set" in out and "development set against test set" in out
    dev = json.loads((two_sets / DEV.report).read_text())
    test = json.loads((two_sets / TEST.report).read_text())
    assert dev["summary"]["v2"]["kernel_time_s"]["mape"] == pytest.approx(20.0)
    assert test["summary"]["v2"]["kernel_time_s"] == {"n": 2, "mape": pytest.approx(75.0),
                                                      "max_err": pytest.approx(100.0), "bias": pytest.approx(25.0)}
    assert dev["set"]["name"] == "dev" and test["set"]["name"] == "test"
    assert any("head dims 64, 128, not 96" in f["status"] for f in test["failed"])
    assert (two_sets / "testset.md").is_file() and (two_sets / "testset.png").stat().st_size > 1000


def test_accuracy_shows_both_sets_and_json_includes_both(two_sets: Path, capsys) -> None:
    assert cli.main(["validate", "--compare-only", "--out-dir", str(two_sets), "--jobs", "1"]) == 0
    capsys.readouterr()
    report = str(two_sets / DEV.report)
    assert cli.main(["accuracy", "--file", report]) == 0
    out = capsys.readouterr().out
    assert "75.0" in out and "100.0" in out and "20.0" in out and "testset.png" in out
    assert cli.main(["accuracy", "--file", report, "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert obj["set"] == "dev" and obj["summary"]["v2"]["kernel_time_s"]["n"] == 1
    assert obj["test"]["summary"]["v2"]["kernel_time_s"]["max_err"] == pytest.approx(100.0)
    side = obj["dev_vs_test"]["impls"]["v2"]
    assert side["dev"]["mape"] == pytest.approx(20.0) and side["test"]["mape"] == pytest.approx(75.0)


def test_accuracy_adds_the_committed_llm_development_set(capsys) -> None:
    """`flashsim accuracy` on the committed reports also shows the LLM-shaped development set, and --json
    carries its summary beside the development and test sets'."""
    assert cli.main(["accuracy"]) == 0
    assert "LLM-shaped development set" in capsys.readouterr().out
    assert cli.main(["accuracy", "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    llm = obj["dev_llm"]
    assert llm["file"].endswith("devset-llm.json") and llm["summary"]["v3"]["kernel_time_s"]["n"] >= 40
    assert llm["summary"]["v2"]["kernel_time_s"] != obj["test"]["summary"]["v2"]["kernel_time_s"]


def test_accuracy_without_a_test_set_says_so_in_one_line(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(validate_compare, "_simulate", _fixed_prediction)
    _write_set(tmp_path, DEV, [("v2", "v2", validate.Config(2, 4, 512, 64), 1.25e-3)])
    assert cli.main(["validate", "--compare-only", "--out-dir", str(tmp_path), "--jobs", "1"]) == 0
    assert not (tmp_path / TEST.report).exists()
    capsys.readouterr()
    assert cli.main(["accuracy", "--file", str(tmp_path / DEV.report)]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if "test set" in ln.lower()]
    assert lines == [accuracy.NO_TEST]
    assert cli.main(["accuracy", "--file", str(tmp_path / DEV.report), "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert obj["test"]["missing"] == accuracy.NO_TEST and obj["dev_vs_test"]["impls"]["v2"]["test"] is None


def test_compare_only_without_any_measurements_is_one_line(tmp_path: Path, capsys) -> None:
    assert cli.main(["validate", "--compare-only", "--out-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no measurements" in err
