"""The garbage-collector measurement: each way runs in a process of its own and says what it spent collecting."""

import pytest
from flashsim.experiments.gc_cost import WAYS, main, measure


def test_each_way_measures_its_collector():
    small = dict(batch=1, heads=2, seqlen_q=256, headdim=64)
    rows = {way: measure(way, "v2", "h100", small, 2) for way in WAYS}
    assert rows["never"]["collector_s"] == 0.0  # paused throughout: no pass runs
    assert rows["paused, collected after"]["collector_s"] > 0.0  # the collection after each run
    for row in rows.values():
        assert row["process_s"] >= row["runs_s"] > 0.0 and row["peak_mb"] > 0.0


def test_an_output_in_no_folder_is_refused_before_any_run(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--out", str(tmp_path / "missing" / "gc.json")])
    assert exit_.value.code == 2 and "no such folder" in capsys.readouterr().err
