"""`flashsim lab` and `flashsim numerics`: every experiment's verdict from its quick run, the numbers behind
each verdict, the files the runner writes, and the command line's handling of bad input."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from flashsim import cli
from flashsim.experiments.lab import experiments, get
from flashsim.experiments.lab.numerics import trace_row
from flashsim.experiments.lab.runner import run_one

NAMES = list(experiments())


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    """Each experiment's quick run, once for the module, through the runner (so the files get written)."""
    out = tmp_path_factory.mktemp("lab")
    cache = {}

    def result(name: str) -> dict:
        if name not in cache:
            cache[name] = run_one(name, out, quick=True)
        return cache[name]

    result.out = out
    return result


def test_registry_has_the_ten_claims_and_more():
    assert len(NAMES) >= 10 and len(set(NAMES)) == len(NAMES)
    for name, module in experiments().items():
        assert name == module.NAME and module.CLAIM and callable(module.run) and callable(module.plot)


@pytest.mark.parametrize("name", NAMES)
def test_verdict_holds_and_files_are_written(quick, name):
    result = quick(name)
    assert result["holds"], result["verdict"]
    saved = json.loads((quick.out / f"{name}.json").read_text())
    assert saved["holds"] is True and saved["claim"] == get(name).CLAIM
    png = quick.out / result["plot"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size < 200_000


def test_online_softmax_exact_vs_naive(quick):
    err = quick("online-softmax-exact")["numbers"]["max_rel_error"]
    assert err["v2_schedule_fp32"] < 1e-5  # fp32 rounding, not an approximation
    assert err["online_recurrence_fp64"] < 1e-13
    assert err["naive_blockwise_fp64"] > 0.1  # wrong even in exact arithmetic


def test_naive_blockwise_equals_exact_for_one_block():
    """With a single K/V block the naive method is plain softmax: its error comes from the blocking alone."""
    from flashsim.experiments.lab.online_softmax import naive_blockwise

    q, k, v = (torch.randn(1, 1, 32, 16, dtype=torch.float64) for _ in range(3))
    exact = torch.softmax(q @ k.transpose(-1, -2) * 16**-0.5, -1) @ v
    assert torch.allclose(naive_blockwise(q, k, v, 32), exact)
    assert not torch.allclose(naive_blockwise(q, k, v, 8), exact)


def test_fp16_overflow_rows_are_the_ones_above_ln_max(quick):
    nb = quick("fp16-overflow")["numbers"]
    assert nb["nonfinite_rows_without_max"] == nb["nonfinite_rows_predicted"] > 0
    assert nb["nonfinite_rows_running_max"] == 0
    assert max(nb["row_max_logit"]) > 15


def test_same_flops_fewer_bytes_faster(quick):
    nb = quick("same-flops-fewer-bytes")["numbers"]
    std, v2 = nb["standard"], nb["v2"]
    assert std["matmul_flops"] == v2["matmul_flops"] == nb["problem"]["flops"]
    assert v2["gmem_bytes"] * 4 < std["gmem_bytes"] and v2["time_s"] < std["time_s"]


def test_io_exponents(quick):
    fits = quick("io-complexity")["numbers"]["fits"]
    assert fits["v2"]["M"] == pytest.approx(-1, abs=0.15) and fits["standard"]["M"] == pytest.approx(0, abs=0.01)


def test_smem_trade_reaches_one_pass(quick):
    nb = quick("smem-trade")["numbers"]
    v1 = [r for r in nb["rows"] if r["algo"] == "v1"]
    assert v1[0]["passes"] > 10 and v1[-1]["passes"] == pytest.approx(1.0)
    assert v1[-1]["gmem_bytes"] == nb["one_pass_bytes"]  # Q, K, V read once, O written once (fp16)


def test_v2_vs_v1_counts_split_k_exchange(quick):
    runs = quick("v2-vs-v1")["numbers"]["runs"]
    assert runs["v2"]["warp_split"] == ["m"] and "k" in runs["v1 (v2's tile)"]["warp_split"]
    assert runs["v2"]["cross_warp_smem_bytes"] == 0 < runs["v1 (v2's tile)"]["cross_warp_smem_bytes"]
    assert runs["v2"]["matmul_flops"] == runs["v1 (v2's tile)"]["matmul_flops"]


def test_causal_executed_flops_follow_the_diagonal(quick):
    for row in quick("causal-halves-work")["numbers"]["rows"]:
        t = row["blocks"]
        assert row["executed_flops_ratio"] == pytest.approx((t + 1) / (2 * t))
        assert 0.5 < row["time_ratio"] < 0.65


def test_gqa_hbm_bytes_fall_but_requests_do_not(quick):
    rows = quick("gqa-kv-bytes")["numbers"]["rows"]
    assert len({r["kv_gmem_requests_bytes"] for r in rows}) == 1
    for r in rows:
        assert r["kv_hbm_bytes_simulated"] == pytest.approx(r["kv_tensor_bytes"], rel=0.02)


def test_pipeline_beats_the_serial_model(quick):
    rows = quick("pipeline-overlap")["numbers"]["rows"]
    for r in rows:
        assert abs(r["error"]) <= 0.15
        assert r["time_s"] < r["serial_s"]


def test_decode_intensity_is_about_one(quick):
    nb = quick("decode-memory-bound")["numbers"]
    assert nb["rows"]["decode"]["intensity"] == pytest.approx(1.0, rel=0.05)  # 4 N d FLOPs per 2 N d x 2 B
    assert nb["rows"]["prefill"]["intensity"] > nb["ridge_flops_per_byte"]


def test_fp8_block_hadamard_beats_per_tensor(quick):
    nb = quick("fp8-scaling")["numbers"]
    ch = nb["rmse"]["outlier channels"]
    assert ch["fp8 per-block + Hadamard"] * 2 < ch["fp8 per-tensor"]
    assert ch["fp8 per-block"] < ch["fp8 per-tensor"]
    for row in nb["rmse"].values():
        assert row["fp16"] < min(v for k, v in row.items() if k != "fp16")


def test_fp8_quantise_round_trip():
    from flashsim.experiments.lab.fp8_scaling import quantise

    x = torch.randn(2, 128, 64, dtype=torch.float64)
    x[:, 5] *= 1e5  # one outlier row: under its per-tensor scale the other rows fall below e4m3's subnormals
    rest = x[:, 64:]
    err_tensor = (quantise(x, per_block=False)[:, 64:] - rest).pow(2).mean().sqrt()
    err_block = (quantise(x, per_block=True)[:, 64:] - rest).pow(2).mean().sqrt()
    assert err_block < err_tensor / 5
    # 3 mantissa bits: half a step is 1/16 of a normal value; below 2^-6 of the scale e4m3 is subnormal, with a
    # fixed step of 2^-9 scales (half of it the worst rounding)
    scale = rest.abs().amax((-1, -2), keepdim=True) / 448
    bound = rest.abs() / 16 + scale * 2**-10 + 1e-12
    assert ((quantise(x, per_block=True)[:, 64:] - rest).abs() <= bound).all()


# -- numerics ---------------------------------------------------------------------------------------------


def _direct(row, seqlen, d, seed, causal):
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(1, 1, seqlen, d, generator=gen, dtype=torch.float64) for _ in range(3))
    s = q[0, 0, row] @ k[0, 0].T * d**-0.5
    if causal:
        s[row + 1:] = -math.inf
    return s


@pytest.mark.parametrize(("row", "seqlen", "block_n", "causal"), [(0, 256, 64, False), (200, 300, 128, False),
                                                                   (130, 260, 32, True)])
def test_numerics_m_l_and_final_error(row, seqlen, block_n, causal):
    result = trace_row(row, seqlen=seqlen, headdim=64, block_n=block_n, seed=3, causal=causal)
    s = _direct(row, seqlen, 64, 3, causal)
    steps = result["steps"]
    visible_blocks = -(-(row + 1 if causal else seqlen) // block_n)
    assert len(steps) >= visible_blocks
    for st in steps:
        seen = s[: st["keys"][1]]
        m = float(seen.max())
        assert st["m"] == pytest.approx(m, rel=1e-5, abs=1e-5)
        assert st["l"] == pytest.approx(float((seen - m).exp().sum()), rel=1e-5)
    assert result["final_rel_error"] < 1e-5  # fp32 arithmetic of the interpreter
    assert result["final_rel_error_fp64_replay"] < 1e-13
    if len(steps) > 1:
        assert steps[0]["rel_error"] > 1e-3  # before the last block the row is not yet the softmax


def test_numerics_cli_json(capsys):
    assert cli.main(["numerics", "--row", "7", "--seqlen", "200", "--block-n", "50", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert [st["keys"] for st in result["steps"]] == [[0, 50], [50, 100], [100, 150], [150, 200]]


def test_numerics_table(capsys):
    assert cli.main(["numerics", "--row", "3", "--seqlen", "128"]) == 0
    out = capsys.readouterr().out
    assert "running max m" in out and "exact softmax row" in out


# -- command line -------------------------------------------------------------------------------------------


def test_default_out_dir(monkeypatch, tmp_path):
    from flashsim.experiments.lab.runner import PACKAGE_ROOT, default_out_dir

    monkeypatch.delenv("FLASHSIM_OUT", raising=False)
    monkeypatch.chdir(tmp_path)
    assert default_out_dir() == Path("flashsim-out") / "lab"
    monkeypatch.chdir(PACKAGE_ROOT / "experiments")
    assert default_out_dir() == PACKAGE_ROOT / "experiments" / "results" / "lab"


def test_lab_list(capsys):
    assert cli.main(["lab", "--list"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in NAMES)


def test_lab_run_json(capsys, tmp_path):
    assert cli.main(["lab", "run", "smem-trade", "--quick", "--json", "--out", str(tmp_path)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["name"] == "smem-trade" and result["holds"] is True
    assert sorted(p.name for p in tmp_path.iterdir()) == ["smem-trade.json", "smem-trade.png"]


def test_lab_run_prints_verdict(capsys, tmp_path):
    assert cli.main(["lab", "run", "io-complexity", "--quick", "--out", str(tmp_path)]) == 0
    assert "HOLDS" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [
    ["lab", "run", "no-such-claim", "--quick"],
    ["lab", "run"],
    ["lab", "run", "smem-trade", "--all"],
    ["numerics", "--row", "-1"],
    ["numerics", "--row", "10", "--seqlen", "10"],
    ["numerics", "--row", "1", "--headdim", "48"],
    ["numerics", "--row", "1", "--block-n", "0"],
])
def test_bad_input_is_one_line_exit_2(capsys, tmp_path, argv):
    assert cli.main([*argv, "--out", str(tmp_path)] if argv[0] == "lab" else argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("flashsim: error:") and err.count("\n") == 1


def test_v3_ablation_each_switch_off_is_slower(quick):
    rows = quick("v3-ablation")["numbers"]["rows"]
    on, off = rows[0], rows[1:]
    assert on["switch"] == "" and {r["switch"] for r in off} == {"warp_specialization", "pingpong", "intra_overlap"}
    for r in off:
        assert r["tflops"] < on["tflops"] and r["slowdown"] == pytest.approx(1 - r["tflops"] / on["tflops"])
        assert f"{r['label']} {-r['slowdown']:+.1%}" in quick("v3-ablation")["verdict"]


def test_fp8_prepass_is_a_fixed_cost_per_token(quick):
    """The pre-pass takes about the same time at every length of the 16k-token calls; the attention kernel grows."""
    rows = quick("fp8-end-to-end")["numbers"]["rows"]
    for d in (128, 256):
        rs = [r for r in rows if r["d"] == d]
        pre = [r["prepass_s"] for r in rs]
        assert max(pre) < 1.3 * min(pre)
        assert rs[-1]["attention_s"] > 4 * rs[0]["attention_s"]
