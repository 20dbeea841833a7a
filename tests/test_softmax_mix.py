"""The instruction-issue model of the online softmax against the softmax_mix microbenchmark (our v3 kernel's
own softmax, O rescale and P conversion per K/V block, no tensor work, 1-3 warps per scheduler; committed
H200 measurement, experiments/results/h200/session13/softmax-mix/)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from flashsim.algorithms.ir import OnlineSoftmax
from flashsim.experiments.calibrate_softmax import model_cycles
from flashsim.hw_profiles import load_profile
from flashsim.simulator.instructions import lower, lower_phases

MEASURED = Path(__file__).resolve().parents[1] / "experiments/results/h200/session13/softmax-mix/softmax-mix.json"
ISSUE = load_profile("h200").with_overrides(["issue_model=1"])


def _points() -> list[dict]:
    return json.loads(MEASURED.read_text())["results"]["softmax_mix"]["points"]


def test_the_phases_are_the_whole_lowering():
    for mask in (None, "causal"):
        op = OnlineSoftmax("S", "P", "m", "l", 64, 128, 0.1, mask, "bf16", acc="acc", acc_cols=64, corr="corr",
                           warps=4)
        phases = lower_phases(op)
        assert [name for _, name in phases] == ["max", "exp"]
        summed: Counter = Counter()
        for counts, _ in phases:
            summed.update(counts)
        whole = lower(op)
        assert set(summed) == set(whole)
        assert all(summed[k] == pytest.approx(whole[k]) for k in whole)
        assert not phases[0][0].get("mufu")  # no exponential before the first row's max


def test_the_issue_model_reproduces_the_microbenchmark():
    errors = []
    for p in _points():
        model = model_cycles(ISSUE, p["head_dim"], p["block_n"], p["warps_per_scheduler"])
        errors.append(model / p["cycles_per_iteration"] - 1)
    assert max(abs(e) for e in errors) < 0.10, errors
    assert sum(abs(e) for e in errors) / len(errors) < 0.05, errors


def test_the_first_rows_max_leaves_the_special_function_unit_idle():
    # one warp per scheduler: the SFU's own work is 66 MUFU x 32 lanes / 4 per clock = 528 cycles per
    # iteration at d64; the measurement and the model both add the max phase on top
    one = next(p for p in _points() if p["kernel"] == "softmax_d64_n128_w1")
    sfu_alone = 66 * 32 / (ISSUE.mufu_ops_per_clk_per_sm / 4)
    model = model_cycles(ISSUE, 64, 128, 1)
    assert one["cycles_per_iteration"] > sfu_alone + 100
    assert model > sfu_alone + 100
