"""validate: error metrics, JSON-lines storage and resume, ncu parsing, the comparison report (GPU-free)."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest
from flashsim import cli
from flashsim.errors import FlashsimError
from flashsim.experiments import validate, validate_compare, validate_ncu
from flashsim.experiments import validate_store as store
from flashsim.experiments.validate_metrics import pct_error, summarize, summarize_groups
from flashsim.hw_profiles import load_profile

# -- metrics ----------------------------------------------------------------------------------------------


def test_pct_error_is_signed_percent_of_measurement() -> None:
    assert pct_error(110.0, 100.0) == pytest.approx(10.0)
    assert pct_error(50.0, 100.0) == pytest.approx(-50.0)
    with pytest.raises(ValueError):
        pct_error(1.0, 0.0)


def test_summarize_mape_max_bias() -> None:
    s = summarize([(110.0, 100.0), (80.0, 100.0), (2.0, 1.0)])  # +10%, -20%, +100%
    assert s["n"] == 3
    assert s["mape"] == pytest.approx((10 + 20 + 100) / 3)
    assert s["max_err"] == pytest.approx(100.0)
    assert s["bias"] == pytest.approx((10 - 20 + 100) / 3)
    assert summarize([]) == {"n": 0, "mape": None, "max_err": None, "bias": None}


def test_summarize_groups_counts_only_rows_with_both_values() -> None:
    rows = [
        {"impl": "a", "predicted": {"t": 2.0, "b": 5.0}, "measured": {"t": 1.0}},
        {"impl": "a", "predicted": {"t": 3.0}, "measured": {"t": 3.0, "b": 4.0}},
        {"impl": "b", "predicted": {}, "measured": {"t": 1.0}},
    ]
    out = summarize_groups(rows, "impl", ["t", "b"])
    assert out["a"]["t"] == {"n": 2, "mape": 50.0, "max_err": 100.0, "bias": 50.0}
    assert out["a"]["b"]["n"] == 0 and out["b"]["t"]["n"] == 0


# -- JSON lines and resume --------------------------------------------------------------------------------


def test_store_appends_and_skips_a_torn_last_line(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    store.append(path, {"type": "time", "key": "k1", "status": "ok"})
    store.append(path, {"type": "time", "key": "k2", "status": "failed"})
    with path.open("a") as f:
        f.write('{"type": "time", "key": "k3", "sta')  # the process died mid-write
    recs = store.load(path)
    assert [r["key"] for r in recs] == ["k1", "k2"]
    assert store.done_keys(recs) == {"k1", "k2"}
    assert store.done_keys(recs, retry_failed=True) == {"k1"}
    store.append(path, {"type": "time", "key": "k2", "status": "ok"})  # appended after the torn line
    assert store.latest(store.load(path))["k2"]["status"] == "ok"


def test_store_refuses_a_foreign_file(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    path.write_text("not json\n{}\n")
    with pytest.raises(FlashsimError, match="line 1"):
        store.load(path)


def _fake_record(cfg: validate.Config, impl: str) -> dict:
    return {"type": "time", "key": validate.key("time", impl, cfg), "impl": impl, "status": "ok", "time_s": 1e-3}


def test_sweep_writes_each_record_as_it_comes_and_resumes(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    configs = validate.smoke()
    impls = ["v2", "sdpa-flash"]
    calls: list[tuple[str, str]] = []

    def interrupted(cfg, names):
        for name in names:
            if len(calls) == 3:
                raise KeyboardInterrupt  # the sweep is killed while measuring the fourth
            calls.append((cfg.id, name))
            yield _fake_record(cfg, name)

    with pytest.raises(KeyboardInterrupt):
        validate.sweep(configs, impls, path, interrupted, time.monotonic() + 60, log=lambda _: None)
    assert len(store.load(path)) == 3  # nothing finished was lost

    calls.clear()

    def complete(cfg, names):
        for name in names:
            calls.append((cfg.id, name))
            yield _fake_record(cfg, name)

    written = validate.sweep(configs, impls, path, complete, time.monotonic() + 60, log=lambda _: None)
    assert written == len(configs) * len(impls) - 3  # only what was missing
    assert calls[0] == (configs[1].id, "sdpa-flash")
    assert len(store.latest(store.load(path))) == len(configs) * len(impls)


def test_sweep_stops_at_the_deadline(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    msgs: list[str] = []
    n = validate.sweep(validate.smoke(), ["v2"], path, lambda c, ns: iter(()), time.monotonic() - 1, log=msgs.append)
    assert n == 0 and "time limit" in msgs[-1]


def test_grids() -> None:
    grid = validate.fa2_grid()
    assert len(grid) == 24
    assert all(c.batch * c.seqlen_q == 16384 and c.heads * c.headdim == 2048 for c in grid)
    ids = [c.id for c in validate.GRIDS["fa2"]()]
    assert len(ids) == len(set(ids))
    assert validate.Config(2, 32, 4096, 128, causal=True, kv_heads=8).id == "b2-h32-kv8-n4096-d128-causal"


# -- ncu --------------------------------------------------------------------------------------------------

NCU_HEADER = (
    "ID,Process ID,Process Name,Host Name,Kernel Name,Context,Stream,Block Size,Grid Size,Device,CC,"
    "Section Name,Metric Name,Metric Unit,Metric Value"
)


def _ncu_csv(rows: list[tuple[int, str, str, str, str]]) -> str:
    """ncu --csv text: a message line, the header, then one quoted row per (id, kernel, metric, unit, value)."""
    out = ["==PROF== Connected to process 123", ",".join(f'"{h}"' for h in NCU_HEADER.split(","))]
    for kid, name, metric, unit, value in rows:
        fields = [str(kid), "1", "python3", "h", name, "1", "7", "(128, 1, 1)", "(4, 2, 2)", "0", "9.0",
                  "Command line profiler metrics", metric, unit, value]  # fmt: skip
        out.append(",".join(f'"{f}"' for f in fields))
    return "\n".join(out) + "\n"


NCU_CSV = _ncu_csv(
    [
        (0, "ncu_marker", "dram__bytes_read.sum", "byte", "0"),
        (1, "flash_fwd_kernel(Params)", "dram__bytes_read.sum", "byte", "1,048,576"),
        (1, "flash_fwd_kernel(Params)", "dram__bytes_write.sum", "Kbyte", "512"),
        (1, "flash_fwd_kernel(Params)", "lts__t_bytes.sum", "Mbyte", "2.5"),
        (1, "flash_fwd_kernel(Params)", "gpu__time_duration.sum", "usecond", "12.5"),
        (2, "ncu_marker", "dram__bytes_read.sum", "byte", "0"),
        (3, "softmax", "dram__bytes_read.sum", "byte", "100"),
        (4, "gemm", "dram__bytes_read.sum", "byte", "200"),
    ]
)


def test_the_test_sets_byte_sample_is_fixed_half_causal_and_of_any_shape() -> None:
    configs = validate.test_set()
    sample = validate.byte_sample(configs, 12)
    assert [c.id for c in sample] == [c.id for c in validate.byte_sample(list(reversed(configs)), 12)]
    assert len(sample) == 12 and len({c.id for c in sample}) == 12
    assert sum(c.causal for c in sample) == 6
    assert any(c.hkv != c.heads for c in sample) and any(c.nk != c.seqlen_q for c in sample)
    assert len(validate.byte_sample(configs[:3], 12)) == 3  # never more than the grid holds


def test_ncu_sample_must_not_be_negative(capsys) -> None:
    assert cli.main(["validate", "--grid", "test", "--ncu-sample", "-2", "--measure-only"]) == 2
    assert "--ncu-sample" in capsys.readouterr().err


def test_ncu_csv_parse_and_grouping() -> None:
    kernels = validate_ncu.parse_csv(NCU_CSV)
    assert [k["id"] for k in kernels] == [0, 1, 2, 3, 4]
    m = kernels[1]["metrics"]
    assert m["dram__bytes_read.sum"] == 1048576
    assert m["dram__bytes_write.sum"] == 512e3
    assert m["lts__t_bytes.sum"] == 2.5e6
    assert m["gpu__time_duration.sum"] == pytest.approx(12.5e-6)
    base = {"impl": "x", "algo": "v2", "config": {}, "config_id": "c", "tiling": None}
    manifest = [
        {**base, "key": "a", "marker": True},
        {**base, "key": "skipped", "marker": False, "status": "failed", "error": "boom"},
        {**base, "key": "b", "marker": True},
    ]
    groups = validate_ncu.group_calls(kernels, manifest)
    assert [(e["key"], [k["name"] for k in ks]) for e, ks in groups] == [
        ("a", ["flash_fwd_kernel(Params)"]),
        ("b", ["softmax", "gemm"]),
    ]
    rec = validate_ncu.record(groups[1][0], groups[1][1])
    assert rec["type"] == "ncu" and rec["hbm_read"] == 300 and rec["hbm_write"] is None


def test_ncu_units() -> None:
    assert validate_ncu.to_base("1.5", "Gbyte") == 1.5e9
    assert validate_ncu.to_base("2", "KB") == 2e3
    assert validate_ncu.to_base("1,500", "ns") == pytest.approx(1.5e-6)
    with pytest.raises(ValueError):
        validate_ncu.to_base("1", "furlong")
    bad = validate_ncu.parse_csv(_ncu_csv([(0, "k", "dram__bytes_read.sum", "furlong", "1"),
                                           (0, "k", "lts__t_bytes.sum", "B", "n/a")]))  # fmt: skip
    assert bad[0]["metrics"] == {} and len(bad[0]["unparsed"]) == 2


# -- comparison and report --------------------------------------------------------------------------------


def _measured_file(tmp_path: Path) -> Path:
    path = tmp_path / validate.MEASURED_NAME
    store.append(path, {"type": "session", "gpu": "Test GPU", "driver": "1.0", "cuda_runtime": "13.0",
                        "torch": "2.x", "date": "2026-01-01", "command": "flashsim validate"})  # fmt: skip
    for i, (impl, algo) in enumerate((("v2", "v2"), ("sdpa-flash", "v2"), ("sdpa-cudnn", "v3"))):
        cfg = validate.Config(2, 4, 512, 64)
        base = {"impl": impl, "algo": algo, "config": cfg.problem_dict("bf16"), "config_id": cfg.id, "tiling": None}
        store.append(path, {**base, "type": "time", "key": validate.key("time", impl, cfg), "status": "ok",
                            "time_s": 1e-4 * (i + 1), "kernel_time_s": 5e-5, "rel_err": 0.003})  # fmt: skip
        store.append(path, {**base, "type": "ncu", "key": validate.key("ncu", impl, cfg), "status": "ok",
                            "hbm_read": 1e6, "hbm_write": 2e5, "l2_bytes": 4e6, "kernels": []})  # fmt: skip
    cfg = validate.Config(2, 4, 512, 128)
    store.append(path, {"type": "time", "key": validate.key("time", "v1", cfg), "impl": "v1", "algo": "v1",
                        "config": cfg.problem_dict("bf16"), "config_id": cfg.id, "status": "failed",
                        "error": "FlashsimError: no kernel"})  # fmt: skip
    return path


def _fake_simulate(job):
    # 10% over on time, 20% under on bytes, whatever the configuration.
    return {"predicted": {"time_s": 1.1e-4, "kernel_time_s": 1e-4, "hbm_read": 8e5, "hbm_write": 1.6e5,
                          "l2_bytes": 3.2e6},
            "sim": {"bound_by": "tensor"}}  # fmt: skip


def _change_the_simulator(monkeypatch: pytest.MonkeyPatch) -> None:
    """What an edit to the simulation's code does: both fingerprints change."""
    monkeypatch.setattr(validate_compare, "model_fingerprint", lambda: "changed")
    monkeypatch.setattr(validate_compare, "simulation_fingerprint", lambda: "changed too")


def test_compare_writes_report_with_metrics(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(validate_compare, "_simulate", _fake_simulate)
    measured = _measured_file(tmp_path)
    report = validate_compare.compare(tmp_path, measured, "h200", jobs=1, log=lambda _: None)
    s = report["summary"]
    assert s["v2"]["time_s"] == {"n": 1, "mape": pytest.approx(10.0), "max_err": pytest.approx(10.0),
                                 "bias": pytest.approx(10.0)}  # fmt: skip
    assert s["sdpa-flash"]["time_s"]["bias"] == pytest.approx(-45.0)  # 1.1e-4 against 2e-4
    assert s["v2"]["hbm_read"]["mape"] == pytest.approx(20.0)
    assert s["v2"]["kernel_time_s"]["bias"] == pytest.approx(100.0)  # 1e-4 predicted against 5e-5 busy
    assert report["overall"]["time_s"]["n"] == 3
    assert report["summary_by_algo"]["v2"]["time_s"]["n"] == 2
    assert any("no kernel" in f["status"] for f in report["failed"])
    saved = json.loads((tmp_path / "validation.json").read_text())
    assert saved["provenance"]["measured"]["gpu"] == "Test GPU"
    md = (tmp_path / "validation.md").read_text()
    assert "| MAPE % |" in md and "Test GPU" in md
    assert (tmp_path / "validation.png").stat().st_size > 1000


def test_compare_reuses_predictions_for_the_same_profile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(validate_compare, "_simulate", _fake_simulate)
    measured = _measured_file(tmp_path)
    validate_compare.compare(tmp_path, measured, "h200", jobs=1, log=lambda _: None)
    monkeypatch.setattr(validate_compare, "_simulate", lambda job: pytest.fail("simulated again"))
    validate_compare.compare(tmp_path, measured, "h200", jobs=1, log=lambda _: None)


def test_an_interrupted_compare_resumes_from_its_journal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    measured = _measured_file(tmp_path)
    calls = []

    def dies_on_the_second(job):
        calls.append(job)
        if len(calls) == 2:
            raise KeyboardInterrupt  # the run is killed mid-way
        return _fake_simulate(job)

    monkeypatch.setattr(validate_compare, "_simulate", dies_on_the_second)
    with pytest.raises(KeyboardInterrupt):
        validate_compare.compare(tmp_path, measured, "h200", jobs=1, log=lambda _: None)
    journal = tmp_path / ".validation-predictions.jsonl"
    assert len(journal.read_text().splitlines()) == 1 and not (tmp_path / "validation.json").exists()
    again = []
    monkeypatch.setattr(validate_compare, "_simulate", lambda job: again.append(job) or _fake_simulate(job))
    report = validate_compare.compare(tmp_path, measured, "h200", jobs=1, log=lambda _: None)
    fresh = []
    monkeypatch.setattr(validate_compare, "_simulate", lambda job: fresh.append(job) or _fake_simulate(job))
    validate_compare.compare(tmp_path / "fresh", measured, "h200", jobs=1, log=lambda _: None)
    assert calls[0] not in again and len(again) == len(fresh) - 1 >= 1
    assert report["overall"]["time_s"]["n"] == 3
    assert not journal.exists()  # the report replaces it


def test_a_set_split_into_shares_fills_one_journal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """--journal-only --share light / heavy split a set's simulations by the wall time each took for its last
    report: each share runs only its own into the journal and writes no report; the comparison after them
    simulates nothing and writes the report."""

    def timed(job):  # the last report: cuDNN's v3 simulations took 500 s, the others 1 s
        res = _fake_simulate(job)
        return {**res, "sim": {**res["sim"], "wall_s": 500.0 if job[0] == "v3" else 1.0}}

    monkeypatch.setattr(validate_compare, "_simulate", timed)
    _measured_file(tmp_path)
    assert cli.main(["validate", "--compare-only", "--out-dir", str(tmp_path), "--jobs", "1"]) == 0
    _change_the_simulator(monkeypatch)
    ran: dict = {"light": [], "heavy": []}
    for share in ran:
        monkeypatch.setattr(validate_compare, "_simulate", lambda job, s=share: ran[s].append(job) or timed(job))
        assert cli.main(["validate", "--compare-only", "--journal-only", "--share", share, "--heavy-above", "100",
                         "--out-dir", str(tmp_path), "--jobs", "1"]) == 0
        assert json.loads((tmp_path / "validation.json").read_text())["model_fingerprint"] != "changed"
    assert {j[0] for j in ran["heavy"]} == {"v3"} and {j[0] for j in ran["light"]} == {"v2"}
    assert len((tmp_path / ".validation-predictions.jsonl").read_text().splitlines()) == len(ran["light"]) + len(
        ran["heavy"])
    monkeypatch.setattr(validate_compare, "_simulate", lambda job: pytest.fail("simulated again"))
    assert cli.main(["validate", "--compare-only", "--out-dir", str(tmp_path), "--jobs", "1"]) == 0
    report = json.loads((tmp_path / "validation.json").read_text())
    assert report["model_fingerprint"] == "changed" and report["overall"]["time_s"]["n"] == 3
    assert not (tmp_path / ".validation-predictions.jsonl").exists()


def test_journaling_every_set_pools_their_simulations_longest_first(tmp_path: Path, monkeypatch) -> None:
    """--journal-only without --grid runs every set's pending simulations in one pool, the longest (by its set's
    last report) first; a simulation two sets share runs once and goes into both journals, and the comparison
    after it simulates nothing."""
    import shutil

    def timed(job):
        res = _fake_simulate(job)
        return {**res, "sim": {**res["sim"], "wall_s": 500.0 if job[0] == "v3" else 1.0}}

    monkeypatch.setattr(validate_compare, "_simulate", timed)
    shutil.copy(_measured_file(tmp_path), tmp_path / "testset-measured.jsonl")  # the same rows as a second set
    assert cli.main(["validate", "--compare-only", "--out-dir", str(tmp_path), "--jobs", "1"]) == 0
    _change_the_simulator(monkeypatch)
    ran = []
    monkeypatch.setattr(validate_compare, "_simulate", lambda job: ran.append(job) or timed(job))
    assert cli.main(["validate", "--compare-only", "--journal-only", "--out-dir", str(tmp_path), "--jobs", "1"]) == 0
    keys = [json.dumps(j, sort_keys=True) for j in ran]
    assert ran[0][0] == "v3" and len(set(keys)) == len(keys) >= 2  # the longest first, each once
    for journal in (".validation-predictions.jsonl", ".testset-predictions.jsonl"):
        assert len((tmp_path / journal).read_text().splitlines()) == len(ran)
    monkeypatch.setattr(validate_compare, "_simulate", lambda job: pytest.fail("simulated again"))
    assert cli.main(["validate", "--compare-only", "--out-dir", str(tmp_path), "--jobs", "1"]) == 0
    for report in ("validation.json", "testset.json"):
        assert json.loads((tmp_path / report).read_text())["model_fingerprint"] == "changed"


@pytest.mark.parametrize("args", [["--journal-only"], ["--compare-only", "--share", "light"],
                                  ["--compare-only", "--journal-only", "--heavy-above", "0"]])
def test_journal_options_need_their_mode(tmp_path: Path, args: list, capsys) -> None:
    assert cli.main(["validate", *args, "--out-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and ("--journal-only" in err or "--heavy-above" in err)


def test_the_model_fingerprint_follows_the_model_and_its_inputs_not_the_reports(tmp_path: Path) -> None:
    """A change to the simulator or to how a measurement becomes its inputs stales every prediction; a change
    to how reports are written does not."""
    import shutil

    root = tmp_path / "tree"
    for pkg in validate_compare.MODEL_SOURCES:
        (root / pkg).mkdir(parents=True)
        (root / pkg / "a.py").write_text("x = 1\n")
    (root / "experiments").mkdir()
    for name in (*validate_compare.INPUT_SOURCES, "validate_compare.py"):
        (root / "experiments" / name).write_text("y = 1\n")
    base = validate_compare.model_fingerprint(root)
    (root / "experiments" / "validate_compare.py").write_text("y = 2\n")
    assert validate_compare.model_fingerprint(root) == base
    (root / "simulator" / "report.py").write_text("w = 1\n")  # a presentation module
    assert validate_compare.model_fingerprint(root) == base
    for changed in (root / "simulator" / "a.py", root / "experiments" / "prediction_inputs.py"):
        copy = tmp_path / "copy"
        shutil.copytree(root, copy)
        (copy / changed.relative_to(root)).write_text("z = 3\n")
        assert validate_compare.model_fingerprint(copy) != base
        shutil.rmtree(copy)


def test_compare_predicts_again_after_a_model_change(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Cached predictions carry a hash of the model's sources: a changed schedule or simulator is not
    scored with the old model's numbers."""
    monkeypatch.setattr(validate_compare, "_simulate", _fake_simulate)
    measured = _measured_file(tmp_path)
    validate_compare.compare(tmp_path, measured, "h200", jobs=1, log=lambda _: None)
    calls = []
    _change_the_simulator(monkeypatch)
    monkeypatch.setattr(validate_compare, "_simulate", lambda job: calls.append(job) or _fake_simulate(job))
    validate_compare.compare(tmp_path, measured, "h200", jobs=1, log=lambda _: None)
    # one each (SDPA flash runs the same tiles as our v2 but its own exponential), and each configuration with
    # ncu's bytes runs once more from an empty L2 for them
    assert len(calls) == 6 and sorted(job[6] for job in calls) == [False] * 3 + [True] * 3
    assert sorted((job[2] or {}).get("exp2", "") for job in calls) == [""] * 4 + ["exp2f"] * 2


def test_compare_simulates_the_flushed_l2_it_measured_after_and_records_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """validate flushes L2 before each timed call, so times are predicted from the flushed L2 unless asked for an
    empty one; ncu's bytes, counted after ncu's own cache flush, from an empty L2. The report says which start
    the times had, and a report made with the other start is not reused."""
    calls = []

    def by_start(job):
        calls.append(job)
        flushed = job[6]
        return {"predicted": {"time_s": 2e-4, "kernel_time_s": 1e-4 if flushed else 3e-4,
                              "hbm_read": 9e5 if flushed else 8e5, "hbm_write": 1e5, "l2_bytes": 3e6},
                "sim": {"bound_by": "hbm"}}  # fmt: skip

    monkeypatch.setattr(validate_compare, "_simulate", by_start)
    measured = _measured_file(tmp_path)
    report = validate_compare.compare(tmp_path, measured, "h200", jobs=1, log=lambda _: None)
    assert report["l2_start"] == "flushed" and {job[6] for job in calls} == {True, False}
    rows = [r for r in report["rows"] if r.get("predicted")]
    # the simulation's own time (cuDNN's call adds its memset to it: simulator/calls.py)
    assert rows and all(r["sim"].get("simulated", r["predicted"])["kernel_time_s"] == 1e-4
                        and r["predicted"]["hbm_read"] == 8e5 for r in rows)
    assert "partly dirty L2" in (tmp_path / "validation.md").read_text()
    n = len(calls)
    report = validate_compare.compare(tmp_path, measured, "h200", jobs=1, log=lambda _: None, flushed_l2=False)
    assert len(calls) > n and all(job[6] is False for job in calls[n:]) and report["l2_start"] == "empty"
    assert all(r["sim"].get("simulated", r["predicted"])["kernel_time_s"] == 3e-4
               for r in report["rows"] if r.get("predicted"))


def test_a_job_simulates_the_flushed_l2_it_names() -> None:
    """The flushed start reaches simulate: a decode reading more than the L2 writes the flush's dirty lines back
    beside its reads and takes longer."""
    problem = {"batch": 64, "heads": 32, "kv_heads": 4, "seqlen_q": 1, "seqlen_k": 1024, "headdim": 128}
    tiling = {"block_m": 64, "block_n": 64, "warps": 4, "stages": 3, "splits": 1}
    empty, flushed = (validate_compare._simulate(("decode", problem, tiling, "h200", [], {}, f)) for f in (False, True))
    assert flushed["predicted"]["kernel_time_s"] > 1.05 * empty["predicted"]["kernel_time_s"]
    written_back = flushed["predicted"]["hbm_write"] - empty["predicted"]["hbm_write"]
    assert written_back == pytest.approx(load_profile("h200").l2_dirty_max_bytes, rel=0.02)


def test_compare_simulates_sdpa_flash_with_its_own_exponential(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """SDPA flash names no tiles (FA2's launch rule settles them on the GPU) but its code's exponential; our v2
    names its kernel's tiles, here the same ones, and our exponential: two runs."""
    calls = []
    monkeypatch.setattr(validate_compare, "_simulate", lambda job: calls.append(job) or _fake_simulate(job))
    report = validate_compare.compare(tmp_path, _measured_file(tmp_path), "h200", jobs=1, log=lambda _: None)
    v2 = sorted((job[2] for job in calls if job[0] == "v2" and job[6]), key=len)
    flash = {"exp2": "exp2f", "launch": "fa2"}
    assert v2 == [flash, {"block_m": 128, "block_n": 128, "warps": 4, "stages": 2, "splits": 1}]
    rows = {r["impl"]: r for r in report["rows"] if r["algo"] == "v2"}
    assert rows["sdpa-flash"]["tiling"] == flash and "exp2" not in rows["v2"]["tiling"]


def test_compare_predicts_again_a_kernel_measured_with_other_tiles(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(validate_compare, "_simulate", _fake_simulate)
    measured = _measured_file(tmp_path)
    validate_compare.compare(tmp_path, measured, "h200", jobs=1, log=lambda _: None)
    cfg = validate.Config(2, 4, 512, 64)
    store.append(measured, {"impl": "v2", "algo": "v2", "config": cfg.problem_dict("bf16"), "config_id": cfg.id,
                            "tiling": {"block_m": 64, "block_n": 64, "warps": 4, "stages": 2}, "type": "time",
                            "key": validate.key("time", "v2", cfg), "status": "ok", "time_s": 1e-4,
                            "kernel_time_s": 5e-5, "rel_err": 0.003})  # fmt: skip
    calls = []
    monkeypatch.setattr(validate_compare, "_simulate", lambda job: calls.append(job) or _fake_simulate(job))
    validate_compare.compare(tmp_path, measured, "h200", jobs=1, log=lambda _: None)
    timed = [job for job in calls if job[6]]  # the timed rows' runs (the others are ncu's bytes, from an empty L2)
    assert [job[0] for job in timed] == ["v2"] and timed[0][2]["block_m"] == 64


def test_the_model_fingerprint_ignores_what_the_code_says_of_itself(tmp_path: Path) -> None:
    """Comments, docstrings and blank lines stale no prediction; code does, a '#' inside a string included."""
    for pkg in validate_compare.MODEL_SOURCES:
        (tmp_path / pkg).mkdir()
    module = tmp_path / "simulator" / "a.py"
    source = 'def f(a):\n    """Costs \u00b5s."""\n    return a + 1  # one more\n\nS = "#x"\n'
    module.write_text(source, encoding="utf-8")
    before = validate_compare.model_fingerprint(tmp_path)
    for said in (source.replace("one more", "the next"), source.replace("Costs \u00b5s.", "Costs.\n\n    More."),
                 "# a new header\n\n" + source.replace("  # one more", "")):
        module.write_text(said, encoding="utf-8")
        assert validate_compare.model_fingerprint(tmp_path) == before, said
    for changed in (source.replace("a + 1", "a + 2"), source.replace('"#x"', '"#y"'),
                    source.replace("    return", "    b = 0\n    return")):
        module.write_text(changed, encoding="utf-8")
        assert validate_compare.model_fingerprint(tmp_path) != before, changed
    module.write_text("def broken(:\n")  # what does not parse is hashed whole
    broken = validate_compare.model_fingerprint(tmp_path)
    module.write_text("def broken(:  # a comment\n")
    assert validate_compare.model_fingerprint(tmp_path) != broken


def test_model_fingerprint_follows_the_sources(tmp_path: Path) -> None:
    for pkg in validate_compare.MODEL_SOURCES:
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "a.py").write_text("x = 1\n")
    before = validate_compare.model_fingerprint(tmp_path)
    assert validate_compare.model_fingerprint(tmp_path) == before
    (tmp_path / "simulator" / "a.py").write_text("x = 2\n")
    assert validate_compare.model_fingerprint(tmp_path) != before
    (tmp_path / "simulator" / "a.py").write_text("x = 1\n")
    (tmp_path / "README.md").write_text("not the model")
    assert validate_compare.model_fingerprint(tmp_path) == before


def test_compare_with_the_real_simulator_on_a_tiny_problem(tmp_path: Path) -> None:
    pytest.importorskip("simpy")
    cfg = validate.Config(1, 2, 256, 64)
    res = validate_compare._simulate(("v2", cfg.problem_dict("bf16"), None, "h200", []))
    assert "predict_error" not in res, res
    assert res["predicted"]["time_s"] > 0 and res["predicted"]["hbm_read"] > 0
    assert 0 < res["predicted"]["kernel_time_s"] < res["predicted"]["time_s"]
    assert math.isfinite(res["predicted"]["l2_bytes"])


def test_validate_compare_only_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setattr(validate_compare, "_simulate", _fake_simulate)
    _measured_file(tmp_path)
    rc = cli.main(["validate", "--compare-only", "--out-dir", str(tmp_path), "--jobs", "1"])
    out = capsys.readouterr().out
    assert rc == 0 and "sdpa-cudnn" in out and "MAPE" in out


def test_compare_only_with_a_grid_compares_that_set_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys) -> None:
    import shutil

    from flashsim.experiments.validate_sets import DEV_LLM

    monkeypatch.setattr(validate_compare, "_simulate", _fake_simulate)
    shutil.copy(_measured_file(tmp_path), tmp_path / DEV_LLM.measured)
    assert cli.main(["validate", "--compare-only", "--grid", "dev-llm", "--out-dir", str(tmp_path), "--jobs", "1"]) == 0
    assert (tmp_path / "devset-llm.json").is_file() and not (tmp_path / "validation.json").exists()
    # a set with no measurements is one clear line
    capsys.readouterr()
    assert cli.main(["validate", "--compare-only", "--grid", "test", "--out-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "testset-measured.jsonl" in err


def test_validate_rejects_bad_input(capsys) -> None:
    assert cli.main(["validate", "--impls", "v9"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown implementation 'v9'" in err


# -- the tiling the comparison simulates is the one the kernel ran ------------------------------------------

H200_LIMITS = type("Limits", (), {"smem_per_block_max_bytes": 232448, "smem_per_sm_bytes": 233472})()
# our forward kernels (the decode kernel is timed on the decode set, and registers its family when it exists)
OURS = [name for name in validate.DEV_IMPLS if validate.IMPLS[name].kind == "ours"]


def test_every_kernel_family_is_registered():
    from flashsim.kernels import registry

    assert set(OURS) <= set(registry.families())


@pytest.mark.parametrize("name", OURS)
def test_validator_simulates_the_kernels_tile_table_entry(name):
    """For each head dim built and both masks, what validate records (and so simulates) is the tiling the
    kernel launches: the tile table's default row for v3 / v3-fp8, the family's default tiling otherwise."""
    from flashsim.experiments.validate_impls import kernel_tiling
    from flashsim.kernels import hopper, hopper_tiles, registry

    family = registry.family(name)
    for d in family.headdims:
        for causal in (False, True):
            simulated = kernel_tiling(name, d, causal, H200_LIMITS)
            if name in ("v3", "v3-fp8"):
                row = hopper_tiles.default_tile(name, d, causal)
                assert simulated == row.tiling.as_dict(), (d, causal)
                tag = "E4m3" if name == "v3-fp8" else "Bf16"
                launch = hopper.plan(name, tag, d, causal, 1, 1, 1024)
                # the default row's kernel, or its two-Q-buffer build (same tile: algorithms/tile_order.prefetch)
                assert (launch.block_m, launch.block_n) == (row.block_m, row.block_n)
                assert launch.name in (row.kernel, row.kernel + "_q2"), (d, causal)
            else:
                tiling = family.default_tiling(d, H200_LIMITS)
                assert simulated == tiling.as_dict(), (d, causal)
                assert family.variant(d, "bf16", tiling)  # and that kernel is built


def test_v3_d64_simulates_the_substituted_tile():
    """FA3's d64 non-causal tile (192x192) spills here; the kernel runs 192x128, and so must the simulation."""
    from flashsim.experiments.validate_impls import kernel_tiling

    t = kernel_tiling("v3", 64, False)
    assert (t["block_m"], t["block_n"]) == (192, 128)


def test_our_tiling_fails_loudly():
    """A kernel the registry does not know is an error, not a silent fall-back to the simulator's tiles."""
    impl = validate.Impl("v9", "v2", "bf16", "ours")
    with pytest.raises(FlashsimError):
        validate.our_tiling(impl, validate.Config(1, 1, 128, 64), None, None, None)
    sdpa = validate.IMPLS["sdpa-flash"]
    assert validate.our_tiling(sdpa, validate.Config(1, 1, 128, 64), None, None, None) is None


def test_validate_ncu_does_not_import_validate():
    """validate runs validate_ncu; what both need lives in validate_impls, so there is no import circle."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(validate_ncu))
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
    assert "validate_impls" in imported
    assert not imported & {"validate", "flashsim.experiments.validate"}


def test_predicting_imports_none_of_the_presentation_modules_the_fingerprint_leaves_out() -> None:
    """The model fingerprint leaves out the packages' presentation modules (validate_compare.PRESENTATION), so
    none of them may take part in a prediction: a fresh interpreter predicts every schedule (our kernels,
    SDPA's FA2 and cuDNN launches, a paged decode step, the backward passes) and has imported none of them."""
    import subprocess
    import sys

    script = """
import json, sys
from flashsim.experiments.prediction_inputs import simulate_job
p = {"batch": 1, "heads": 2, "seqlen_q": 256, "seqlen_k": 256, "headdim": 64, "causal": True, "dtype": "bf16"}
jobs = [(a, p, None, "h200", []) for a in ("standard", "v1", "v2", "v3", "standard-bwd", "v2-bwd", "v3-bwd")]
jobs += [("v3-fp8", {**p, "dtype": "fp8"}, None, "h200", []), ("v2", p, {"launch": "fa2"}, "h200", []),
         ("v3", p, {"block_m": 128, "block_n": 128, "warps": 12, "stages": 2}, "h200", [], {}, True),
         ("decode", {**p, "causal": False, "seqlen_q": 1, "seqlen_k": 1024, "page_size": 256}, None, "h200", [])]
errors = [r["predict_error"] for r in map(simulate_job, jobs) if "predict_error" in r]
print(json.dumps({"errors": errors, "modules": sorted(m for m in sys.modules if m.startswith("flashsim."))}))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    result = json.loads(out.splitlines()[-1])
    assert not result["errors"]
    loaded = {m.removeprefix("flashsim.").replace(".", "/") + ".py" for m in result["modules"]}
    assert {"simulator/timing.py", "algorithms/schedules/decode.py", "simulator/sdpa.py"} <= loaded
    assert not loaded & validate_compare.PRESENTATION, loaded & validate_compare.PRESENTATION


def test_a_change_to_the_call_work_alone_reassembles_the_reports_without_simulating(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a library's call launches beside its kernels (simulator/calls.py: cuDNN's memset) is added when a
    report is made: a change to it, or to the profile numbers only it reads, makes the report again from the
    simulations it holds, once per call and never twice."""
    monkeypatch.setattr(validate_compare, "_simulate", _fake_simulate)
    measured = _measured_file(tmp_path)
    validate_compare.compare(tmp_path, measured, "h200", jobs=1, log=lambda _: None)
    monkeypatch.setattr(validate_compare, "_simulate", lambda job: pytest.fail("simulated again"))
    monkeypatch.setattr(validate_compare, "model_fingerprint", lambda: "changed")
    for memset in (2e-6, 3e-6, 3e-6):
        report = validate_compare.compare(tmp_path, measured, "h200", [f"memset_busy_s={memset}"], jobs=1,
                                          log=lambda _: None)
        rows = {r["impl"]: r for r in report["rows"] if "predicted" in r}
        assert rows["sdpa-cudnn"]["predicted"]["kernel_time_s"] == pytest.approx(1e-4 + memset, rel=1e-12)
        assert rows["sdpa-cudnn"]["predicted"]["time_s"] == pytest.approx(1.1e-4 + memset, rel=1e-12)
        assert rows["sdpa-cudnn"]["call"] == {"memset_s": memset}
        assert rows["sdpa-cudnn"]["sim"]["simulated"] == {"time_s": 1.1e-4, "kernel_time_s": 1e-4}
        for impl in ("v2", "sdpa-flash"):  # their calls launch their kernel alone
            assert rows[impl]["predicted"]["kernel_time_s"] == 1e-4 and "call" not in rows[impl]
        assert report["model_fingerprint"] == "changed"
        assert report["simulation_fingerprint"] == validate_compare.simulation_fingerprint()


def test_the_simulation_fingerprint_leaves_out_only_the_call_work(tmp_path: Path) -> None:
    """The call work's module and the declaration of a profile number only it reads change the model's
    fingerprint and not the simulation's; any other code changes both."""
    for pkg in validate_compare.MODEL_SOURCES:
        (tmp_path / pkg).mkdir()
    (tmp_path / "simulator" / "a.py").write_text("x = 1\n")
    (tmp_path / "simulator" / "calls.py").write_text("MEMSETS = 1\n")
    profile = tmp_path / validate_compare.PROFILE_SOURCE
    profile.write_text("class P:\n    clock_hz: float = 1.0\n")
    model, simulation = validate_compare.model_fingerprint(tmp_path), validate_compare.simulation_fingerprint(tmp_path)
    (tmp_path / "simulator" / "calls.py").write_text("MEMSETS = 2\n")
    profile.write_text("class P:\n    clock_hz: float = 1.0\n    memset_busy_s: float = 1.0\n")
    assert validate_compare.simulation_fingerprint(tmp_path) == simulation
    assert validate_compare.model_fingerprint(tmp_path) != model
    profile.write_text("class P:\n    clock_hz: float = 2.0\n    memset_busy_s: float = 1.0\n")
    assert validate_compare.simulation_fingerprint(tmp_path) != simulation


def test_the_profile_fingerprint_of_a_simulation_leaves_out_the_call_numbers() -> None:
    from flashsim.hw_profiles import load_profile

    base = load_profile("h200")
    memset = base.with_overrides(["memset_busy_s=5e-6"])
    clock = base.with_overrides(["sm_clock_hz=1.5e9"])
    fp = validate_compare.profile_fingerprint
    assert fp(memset, simulation=True) == fp(base, simulation=True) and fp(memset) != fp(base)
    assert fp(clock, simulation=True) != fp(base, simulation=True)


def test_a_calls_pieces_are_timed_each_on_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """validate records every piece of a call's GPU work (a library's memset beside its kernel): the median of
    each piece over the calls that launched the same pieces; the busy time stays their sum per call."""
    from types import SimpleNamespace

    def ev(name, us):
        return SimpleNamespace(name=name, time_range=SimpleNamespace(elapsed_us=lambda us=us: us))

    calls = [[ev("Memset (Device)", 0.7), ev("fprop", 10.0)], [ev("Memset (Device)", 0.8), ev("fprop", 12.0)],
             [ev("Memset (Device)", 0.9), ev("fprop", 11.0)], [ev("other", 50.0)]]
    monkeypatch.setattr(validate, "gpu_calls", lambda fn, flush, n: calls)
    busy, names, parts = validate.gpu_parts(lambda: None, lambda: None)
    assert busy == pytest.approx([10.7e-6, 12.8e-6, 11.9e-6, 50e-6])
    assert names == ["Memset (Device)", "fprop"] and parts == pytest.approx([0.8e-6, 11e-6])
    assert validate.gpu_work(lambda: None, lambda: None) == (busy, names)
