"""experiments/partial_adoption.py: the adoption rule over the development sets with some rows predicted anew."""

from __future__ import annotations

import json
from pathlib import Path

from flashsim.experiments import partial_adoption as pa
from flashsim.experiments.accuracy import SIDE_BY_SIDE


def _some_rows(n: int = 3) -> dict[str, float]:
    """The committed predictions of a few of our v2's development rows, and their measurements."""
    ds = pa.DEV_SETS[0]
    rows = [r for r in pa._report(ds)["rows"] if r["impl"] == "v2" and (r.get("predicted") or {}).get(SIDE_BY_SIDE)
            and (r.get("measured") or {}).get(SIDE_BY_SIDE)][:n]
    return {pa._key(ds, r): (r["predicted"][SIDE_BY_SIDE], r["measured"][SIDE_BY_SIDE]) for r in rows}


def test_rows_predicted_exactly_pass_and_rows_made_worse_fail(tmp_path, capsys):
    rows = _some_rows()
    before = tmp_path / "before.json"
    before.write_text(json.dumps({k: p for k, (p, _) in rows.items()}))
    exact, worse = tmp_path / "exact.json", tmp_path / "worse.json"
    exact.write_text(json.dumps({k: m for k, (_, m) in rows.items()}))
    worse.write_text(json.dumps({k: 3 * m for k, (_, m) in rows.items()}))  # +200% each: a group +~20 points
    assert pa.main(["rule", "--before", str(before), "--after", str(exact), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    moved = [r for r in result["rows"] if r["change"]]
    assert [(r["set"], r["impl"]) for r in moved] == [(pa.DEV_SETS[0].name, "v2")]
    assert result["mean_after"] < result["mean_before"]
    assert pa.main(["rule", "--before", str(before), "--after", str(worse), "--json"]) == 1
    capsys.readouterr()


def test_an_unreadable_file_is_one_line_and_status_2(tmp_path, capsys):
    assert pa.main(["rule", "--before", str(tmp_path / "absent.json"), "--after", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "absent.json" in err[0]


def test_the_committed_mask_adoption_passes():
    """Session 39's candidate (our v2's mask code): its causal rows at the known tiles, predicted without and with."""
    here = Path(__file__).resolve().parent.parent / "experiments/results/h200/session39/mask-adoption"
    before = json.loads((here / "v2-causal-mask-off.json").read_text())
    after = json.loads((here / "v2-causal-mask-on.json").read_text())
    result = pa.compare(pa.groups(before), pa.groups({**before, **after}))
    assert result["passes"] and result["worst_change"] < 0.5


def test_whole_chip_jobs_simulate_every_sm_and_plain_ones_the_default_sample(monkeypatch):
    """--whole-chip: a candidate that moves the head samples and the chip apart is judged on the chip."""
    import flashsim.simulator as sim
    from flashsim.experiments.prediction_inputs import simulate_job

    asked = []

    def fake_simulate(*args, **kwargs):
        asked.append(kwargs.get("sms", "default"))
        raise RuntimeError("stop here")  # simulate_job reports it as the row's error

    monkeypatch.setattr(sim, "simulate", fake_simulate)
    whole = [a for _, a, _ in pa.chosen_rows(["v2"], True, whole_chip=True)][:2]
    plain = [a for _, a, _ in pa.chosen_rows(["v2"], True)][:2]
    assert whole and all(a[-1] is True for a in whole) and all(a[-1] is False for a in plain)
    for job in whole + plain:
        assert "stop here" in simulate_job(job)["predict_error"]
    assert asked == [None, None, "default", "default"]


def test_rows_take_the_trees_launch_rule_and_the_calls_other_work(monkeypatch):
    """A candidate may change a library's launch rule: each row runs the tiles that rule gives now, not those its
    report recorded; and a row's prediction is the call's, as validation makes it (cuDNN's memset added)."""
    import flashsim.experiments.prediction_inputs as pi
    from flashsim.experiments.validate_impls import IMPLS, launch_rule
    from flashsim.hw_profiles import load_profile
    from flashsim.simulator.calls import call_busy_s

    rows = pa.chosen_rows(["sdpa-cudnn"], None)
    assert len(rows) >= 100
    for _key, args, _ in rows:
        assert args[2] == launch_rule(IMPLS["sdpa-cudnn"], "v3", args[1]["headdim"])[0]
    monkeypatch.setattr(pi, "simulate_job", lambda job: {"predicted": {"time_s": 1e-5, SIDE_BY_SIDE: 1e-5}})
    memset = sum(call_busy_s("cudnn-sm90", load_profile("h200")).values())
    assert memset > 0
    assert pa._predict_one(rows[0])[1] == 1e-5 + memset
