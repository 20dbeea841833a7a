"""`flashsim profiles list|show|diff` and the shared --hw/--set options."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from flashsim import cli
from flashsim.hw_profiles import load_profile
from flashsim.hw_profiles.commands import add_profile_args, differences, human, profile_from_args

ROOT = Path(__file__).resolve().parents[1]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = cli.main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    rc, out, err = run(capsys, *argv, "--json")
    assert rc == 0 and err == ""
    obj = json.loads(out)  # the whole of stdout is one JSON document ...
    assert isinstance(obj, dict)  # ... and it is an object
    return obj


def test_list(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(capsys, "profiles", "list")
    assert rc == 0
    # the H100 shares the H200's measured SM numbers, so its bf16 peak is the H200's 854 (wgmma), not 989
    for word in ("a100", "h100-sxm5-80gb", "h200-sxm-141gb", "half-smem", "2x-hbm", "228 KiB", "854 (wgmma)",
                 "calibrated", "derived", "datasheet-only"):  # fmt: skip
        assert word in out


def test_list_json(capsys: pytest.CaptureFixture[str]) -> None:
    rows = {r["alias"]: r for r in run_json(capsys, "profiles", "list")["profiles"]}
    assert rows["h100"]["sm_count"] == 132
    assert rows["a100"]["bf16_tensor_instr"] == "mma_sync"
    assert rows["h200"]["bf16_tensor_peak_flops_per_s"] == pytest.approx(132 * 4088 * 1.583e9)
    assert {a: r["provenance"] for a, r in rows.items() if a in ("a100", "h100", "h200", "half-smem")} == {
        "a100": "datasheet-only", "h100": "derived", "h200": "calibrated", "half-smem": "derived"}


def test_show(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(capsys, "profiles", "show", "h200")
    assert rc == 0
    for word in ("h200-sxm-141gb", "smem_per_block_max_bytes", "227 KiB", "4.55 TB/s", "measured:", "derived",
                 "numbers: calibrated (measured on this GPU)"):  # fmt: skip
        assert word in out


def test_show_json_with_overrides(capsys: pytest.CaptureFixture[str]) -> None:
    d = run_json(capsys, "profiles", "show", "h100", "--set", "sm_count=66", "--set", "l2_bytes=25165824")
    assert d["params"]["sm_count"] == {"value": 66, "unit": "", "source": "override: --set sm_count=66"}
    assert d["params"]["l2_bytes"]["value"] == 25165824


def test_show_path(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "mine.toml"
    path.write_text('name = "mine"\ndescription = "a test GPU"\nbased_on = "a100"\n')
    d = run_json(capsys, "profiles", "show", str(path))
    assert d["name"] == "mine" and d["based_on"] == "a100-sxm4-80gb"


def test_diff(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(capsys, "profiles", "diff", "h100", "2x-hbm")
    assert rc == 0 and "hbm_bandwidth_bytes_per_s" in out and "2x" in out and "sm_count" not in out
    rc, out, _ = run(capsys, "profiles", "diff", "h100", "h100")
    assert rc == 0 and "same values" in out


def test_diff_json(capsys: pytest.CaptureFixture[str]) -> None:
    d = run_json(capsys, "profiles", "diff", "a100", "h100")
    diffs = d["differences"]
    assert diffs["arch"] == {"a": "ampere", "b": "hopper"}
    assert diffs["wgmma_bf16_flops_per_clk_per_sm"]["a"] is None
    assert "registers_per_sm" not in diffs
    assert list(run_json(capsys, "profiles", "diff", "h100", "half-smem")["differences"]) == [
        "smem_per_sm_bytes",
        "smem_per_block_max_bytes",
    ]


def test_differences_is_symmetric() -> None:
    a, b = load_profile("a100"), load_profile("h200")
    assert differences(a, b).keys() == differences(b, a).keys()


@pytest.mark.parametrize(
    "argv, words",
    [
        (("profiles", "show", "h900"), ("unknown profile 'h900'",)),
        (("profiles", "show", "h100", "--set", "sm_count=abc"), ("sm_count", "expects an integer")),
        (("profiles", "show", "h100", "--set", "bogus=1"), ("bogus",)),
        (("profiles", "diff", "h100", "missing/file.toml"), ("no such profile file",)),
    ],
)
def test_bad_input_exits_2_with_one_line(capsys: pytest.CaptureFixture[str], argv: tuple, words: tuple) -> None:
    rc, out, err = run(capsys, *argv)
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("flashsim: error: ") and "Traceback" not in err
    for word in words:
        assert word in err


def test_bad_toml_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "broken.toml"
    path.write_text("name = \n")
    rc, _, err = run(capsys, "profiles", "show", str(path))
    assert rc == 2 and "broken.toml: malformed TOML" in err and err.count("\n") == 1


def test_missing_action_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(["profiles"])
    assert info.value.code == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_entry_point_subprocess() -> None:
    exe = shutil.which("flashsim")
    cmd = [exe] if exe else [sys.executable, "-m", "flashsim.cli"]
    ok = subprocess.run([*cmd, "profiles", "show", "a100", "--json"], cwd=ROOT, capture_output=True, text=True)
    assert ok.returncode == 0 and json.loads(ok.stdout)["name"] == "a100-sxm4-80gb"
    bad = subprocess.run([*cmd, "profiles", "show", "nope"], cwd=ROOT, capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr


def test_shared_profile_args() -> None:
    parser = argparse.ArgumentParser()
    add_profile_args(parser)
    assert profile_from_args(parser.parse_args([])).name == "h100-sxm5-80gb"
    args = parser.parse_args(["--hw", "a100", "--set", "sm_count=54", "--set", "sm_clock_hz=1.2e9"])
    p = profile_from_args(args)
    assert (p.name, p.sm_count, p.sm_clock_hz) == ("a100-sxm4-80gb", 54, 1.2e9)


@pytest.mark.parametrize(
    "key, value, text",
    [
        ("smem_per_sm_bytes", 233472, "228 KiB"),
        ("l2_bytes", 52428800, "50 MiB"),
        ("hbm_bytes", 141_000_000_000, "131 GiB"),
        ("hbm_bandwidth_bytes_per_s", 3.015e12, "3.015 TB/s"),
        ("sm_clock_hz", 1.83e9, "1.83 GHz"),
        ("launch_overhead_s", 3e-6, "3 µs"),
        ("smem_latency_cycles", 29, "29 cycles"),
        ("mma_sync_fp16_flops_per_clk_per_sm", 2580.48, "2580.48 FLOP/clk/SM"),
        ("sm_count", 132, "132"),
        ("tma_issue_cycles", None, "-"),
    ],
)
def test_human(key: str, value: object, text: str) -> None:
    assert human(key, value) == text


def test_simulate_and_compare_results_name_the_profile_provenance(capsys: pytest.CaptureFixture[str]) -> None:
    small = ("--seqlen", "256", "--batch", "1", "--heads", "2", "--headdim", "64")
    d = run_json(capsys, "simulate", "--algo", "v2", "--hw", "h100", *small)
    assert d["hw_provenance"] == "derived"
    rc, out, _ = run(capsys, "simulate", "--algo", "v2", "--hw", "a100", *small)
    assert rc == 0 and "datasheet-only" in out
    d = run_json(capsys, "compare", "--algos", "v2", "--hws", "h200", "a100", *small)
    assert {r["hw"]: r["hw_provenance"] for r in d["results"]} == {"h200-sxm-141gb": "calibrated",
                                                                  "a100-sxm4-80gb": "datasheet-only"}
    rc, out, _ = run(capsys, "compare", "--algos", "v2", "--hws", "h200", "a100", *small)
    assert rc == 0 and "profile numbers:" in out and "calibrated" in out and "datasheet-only" in out
