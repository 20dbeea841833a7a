"""The call-events tool's GPU-free parts: splitting a profile into calls, and the shapes a report names."""

from __future__ import annotations

import json
from pathlib import Path

from flashsim.experiments.call_events import per_call, report_ids
from flashsim.experiments.validate import FLUSH_KERNEL


def _ev(name: str, us: float, cat: str = "kernel", nbytes=None) -> dict:
    return {"name": name, "cat": cat, "ts": 0, "us": us, "bytes": nbytes}


def test_each_flush_starts_a_call_and_work_before_the_first_is_dropped() -> None:
    events = [_ev("warm-up", 5.0), _ev(f"{FLUSH_KERNEL}(...)", 60.0),
              _ev("Memset (Device)", 0.74, "gpu_memset", 4), _ev("fprop", 10.0),
              _ev(FLUSH_KERNEL, 60.0), _ev("Memset (Device)", 0.71, "gpu_memset", 4), _ev("fprop", 11.0),
              _ev(FLUSH_KERNEL, 60.0)]  # a flush with no call after it
    calls = per_call(events)
    assert [[e["name"] for e in c] for c in calls] == [["Memset (Device)", "fprop"]] * 2
    assert calls[1][0] == {"name": "Memset (Device)", "cat": "gpu_memset", "us": 0.71, "bytes": 4}


def test_a_report_names_the_shapes_it_measured_for_the_implementations(tmp_path: Path) -> None:
    rows = [{"impl": "sdpa-cudnn", "config_id": "b1-h8-n128-d64", "measured": {"kernel_time_s": 1e-5}},
            {"impl": "sdpa-cudnn", "config_id": "b2-h8-n128-d64", "measured": {}},  # not timed
            {"impl": "v2", "config_id": "b4-h8-n128-d64", "measured": {"kernel_time_s": 1e-5}},
            {"impl": "sdpa-cudnn", "config_id": "b1-h8-n128-d64", "measured": {"kernel_time_s": 2e-5}}]
    path = tmp_path / "report.json"
    path.write_text(json.dumps({"rows": rows}))
    assert report_ids([str(path)], ["sdpa-cudnn"]) == ["b1-h8-n128-d64"]
    assert report_ids([str(path)], ["sdpa-cudnn", "v2"]) == ["b1-h8-n128-d64", "b4-h8-n128-d64"]
