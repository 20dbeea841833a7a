"""The command line at its edges: sizes past the GPU or the simulator, bad output paths, piped output, units,
charts and sweep options. Each refusal is one line on stderr with exit status 2 and leaves no file behind."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from flashsim import cli
from flashsim.algorithms.ir import Gemm
from flashsim.algorithms.memory import footprint_bytes, tensor_bytes
from flashsim.algorithms.problem import Problem
from flashsim.algorithms.schedules import build
from flashsim.algorithms.tiling import ALGORITHMS, Tiling, resolve_tiling
from flashsim.console import PIPED_WIDTH, make_console
from flashsim.errors import FlashsimError
from flashsim.hw_profiles.loader import load_profile
from flashsim.simulator import api
from flashsim.simulator.commands import fa2_grid
from flashsim.simulator.limits import check_memory, simulated_steps
from flashsim.simulator.report import (
    bar_figure,
    check_writable,
    problem_title,
    sweep_figure,
    write_atomically,
)
from flashsim.units import format_bytes, format_rate

GiB = 1 << 30


def _one_line_error(capsys, argv: list[str]) -> str:
    assert cli.main(argv) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("flashsim: error:") and "Traceback" not in err
    return err


# -- 1. memory footprint and work --------------------------------------------------------------------------


def test_footprint_is_every_tensor_in_hbm():
    p = Problem(2, 8, 1000, 64, kv_heads=2, seqlen_k=3000)
    t = Tiling(128, 64, 4)
    q, kv = 2 * 8 * 1000 * 64 * 2, 2 * 2 * 3000 * 64 * 2
    lse = 2 * 8 * 1000 * 4
    assert tensor_bytes("v2", p, t) == {"Q": q, "K": kv, "V": kv, "O": q, "LSE": lse}
    assert tensor_bytes("v3", p, t) == tensor_bytes("v2", p, t)
    scores = 2 * 8 * 1000 * 3000 * 2  # S and P, (B, H, Nq, Nk) in bf16
    assert tensor_bytes("standard", p, t) == {"Q": q, "K": kv, "V": kv, "O": q, "S": scores, "P": scores}
    v1 = tensor_bytes("v1", p, t)
    assert v1["Oacc"] == 2 * 8 * 1000 * 64 * 4 and v1["M"] == v1["L"] == lse
    fp8 = tensor_bytes("v3-fp8", Problem(2, 8, 1000, 64, kv_heads=2, seqlen_k=3000, dtype="fp8"), t)
    # inputs arrive in bf16, their e4m3 copies take a byte per element, one fp32 scale per block, O in bf16
    assert fp8["Q"] == q and fp8["Qq"] == q // 2 and fp8["Kq"] == kv // 2 and fp8["O"] == q
    assert fp8["scales"] == 4 * (2 * 8 * 8 + 2 * 2 * 2 * 47)
    assert footprint_bytes("v2", p, t) == 2 * q + 2 * kv + lse


def test_every_algorithm_has_a_footprint():
    p, t = Problem(1, 2, 256, 64), Tiling(64, 64, 4)
    for algo in ALGORITHMS:
        sizes = tensor_bytes(algo, p, t)
        assert {"Q", "K", "V", "O"} <= set(sizes) and all(n > 0 for n in sizes.values())
    with pytest.raises(FlashsimError, match="unknown algorithm"):
        tensor_bytes("v9", p, t)


def test_standard_runs_out_of_hbm_where_flash_fits():
    """At N = 64k, S and P take 2 x 64 x 64k^2 x 2 B = 1 TiB: standard attention cannot run on an 80 GiB GPU,
    FlashAttention (linear in N) can."""
    a100 = load_profile("a100")
    p = Problem(4, 16, 65536, 128)
    check_memory("v2", p, resolve_tiling("v2", p, a100), a100)
    with pytest.raises(FlashsimError, match=r"needs 1 TiB .*S 512 GiB.*80 GiB of HBM on a100"):
        check_memory("standard", p, resolve_tiling("standard", p, a100), a100)


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["simulate", "--seqlen", "1000000000"], "needs 59.8 TiB of global memory"),
        (["simulate", "--batch", "100000", "--seqlen", "8192", "--hw", "a100"], "80 GiB of HBM on a100-sxm4-80gb"),
        (["simulate", "--batch", "1", "--heads", "1", "--seqlen", "1000000"], "tile steps"),
        (["simulate", "--seqlen", "1024", "--batch", "1", "--max-steps", "10"], "more than the limit of 10"),
        (["compare", "--algos", "v2", "--seqlen", "1000000000", "--jobs", "1"], "of HBM on h100"),
    ],
)
def test_too_large_refused_before_simulating(argv, needle, capsys):
    start = time.perf_counter()
    assert needle in _one_line_error(capsys, argv)
    assert time.perf_counter() - start < 20  # refused from the shapes, before a grid of blocks is built


def test_work_estimate_counts_the_schedules_tile_steps():
    """simulated_steps counts one step per Q block meeting a K/V block: exactly the S = Q K^T GEMMs a
    whole-chip V2 run interprets; causal skips the blocks above the diagonal, about half."""
    h100 = load_profile("h100")
    for causal, tolerance in ((False, 0.0), (True, 0.1)):
        p = Problem(2, 4, 2048, 64, causal=causal)
        t = resolve_tiling("v2", p, h100)
        kernel = build("v2", p, t).kernels[0]
        gemms = sum(
            1
            for cta in kernel.ctas
            for role in kernel.roles
            for op in role.program(cta)
            if isinstance(op, Gemm) and op.dst == "S"
        )
        assert simulated_steps(p, t, h100, None) == pytest.approx(gemms, rel=tolerance)


def test_work_estimate_scales_with_the_sample():
    h100 = load_profile("h100")
    p = Problem(4, 33, 4096, 128)  # 132 K/V head groups: a sample of 8 SMs simulates 8 of them
    t = resolve_tiling("v2", p, h100)
    whole = simulated_steps(p, t, h100, None)
    assert simulated_steps(p, t, h100, 8) == pytest.approx(whole * 8 / 132)
    assert simulated_steps(p, t, h100, 132) == whole
    one = Problem(1, 1, 4096, 128)  # a single head group is simulated whole, whatever the sample
    assert simulated_steps(one, t, h100, 8) == simulated_steps(one, t, h100, None)


def test_api_refuses_more_sms_than_the_chip():
    h100 = load_profile("h100")
    with pytest.raises(FlashsimError, match="cannot simulate 1000 SMs: h100-sxm5-80gb has 132"):
        api.simulate("v2", Problem(1, 2, 512, 64), h100, sms=1000)


# -- 2. bad arguments and output paths ---------------------------------------------------------------------


@pytest.mark.parametrize("argv", [["simulate", "--sms", "100000"], ["trace", "--sms", "100000"],
                                  ["compare", "--algos", "v2", "--sms", "100000"]])
def test_sms_beyond_the_chip(argv, capsys):
    assert "between 1 and h100-sxm5-80gb's 132 SMs" in _one_line_error(capsys, argv)


@pytest.mark.parametrize("command", ["simulate", "trace", "explain"])
def test_a_dtype_the_algorithm_does_not_take_is_named(command, capsys):
    """Its tiles for that dtype would be refused for their shape first (v3's fp8 tiles fit no wgmma), which says
    nothing of the dtype."""
    error = _one_line_error(capsys, [command, "--algo", "v3", "--dtype", "fp8", "--seqlen", "1024"])
    assert "v3 takes bf16, fp16, fp32 inputs, not fp8 (fp8 runs with v3-fp8)" in error


def test_a_batch_that_disagrees_with_the_sequence_lengths_is_refused(capsys):
    error = _one_line_error(capsys, ["simulate", "--seqlens", "100,200", "--batch", "3"])
    assert "--batch 3 disagrees with --seqlens, which gives 2 sequences" in error


def test_memory_takes_each_algorithm_in_its_dtype(capsys):
    """Without --dtype each algorithm's footprint is in its own default dtype (v3-fp8's is fp8); with one, those
    that do not take it are skipped, and if none does, the command says so."""
    assert cli.main(["memory", "--algos", "v2", "v3-fp8", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["algorithms"]
    assert [(r["algo"], r["dtype"]) for r in rows] == [("v2", "bf16"), ("v3-fp8", "fp8")]
    assert rows[1]["tensors"]["Qq"] == rows[1]["tensors"]["Q"] // 2  # its fp8 copies beside the 16-bit inputs
    assert cli.main(["memory", "--algos", "v2", "v3-fp8", "--dtype", "fp8", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["algo"] for r in out["algorithms"]] == ["v3-fp8"]
    assert out["skipped"] == [{"algo": "v2", "reason": "v2 takes bf16, fp16, fp32 inputs, not fp8 (fp8 runs with "
                                                      "v3-fp8)"}]
    assert "no algorithm takes this dtype: v2 takes bf16" in _one_line_error(capsys, ["memory", "--algos", "v2",
                                                                                       "--dtype", "fp8"])


def test_trace_to_a_missing_directory(tmp_path, capsys):
    out = tmp_path / "missing" / "t.json"
    assert "does not exist" in _one_line_error(capsys, ["trace", "--seqlen", "512", "--out", str(out)])
    assert not out.parent.exists()


def test_sweep_csv_to_a_missing_directory_fails_before_simulating(tmp_path, capsys):
    csv_path = tmp_path / "missing" / "s.csv"
    start = time.perf_counter()
    err = _one_line_error(capsys, ["sweep", "--csv", str(csv_path), "--out", str(tmp_path)])
    assert "does not exist" in err and time.perf_counter() - start < 10
    assert not (tmp_path / "sweep.png").exists()


def test_out_directory_that_is_a_file(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    err = _one_line_error(capsys, ["compare", "--algos", "v2", "--seqlen", "512", "--batch", "1", "--jobs", "1",
                                   "--out", str(blocker / "sub")])
    assert "cannot create the output directory" in err


def test_failed_write_leaves_nothing(tmp_path):
    path = tmp_path / "t.json"
    path.write_text("old")

    def write(f):
        f.write("half")
        raise OSError(28, "No space left on device")

    with pytest.raises(FlashsimError, match="cannot write .*No space left on device"):
        write_atomically(path, write)
    assert path.read_text() == "old" and list(tmp_path.iterdir()) == [path]
    with pytest.raises(FlashsimError, match="it is a directory"):
        check_writable(tmp_path)


# -- 3. packaged results from any directory ----------------------------------------------------------------


def test_accuracy_from_another_directory(tmp_path):
    run = subprocess.run([sys.executable, "-m", "flashsim.cli", "accuracy", "--json"], cwd=tmp_path,
                         capture_output=True, text=True, env=os.environ.copy(), timeout=120)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert Path(out["file"]).is_file() and out["summary"]


# -- 4. piped output and units ---------------------------------------------------------------------------


def _piped(argv: list[str], **env: str) -> str:
    environ = {k: v for k, v in os.environ.items() if k != "COLUMNS"} | env
    run = subprocess.run([sys.executable, "-m", "flashsim.cli", *argv], capture_output=True, text=True,
                         env=environ, timeout=120)
    assert run.returncode == 0, run.stderr
    return run.stdout


def test_piped_tables_are_not_cut_to_80_columns():
    widest = max(len(line) for line in _piped(["profiles", "show", "h200"]).splitlines())
    assert 80 < widest <= PIPED_WIDTH
    narrow = _piped(["profiles", "show", "h200"], COLUMNS="100")
    assert max(len(line) for line in narrow.splitlines()) <= 100


def test_console_width_when_piped(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    assert make_console().width == PIPED_WIDTH  # pytest captures stdout: not a terminal


def test_units_binary_sizes_decimal_rates():
    assert [format_bytes(n) for n in (512, 16 << 10, 1638400, 80 * GiB, 141e9)] == [
        "512 B", "16 KiB", "1.56 MiB", "80 GiB", "131 GiB"]
    assert format_bytes(1000) == "0.977 KiB"  # never four digits before the unit
    assert format_rate(3.35e12) == "3.35 TB/s"


def test_simulate_starts_from_a_flushed_l2_as_validation_does(capsys):
    """--flushed-l2: the run starts from the full, partly dirty L2 a flush leaves (the validation reports'
    start), whose dirty lines are written back as the kernel's reads take their place."""
    argv = ["simulate", "--hw", "h100", "--seqlen", "1024", "--batch", "1", "--heads", "4", "--json"]
    assert cli.main(argv) == 0
    empty = json.loads(capsys.readouterr().out)
    assert cli.main([*argv, "--flushed-l2"]) == 0
    flushed = json.loads(capsys.readouterr().out)
    assert "hbm_write_flush" not in empty["bytes"] and flushed["bytes"]["hbm_write_flush"] > 0
    assert flushed["bytes"]["hbm_write"] > empty["bytes"]["hbm_write"] and flushed["cycles"] >= empty["cycles"]
    expected = api.simulate("v2", Problem(1, 4, 1024, 128), load_profile("h100"), flushed_l2=True)
    assert flushed["cycles"] == expected.cycles and flushed["bytes"] == expected.bytes


def test_simulate_prints_binary_sizes(capsys):
    assert cli.main(["simulate", "--seqlen", "1024", "--batch", "1"]) == 0
    out = capsys.readouterr().out
    assert "MiB" in out and re.search(r"\d (kB|KB|MB|GB|TB)\b", out) is None


# -- 5. compare's chart ----------------------------------------------------------------------------------


def test_problem_title_names_shape_and_dtypes():
    runs = [("v2", Problem(4, 16, 4096, 128, causal=True)), ("v3-fp8", Problem(4, 16, 4096, 128, causal=True,
                                                                                 dtype="fp8"))]
    assert problem_title(runs) == "B=4 H=16 N=4096 d=128 causal, bf16 (v3-fp8: fp8)"


def test_compare_reports_and_charts_skipped_runs(tmp_path, capsys):
    argv = ["compare", "--algos", "v2", "v3", "--hws", "h100", "a100", "--seqlen", "512", "--batch", "1",
            "--jobs", "1", "--out", str(tmp_path)]
    assert cli.main([*argv, "--json"]) == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert [(s["algo"], s["hw"]) for s in out["skipped"]] == [("v3", "a100-sxm4-80gb")]
    assert "skipped v3 on a100-sxm4-80gb: v3 needs tma and wgmma" in captured.err
    assert cli.main(argv) == 0
    assert "skipped v3 on a100-sxm4-80gb" in capsys.readouterr().out


def test_bar_figure_marks_skipped_rows_and_names_the_problem():
    h100 = load_profile("h100")
    p = Problem(1, 2, 512, 64)
    result = api.simulate("v2", p, h100)
    skipped = [{"algo": "v3", "hw": "a100-sxm4-80gb", "reason": "v3 needs tma and wgmma"}]
    fig = bar_figure([result], "throughput: " + problem_title([("v2", p)]), skipped)
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == ["v2 on h100-sxm5-80gb", "v3 on a100-sxm4-80gb"]
    texts = [t.get_text() for t in ax.texts]
    assert "skipped: v3 needs tma and wgmma" in texts and any("(" + result.bound_by + ")" in t for t in texts)
    assert "B=1 H=2 N=512 d=64, bf16" in ax.get_title(loc="left")
    bottom, top = ax.get_ylim()
    assert bottom > 1 > 0 > top  # both rows, the skipped one included, inside the axes


# -- 6. sweep --------------------------------------------------------------------------------------------


def test_sweep_help_explains_every_option():
    commands = next(a for a in cli.build_parser()._actions if a.dest == "command")
    sweep = commands.choices["sweep"]
    for action in sweep._actions:
        assert action.help and action.help.strip(), action.option_strings


def test_fa2_grid_defaults_and_overrides():
    default = fa2_grid([512, 4096], [64, 128], "off", ["v2"])
    assert [(p.batch, p.heads) for _, p in default] == [(32, 32), (4, 32), (32, 16), (4, 16)]
    fixed = fa2_grid([512, 4096], [64, 96], "off", ["v2"], batch=2, heads=12)
    assert {(p.batch, p.heads) for _, p in fixed} == {(2, 12)}  # d96 needs no 2048 / d with --heads
    with pytest.raises(FlashsimError, match="give --heads"):
        fa2_grid([512], [96], "off", ["v2"])


def test_sweep_batch_heads_from_the_command_line(tmp_path, capsys):
    argv = ["sweep", "--algos", "v2", "--seqlens", "512", "--headdims", "64", "--causal", "off", "--batch", "1",
            "--heads", "2", "--jobs", "1", "--out", str(tmp_path), "--json"]
    assert cli.main(argv) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [(r["batch"], r["heads"], r["dtype"]) for r in rows] == [(1, 2, "bf16")]


def test_sweep_plot_starts_at_zero_and_shows_the_peak():
    h100 = load_profile("h100")
    rows = [{"algo": "v2", "headdim": 64, "causal": c, "seqlen": n, "tflops": 300.0 + n / 100, "dtype": "bf16"}
            for c in (False, True) for n in (512, 1024)]
    fig = sweep_figure(rows, "t", h100)
    peak = h100.tensor_peak_flops_per_s("bf16") / 1e12
    for ax in fig.axes:
        bottom, top = ax.get_ylim()
        assert bottom == 0 and top > peak
        levels = [line.get_ydata()[0] for line in ax.lines if line.get_linestyle() == "--"]
        assert levels == [pytest.approx(peak)]
    assert any("bf16 tensor-core peak" in t.get_text() for t in fig.legends[0].get_texts())


def test_each_command_is_found_in_the_module_the_cli_imports_for_it():
    """A run imports only its command's module: the table must name every command where it is registered."""
    import importlib

    for module, names in cli.COMMANDS.items():
        parser = cli._Parser()
        sub = parser.add_subparsers(dest="command")
        importlib.import_module(module).register(sub)
        assert tuple(sub.choices) == names, module
    only = next(a for a in cli.build_parser("tour")._actions if a.dest == "command")
    assert set(only.choices) == {"simulate", "compare", "sweep", "trace", "tour", "cache"}
