"""docs/ADVISOR.md's selection table is what `flashsim advise` answers, row by row; advise's reasons."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from flashsim.cli import main
from flashsim.hw_profiles import load_profile
from flashsim.simulator.advise import DECODE_NOTE, TRAIN_NOTE, advise
from flashsim.simulator.sdpa import sdpa_backend

DOC = Path(__file__).resolve().parents[1] / "docs" / "ADVISOR.md"


def table_rows() -> list[dict]:
    lines = [line for line in DOC.read_text().splitlines() if line.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = [dict(zip(header, (c.strip() for c in line.strip("|").split("|")), strict=True)) for line in lines[2:]]
    assert len(rows) >= 6
    return rows


@pytest.mark.slow
@pytest.mark.parametrize("row", table_rows(), ids=lambda r: "-".join(r.values()))
def test_advisor_table_matches_advise(row):
    report = advise(load_profile(row["GPU"]), int(row["seqlen"]), int(row["headdim"]), row["dtype"],
                    row["causal"] == "yes", row["workload"] == "decode", batch=2, heads=16)
    assert report["best"] == row["use"]
    assert (report["sdpa"]["backend"] or "none") == row["PyTorch SDPA picks"]


def test_a100_says_why_v3_cannot_run_and_marks_training_forward_only(capsys):
    assert main(["advise", "--hw", "a100", "--seqlen", "512", "--headdim", "64", "--batch", "1", "--heads", "4",
                 "--train", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    by = {r["algo"]: r for r in report["ranking"]}
    assert by["v3"]["status"] == "unavailable" and "tma" in by["v3"]["reason"]
    assert by["v3-fp8"]["status"] == "unavailable" and "fp8" in by["v3-fp8"]["reason"]
    assert report["notes"] == [TRAIN_NOTE]
    times = [r["time_s"] for r in report["ranking"] if r["status"] == "ok"]
    assert times == sorted(times) and report["best"] == report["ranking"][0]["algo"]
    # SDPA picks FA2 on an A100: its time as `simulate --sdpa flash` predicts it, beside the best algorithm's
    sdpa = report["sdpa"]
    assert sdpa["backend"] == "flash" and sdpa["time_s"] > 0
    assert sdpa["vs_best"] == pytest.approx(sdpa["time_s"] / times[0])


def test_fp32_and_fp8_inputs_leave_only_what_takes_them():
    h100 = load_profile("h100")
    fp32 = advise(h100, 512, 64, "fp32", batch=1, heads=4)
    assert fp32["best"] == "standard"
    others = [r for r in fp32["ranking"] if r["algo"] != "standard"]
    assert all(r["status"] == "unavailable" and "16-bit" in r["reason"] for r in others)
    fp8 = advise(h100, 512, 64, "fp8", batch=1, heads=4)
    assert fp8["best"] == "v3-fp8" and fp8["sdpa"]["backend"] is None and "time_s" not in fp8["sdpa"]


def test_decode_is_memory_bound_and_says_no_decode_schedule():
    report = advise(load_profile("h100"), 4096, 128, decode=True, batch=4, heads=16)
    assert report["notes"] == [DECODE_NOTE]
    assert all("memory-bound" in r["reason"] for r in report["ranking"] if r["bound_by"] == "hbm")
    assert any(r["bound_by"] == "hbm" for r in report["ranking"])


def test_sdpa_rules():
    assert sdpa_backend("8.0", "bf16", 128)["backend"] == "flash"
    assert sdpa_backend("9.0", "bf16", 128)["backend"] == "cudnn"
    assert sdpa_backend("9.0", "bf16", 256)["backend"] == "flash"  # past cuDNN's head-dim limit
    assert sdpa_backend("8.0", "fp32", 64)["backend"] == "efficient"
    assert sdpa_backend("8.0", "fp32", 66)["backend"] == "math"
    assert sdpa_backend("9.0", "fp8", 64)["backend"] is None


def test_advise_rejects_bad_input(capsys):
    assert main(["advise", "--hw", "h100", "--seqlen", "512", "--headdim", "80"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("flashsim: error:") and "head dim 80" in err and "Traceback" not in err


def test_a_launch_besides_the_main_one_is_named_when_it_weighs():
    """v3-fp8 on a short sequence spends much of its call in the quantisation pre-pass, and says so."""
    rows = {r["algo"]: r for r in advise(load_profile("h200"), 1024, 128, batch=4, heads=16)["ranking"]}
    assert "its fp8_prepass kernel takes" in rows["v3-fp8"]["reason"]
    assert "kernel takes" not in rows["v2"]["reason"]  # one launch
