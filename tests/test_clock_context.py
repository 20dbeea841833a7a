"""The clock each timing ran at: the probe validate records, and what the comparison at that clock reports."""

import json
from pathlib import Path

import pytest
from flashsim.experiments import clock_context
from flashsim.experiments.prediction_inputs import simulate_job

RESULTS = Path(__file__).resolve().parent.parent / "experiments" / "results" / "h200" / "session31"


def _row(impl: str, cid: str, clock: float, m: float, p: float, pc: float) -> dict:
    return {"impl": impl, "config_id": cid, "clock_ghz": clock, "measured_s": m, "predicted_s": p,
            "predicted_at_clock_s": pc, "err_pct": (p - m) / m * 100, "err_at_clock_pct": (pc - m) / m * 100}


def test_summary_and_table():
    rows = [_row("v2", "a", 1.5, 10e-6, 8e-6, 9.5e-6), _row("v2", "b", 1.9, 20e-6, 21e-6, 20e-6),
            _row("v3", "a", 1.9, 10e-6, 12e-6, 10.5e-6)]
    s = clock_context.summary(rows)
    assert s["v2"]["rows"] == 2
    assert s["v2"]["mape_pct"] == pytest.approx(12.5)
    assert s["v2"]["max_pct"] == pytest.approx(20.0)
    assert s["v2"]["mape_at_clock_pct"] == pytest.approx(2.5)
    assert s["v2"]["clock_ghz_median"] == pytest.approx(1.7)
    md = clock_context.markdown({"measured": "m.jsonl", "note": "n", "summary": s, "rows": rows})
    assert "| v2 | a | 1.500 | 10.0 | -20.0% | -5.0% |" in md
    assert "| v2 | b |" not in md  # within 15% both ways


def test_clocks_read_from_the_latest_timing():
    recs = [{"type": "time", "key": "time|v2|a", "impl": "v2", "config_id": "a", "status": "ok", "kernel_time_s": 1e-5,
             "sm_clock_ghz": [1.6, 1.8]},
            {"type": "time", "key": "time|v3|a", "impl": "v3", "config_id": "a", "status": "ok", "kernel_time_s": 1e-5}]
    assert clock_context.clocks_of(recs) == {("v2", "a"): pytest.approx(1.7)}


def test_a_slower_clock_predicts_a_longer_kernel():
    """The profile's clock keys set to a measured clock move the prediction the way the clock does: a kernel
    of mostly SM work slows by nearly the clock's ratio, not more."""
    job = ("v2", {"batch": 2, "heads": 8, "seqlen_q": 512, "headdim": 64, "causal": True}, None, "h200", [])
    base = simulate_job(job)["predicted"]["kernel_time_s"]
    slow = simulate_job((*job[:4], [f"{k}=1.4e9" for k in clock_context.CLOCK_KEYS]))["predicted"]["kernel_time_s"]
    assert base < slow < base * 1.814 / 1.4 * 1.01


def test_committed_sweep_records_its_clocks():
    """The clocked re-measurement of the test set: every timing that ran carries two probes, all within the
    H200's range (0.345 GHz idle to 1.98 boost), and they spread widely: the reason for the comparison."""
    clocks = [c for line in (RESULTS / "clocked" / "testset-measured.jsonl").read_text().splitlines()
              for c in json.loads(line).get("sm_clock_ghz", [])]
    assert len(clocks) > 400
    assert all(0.3 < c < 2.0 for c in clocks)
    assert max(clocks) - min(clocks) > 0.3


def _gpu_available() -> bool:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


@pytest.mark.gpu
def test_clock_probe_on_the_gpu():
    if not _gpu_available():
        pytest.skip("no CUDA GPU")
    import cupy as cp
    from flashsim.experiments.calibrate_gpu import read_gpu
    from flashsim.experiments.validate import make_clock_probe

    clock = make_clock_probe(cp, read_gpu(cp))
    assert 0.2 < clock() < 3.5
