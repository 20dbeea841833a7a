"""calibrate: no-GPU behaviour, the profile TOML it writes, its pure helpers, and the microbenchmark builds."""

from __future__ import annotations

import shutil
import sys
import tomllib
import types
from pathlib import Path

import numpy as np
import pytest
from flashsim import cli
from flashsim.errors import FlashsimError
from flashsim.experiments import calibrate, calibrate_bench, calibrate_gpu
from flashsim.hw_profiles import load_profile


def _one_line_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str], needle: str) -> None:
    assert cli.main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and needle in captured.err


def test_calibrate_without_cupy_exits_2_with_one_line(monkeypatch, capsys) -> None:
    monkeypatch.setitem(sys.modules, "cupy", None)  # import fails as if not installed
    _one_line_exit_2(capsys, ["calibrate"], "needs a CUDA GPU")


def test_calibrate_without_a_device_exits_2_with_one_line(monkeypatch, capsys) -> None:
    def no_device():
        raise RuntimeError("cudaErrorNoDevice: no CUDA-capable device is detected")

    fake = types.SimpleNamespace(cuda=types.SimpleNamespace(runtime=types.SimpleNamespace(getDeviceCount=no_device)))
    monkeypatch.setitem(sys.modules, "cupy", fake)
    _one_line_exit_2(capsys, ["calibrate"], "none is visible")


def test_calibrate_rejects_bad_reps(capsys) -> None:
    _one_line_exit_2(capsys, ["calibrate", "--reps", "1"], "--reps")


# A calibration report as calibrate.run returns it, with plausible H200 numbers.
REPORT = {
    "provenance": {
        "gpu": "NVIDIA H200",
        "driver": "580.159.04",
        "cuda_runtime": "13.0",
        "torch": "2.11.0",
        "date": "2026-11-30",
        "command": "flashsim calibrate",
    },  # fmt: skip
    "gpu": {
        "name": "NVIDIA H200",
        "major": 9,
        "minor": 0,
        "sm_count": 132,
        "l2_bytes": 62914560,
        "smem_per_sm_bytes": 233472,
        "smem_per_block_optin_bytes": 232448,
        "registers_per_sm": 65536,
        "total_mem_bytes": 150_000_000_000,
    },  # fmt: skip
    "results": {
        "hbm": {
            "read_bytes_per_s": 4.4e12,
            "write_bytes_per_s": 4.2e12,
            "copy_bytes_per_s": 4.25e12,
            "torch_copy_bytes_per_s": 4.24e12,
            "how": "read_cg ...",
        },  # fmt: skip
        "l2_sweep": {
            "l2_bytes_per_clk": 5400.0,
            "l2_bytes_per_s": 1.07e13,
            "effective_l2_bytes": 52_000_000,
            "how": "sweep ...",
        },  # fmt: skip
        "latency": {"l2_hit_cycles": 262.4, "hbm_cycles": 610.2, "hbm_footprint_bytes": 1 << 30, "how": "chase"},
        "smem": {"bytes_per_clk_per_sm": 127.5, "latency_cycles": 30.2, "how": "smem_read"},
        "fp32_mufu": {"fp32_flops_per_clk_per_sm": 254.0, "mufu_ex2_per_clk_per_sm": 15.9, "how": "fma"},
        "dep_latency": {"mufu_latency_cycles": 17.61, "shfl_latency_cycles": 23.04, "how": "mufu_dep / shfl_dep"},
        "mma_sync": {
            "bf16_flops_per_clk_per_sm": 2040.0,
            "fp16_flops_per_clk_per_sm": 2041.0,
            "tf32_flops_per_clk_per_sm": 1020.0,
            "bf16_latency_cycles": 33.0,
            "how": "mma",
        },  # fmt: skip
        "wgmma": {
            "bf16_flops_per_clk_per_sm": 4000.0,
            "fp16_flops_per_clk_per_sm": 4001.0,
            "fp8_flops_per_clk_per_sm": 7990.0,
            "tf32_flops_per_clk_per_sm": 1990.0,
            "bf16_latency_cycles": 140.0,
            "how": "wgmma",
        },  # fmt: skip
        "clock": {"clock_hz": 1.755e9, "how": "wgmma_bf16"},
        "cp_async": {"issue_cycles_per_warp_instr": 4.2, "how": "cp_async_stream"},
        "tma": {"issue_cycles_16B": 6.0, "latency_cycles_256B": 640.0, "how": "bulk"},
        "launch": {"launch_overhead_s": 2.1e-6, "cta_launch_cycles": 410.0, "how": "stamp"},
        "loaded_latency": {
            "points": [
                {"read_blocks": 0, "read_bytes_per_s": 0.0, "chase_cycles": 674.4},
                {"read_blocks": 66, "read_bytes_per_s": 3.36e12, "chase_cycles": 784.2},
            ],
            "how": "chase beside read_cg",
        },  # fmt: skip
    },
    "errors": {},
}


def test_toml_is_a_loadable_profile_with_measured_sources(tmp_path: Path) -> None:
    json_path, toml_path = calibrate.write(REPORT, tmp_path)
    assert json_path.name == "calibration.json" and toml_path.name == "calibration.toml"
    profile = load_profile(toml_path)
    assert profile.based_on == "h200-sxm-141gb"
    assert profile.hbm_bandwidth_bytes_per_s == pytest.approx(4.4e12)
    assert profile.l2_hit_latency_cycles == 262 and profile.hbm_latency_cycles == 610
    assert profile.l2_bytes == 52_000_000
    assert profile.tma_latency_cycles == round(640.0 - 262.4)
    assert profile.wgmma_fp8_flops_per_clk_per_sm == pytest.approx(7990.0)
    assert (profile.mufu_latency_cycles, profile.shfl_latency_cycles) == (17.61, 23.04)
    data = tomllib.loads(toml_path.read_text())
    for key, entry in data["params"].items():
        src = entry["source"]
        assert src.startswith("measured:"), key
        assert "NVIDIA H200" in src and "2026-11-30" in src, key
    # Inherited parameters keep the base profile's sources.
    assert profile.source("l2_line_bytes").startswith("datasheet")


def test_toml_notes_what_was_not_measured(tmp_path: Path) -> None:
    report = {**REPORT, "results": {k: v for k, v in REPORT["results"].items() if k != "tma"},
              "errors": {"tma": "RuntimeError: boom"}}  # fmt: skip
    _, toml_path = calibrate.write(report, tmp_path)
    text = toml_path.read_text()
    assert "# not measured: tma: RuntimeError: boom" in text and "tma_latency_cycles" not in text
    load_profile(toml_path)


def test_base_profile_for() -> None:
    assert calibrate.base_profile_for("NVIDIA H200", 9) == "h200-sxm-141gb"
    assert calibrate.base_profile_for("NVIDIA H100 80GB HBM3", 9) == "h100-sxm5-80gb"
    assert calibrate.base_profile_for("NVIDIA A100-SXM4-80GB", 8) == "a100-sxm4-80gb"
    assert calibrate.base_profile_for("NVIDIA L40S", 8) == "a100-sxm4-80gb"


def test_toml_value_refuses_non_finite() -> None:
    assert calibrate._toml_value(3) == "3" and calibrate._toml_value(128.0) == "128.0"
    assert calibrate._toml_value(4.4e12) == "4.4e+12"
    with pytest.raises(FlashsimError):
        calibrate._toml_value(float("nan"))


# -- pure helpers of the benchmarks --------------------------------------------------------------------------


def _times(rows: list[tuple[int, int, int, int, int]]) -> np.ndarray:
    t = np.zeros(len(rows), dtype=calibrate_bench.BLOCK_TIME)
    for i, (clk0, clk1, ns0, ns1, sm) in enumerate(rows):
        t[i] = (clk0, clk1, ns0, ns1, sm, 0)
    return t


def test_per_sm_rate_and_clock() -> None:
    # SM 0 runs two blocks over 2000 cycles, SM 1 one block over 1000: 100 units of work per block.
    t = _times([(0, 1000, 0, 500, 0), (1000, 2000, 500, 1000, 0), (5, 1005, 0, 500, 1)])
    assert calibrate_bench.per_sm_rate(t, 100) == pytest.approx(0.1)
    # 1000 cycles in 500 ns: 2 GHz (blocks under 1 us are skipped, so use longer ones)
    long = _times([(0, 4000, 0, 2000, 0), (0, 3000, 0, 2000, 1)])
    assert calibrate_bench.clock_hz(long) == pytest.approx(1.75e9)


def test_effective_capacity_interpolates_the_half_way_point() -> None:
    mib = 1 << 20
    rows = [{"footprint_bytes": f * mib, "bytes_per_s": bw} for f, bw in ((16, 10.0), (32, 10.0), (48, 8.0),
                                                                            (64, 4.0), (128, 2.0))]  # fmt: skip
    # half-way between 10 and 2 is 6: between 48 MiB (8) and 64 MiB (4), at the middle.
    assert calibrate_bench.effective_capacity(rows, 10.0, 2.0) == 56 * mib
    assert calibrate_bench.effective_capacity(rows[:2], 10.0, 2.0) is None


def test_random_operands_have_no_nan() -> None:
    rng = np.random.default_rng(0)
    fp8 = calibrate_bench._operand_words(4096, "fp8", rng).view(np.uint8)
    assert not np.any((fp8 & 0x7F) == 0x7F)
    bf16 = calibrate_bench._operand_words(4096, "bf16", rng).view(np.uint16)
    assert not np.any((bf16 & 0x7F80) == 0x7F80)  # exponent all ones: Inf or NaN
    assert np.count_nonzero(bf16) > 2000


def test_command_line_hides_absolute_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    line = calibrate_gpu.command_line(["calibrate", "--out-dir", str(tmp_path / "res"), "--quick"])
    assert line == "flashsim calibrate --out-dir res --quick"
    assert calibrate_gpu.command_line(["x", "/elsewhere/out"]) == "flashsim x out"


# -- the CUDA sources ----------------------------------------------------------------------------------------

BUILDS = [(name, arch) for name, archs in calibrate_gpu.SOURCES.items() for arch in archs]


@pytest.mark.nvcc
@pytest.mark.parametrize(("name", "arch"), BUILDS, ids=[f"{n}-{a}" for n, a in BUILDS])
def test_microbenchmarks_compile(name: str, arch: str, tmp_path: Path) -> None:
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not found")
    cubin = calibrate_gpu.compile_cubin(name, arch, tmp_path, force=True)
    assert cubin.stat().st_size > 0


def test_unknown_targets_are_refused() -> None:
    with pytest.raises(FlashsimError, match="not built for sm_80"):
        calibrate_gpu.compile_cubin("wgmma", "sm_80")
    with pytest.raises(FlashsimError, match="compute capability 7.5"):
        calibrate_gpu.arch_for(7, 5)


def _gpu_available() -> bool:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


@pytest.mark.gpu
def test_quick_calibration_on_the_gpu(tmp_path: Path) -> None:
    if not _gpu_available():
        pytest.skip("no CUDA GPU")
    report = calibrate.run(["hbm", "smem", "fp32_mufu", "launch"], quick=True, reps=5, log=lambda _: None)
    assert not report["errors"], report["errors"]
    r = report["results"]
    assert r["hbm"]["read_bytes_per_s"] > 1e11
    assert 16 <= r["smem"]["bytes_per_clk_per_sm"] <= 256
    assert r["launch"]["launch_overhead_s"] < 1e-4


def test_toml_again_from_the_raw_numbers(tmp_path: Path, capsys) -> None:
    json_path, toml_path = calibrate.write(REPORT, tmp_path / "a")
    assert cli.main(["calibrate", "--from-json", str(json_path), "--out-dir", str(tmp_path / "b")]) == 0
    assert (tmp_path / "b" / "calibration.toml").read_text() == toml_path.read_text()
    out = capsys.readouterr().out
    assert "wgmma_fp8_flops_per_clk_per_sm" in out
    assert "HBM latency beside streaming reads: 674 cycles at 0.0 TB/s, 784 cycles at 3.4 TB/s" in out
    _one_line_exit_2(capsys, ["calibrate", "--from-json", str(tmp_path / "none.json")], "cannot read")
