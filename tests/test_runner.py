"""Where runs execute (here, local processes, a Dask cluster) changes nothing but the wall time; an event limit
stops a run with one line; a long run reports its progress."""

from __future__ import annotations

import json

import pytest
from flashsim import cli
from flashsim.algorithms.problem import Problem
from flashsim.errors import FlashsimError
from flashsim.hw_profiles import load_profile
from flashsim.simulator import simulate
from flashsim.simulator.gpu import EventLimitReached
from flashsim.simulator.runner import dask_client, simulate_pass

H100 = load_profile("h100")
# eight small points (a tenth of a second to a few seconds each: the test is of where runs go, not of the
# model); every run made (no result cache), so that each sweep really runs where it is sent
SWEEP = ["sweep", "--hw", "h100", "--algos", "v2", "v3", "--seqlens", "2048", "4096", "--batch", "1", "--heads", "8",
         "--headdims", "128", "--causal", "both", "--json", "--no-cache"]


def _rows(capsys) -> list[dict]:
    rows = json.loads(capsys.readouterr().out)["rows"]
    for row in rows:
        del row["sim_wall_s"]  # the only field that depends on where a run ran
    return rows


def test_a_dask_sweep_equals_the_local_sweep(tmp_path, capsys):
    distributed = pytest.importorskip("distributed")
    assert cli.main([*SWEEP, "--jobs", "1", "--out", str(tmp_path)]) == 0
    local = _rows(capsys)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as lc:
        assert cli.main([*SWEEP, "--dask", lc.scheduler_address, "--out", str(tmp_path)]) == 0
    remote = _rows(capsys)
    assert len(local) == 8
    assert remote == local  # same rows, same order, every cycle and byte


@pytest.mark.parametrize("address", ["nonsense:://x", "tcp://127.0.0.1:notaport", "tcp://127.0.0.1:1"])
def test_a_bad_dask_address_is_one_line_exit_2(address, tmp_path, capsys, monkeypatch):
    pytest.importorskip("distributed")
    import flashsim.simulator.runner as runner

    monkeypatch.setattr(runner, "DASK_CONNECT_TIMEOUT_S", 1)
    assert cli.main([*SWEEP, "--dask", address, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "flashsim: error:" in err and "Dask" in err


def test_dask_client_refuses_a_malformed_address_at_once():
    pytest.importorskip("distributed")
    with pytest.raises(FlashsimError, match="not a Dask scheduler address"):
        dask_client("tcp://")


def test_an_event_limit_stops_a_run():
    problem = Problem(1, 4, 1024, 64)
    full = simulate("v2", problem, H100)
    with pytest.raises(EventLimitReached, match=f"{full.sim['events'] // 2:,} simulated events"):
        simulate("v2", problem, H100, max_events=full.sim["events"] // 2)
    # a limit the run stays under changes nothing
    roomy = simulate("v2", problem, H100, max_events=full.sim["events"] + 1)
    assert (roomy.cycles, roomy.bytes) == (full.cycles, full.bytes)


@pytest.mark.parametrize("command", [
    ["simulate", "--algo", "v2", "--seqlen", "1024", "--batch", "1"],
    ["compare", "--algos", "v2", "v3", "--seqlen", "1024", "--batch", "1", "--jobs", "1"],
    ["sweep", "--algos", "v2", "--seqlens", "512", "--headdims", "64", "--causal", "off", "--jobs", "2"],
])
def test_max_events_on_the_command_line_is_one_line_exit_2(command, tmp_path, capsys):
    out = [] if command[0] == "simulate" else ["--out", str(tmp_path)]
    assert cli.main([*command, *out, "--json", "--max-events", "500"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "stopped after 500 simulated events" in err and "--max-events" in err


def test_progress_reports_the_fraction_of_blocks_done():
    fractions: list[float] = []
    simulate("v2", Problem(2, 8, 1024, 64), H100, progress=fractions.append)
    assert fractions == sorted(fractions)
    assert 0 < fractions[0] < 1 and fractions[-1] == 1.0


def test_a_dask_training_step_equals_the_local_one(tmp_path, capsys):
    """--pass fwd+bwd runs the forward and the backward as separate jobs and pairs them afterwards, on Dask's
    workers as here."""
    distributed = pytest.importorskip("distributed")
    compare = ["compare", "--algos", "v2", "--seqlen", "512", "--batch", "1", "--heads", "2", "--pass", "fwd+bwd",
               "--json", "--out", str(tmp_path)]

    def results() -> list[dict]:
        out = json.loads(capsys.readouterr().out)["results"]
        for r in out:
            del r["sim"]["wall_s"]
        return out

    assert cli.main([*compare, "--jobs", "1"]) == 0
    local = results()
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as lc:
        assert cli.main([*compare, "--dask", lc.scheduler_address]) == 0
    remote = results()
    assert [r["algo"] for r in local] == ["v2 fwd+bwd"]
    assert remote == local


def test_a_pass_takes_the_event_limit_and_reports_progress_over_both_runs():
    problem = Problem(1, 4, 512, 64)
    fwd = simulate("v2", problem, H100)
    fractions: list[float] = []
    both = simulate_pass("v2", problem, H100, "fwd+bwd", progress=fractions.append)
    assert both.sim["pass_time_s"]["fwd"] == fwd.time_s
    assert fractions == sorted(fractions) and fractions[-1] == 1.0
    assert any(0.45 <= f <= 0.55 for f in fractions)  # the forward ends halfway
    with pytest.raises(EventLimitReached):
        simulate_pass("v2", problem, H100, "bwd", max_events=100)
    with pytest.raises(FlashsimError, match="tile steps"):
        simulate_pass("v2", Problem(1, 4, 4096, 64), H100, "fwd+bwd", max_steps=10)


def test_the_runs_bar_shows_an_eta():
    from flashsim.simulator.runner import _progress
    from rich.progress import TimeRemainingColumn

    assert any(isinstance(c, TimeRemainingColumn) for c in _progress("sweep", True).columns)
