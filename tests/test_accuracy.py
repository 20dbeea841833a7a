"""`flashsim accuracy` renders a committed validation report (GPU-free)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from flashsim import cli

FIXTURE = {
    "provenance": {
        "measured": {
            "gpu": "NVIDIA H200",
            "driver": "580.0",
            "cuda_runtime": "13.0",
            "torch": "2.11.0",
            "date": "2026-01-02",
            "command": "flashsim validate",
        },  # fmt: skip
        "compared": {"date": "2026-01-03", "command": "flashsim validate --compare-only"},
    },
    "profile": {"name": "h200-sxm-141gb", "hw": "h200", "fingerprint": "x"},
    "quantities": {"time_s": {"label": "time", "unit": "ms"}, "hbm_read": {"label": "HBM read", "unit": "MB"}},
    "impl_algo": {"sdpa-flash": "v2", "v3": "v3"},
    "summary": {
        "sdpa-flash": {
            "time_s": {"n": 24, "mape": 12.34, "max_err": 31.5, "bias": -4.25},
            "hbm_read": {"n": 4, "mape": 3.5, "max_err": 6.0, "bias": 1.0},
        },  # fmt: skip
        "v3": {
            "time_s": {"n": 20, "mape": 22.0, "max_err": 48.9, "bias": 9.0},
            "hbm_read": {"n": 0, "mape": None, "max_err": None, "bias": None},
        },  # fmt: skip
    },
    "overall": {"time_s": {"n": 44, "mape": 16.7, "max_err": 48.9, "bias": 1.8}},
    "rows": [],
    "failed": [{"impl": "v1", "config_id": "b1-h16-n16384-d128", "status": "failed: out of memory"}],
    "plot": "validation.png",
}


@pytest.fixture
def report_file(tmp_path: Path) -> Path:
    path = tmp_path / "validation.json"
    path.write_text(json.dumps(FIXTURE))
    return path


def test_accuracy_table(report_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["accuracy", "--file", str(report_file)]) == 0
    out = capsys.readouterr().out
    for text in ("NVIDIA H200", "sdpa-flash", "12.3", "31.5", "-4.2", "48.9", "HBM read", "validation.png", "1 "):
        assert text in out
    assert "v3 " in out


def test_accuracy_json(report_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["accuracy", "--file", str(report_file), "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert obj["summary"]["v3"]["time_s"]["max_err"] == 48.9
    assert obj["plot"].endswith("validation.png") and obj["failed"] == 1
    assert obj["provenance"]["measured"]["date"] == "2026-01-02"


def test_accuracy_missing_or_foreign_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["accuracy", "--file", str(tmp_path / "none.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no validation results" in err
    other = tmp_path / "other.json"
    other.write_text("{}")
    assert cli.main(["accuracy", "--file", str(other)]) == 2
    assert "not a validation report" in capsys.readouterr().err


def test_committed_results_render_if_present(capsys: pytest.CaptureFixture[str]) -> None:
    path = Path(__file__).resolve().parents[1] / "experiments" / "results" / "h200" / "validation.json"
    if not path.is_file():
        pytest.skip("no committed validation results yet")
    assert cli.main(["accuracy", "--file", str(path), "--json"]) == 0
    assert "summary" in json.loads(capsys.readouterr().out)


MEASURED = Path(__file__).resolve().parents[1] / "experiments" / "results" / "h200" / "validation-measured.jsonl"
# Just above each implementation's worst error on these configurations today: v3 sits at +22% on short
# non-causal d128 (identical SMs run in lock-step on the shared ports; docs/MODEL.md, Not modelled).
TRIPWIRE = {"v2": 0.20, "v3": 0.25}


@pytest.mark.parametrize("impl", ["v2", "v3"])
@pytest.mark.parametrize("config_id", ["b8-h32-n2048-d64", "b2-h32-n8192-d64", "b8-h16-n2048-d128",
                                       "b2-h16-n8192-d128"])
def test_predictions_stay_near_committed_h200_measurements(impl, config_id):
    """A model change that moves our flash kernels' predictions further off their committed H200 GPU busy
    times (profiler-measured, experiments/results/h200) than TRIPWIRE fails here, not first in a validation
    run."""
    from flashsim.algorithms.problem import Problem
    from flashsim.algorithms.tiling import Tiling
    from flashsim.experiments import validate_store as store
    from flashsim.hw_profiles import load_profile
    from flashsim.simulator import simulate

    if not MEASURED.is_file():
        pytest.skip("no committed measurements")
    rec = store.latest(store.load(MEASURED), "time").get(f"time|{impl}|{config_id}")
    assert rec is not None and rec["status"] == "ok", f"no measurement of {impl} {config_id}"
    keys = ("batch", "heads", "kv_heads", "seqlen_q", "seqlen_k", "headdim", "causal", "dtype")
    problem = Problem(**{k: rec["config"][k] for k in keys if k in rec["config"]})
    tiling = Tiling(**rec["tiling"]) if rec.get("tiling") else None
    predicted = simulate(impl, problem, load_profile("h200"), tiling).kernel_time_s
    assert predicted == pytest.approx(rec["kernel_time_s"], rel=TRIPWIRE[impl])
