"""--clock GHZ: every kernel at one SM clock, shown as an override; a clock out of range is one line, exit 2."""

import json

from flashsim import cli

ARGS = ["simulate", "--hw", "h200", "--algo", "v2", "-b", "1", "--heads", "8", "-n", "512", "-d", "64"]


def _run(capsys, extra):
    code = cli.main(ARGS + extra + ["--json"])
    return code, json.loads(capsys.readouterr().out)


def test_clock_sets_every_sm_clock_and_says_so(capsys):
    _, base = _run(capsys, [])
    _, slow = _run(capsys, ["--clock", "1.4"])
    assert "hw_overrides" not in base
    assert slow["hw_overrides"] == {k: "1.4e+09" for k in ("sm_clock_hz", "sm_clock_light_tensor_load_hz",
                                                           "sm_clock_mma_sync_load_hz", "sm_clock_wgmma_load_hz")}
    # the same work at a slower clock: longer, though memory latencies in ns cost fewer cycles
    assert slow["kernel_time_s"] > base["kernel_time_s"]
    assert slow["cycles"] <= base["cycles"]


def test_clock_in_the_table(capsys):
    assert cli.main(ARGS + ["--clock", "1.5"]) == 0
    assert "SM clock 1.5 GHz at any load" in capsys.readouterr().out


def test_clock_out_of_range_is_one_line(capsys):
    assert cli.main(ARGS + ["--clock", "9"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--clock expects an SM clock in GHz" in err[0]
