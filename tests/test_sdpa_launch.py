"""`flashsim simulate --sdpa`: PyTorch SDPA's backends predicted from the command line exactly as validation
predicts their measurements (the same launch rule, the same call work)."""

from __future__ import annotations

import json

import pytest
from flashsim import cli
from flashsim.experiments.prediction_inputs import ran_tiling, simulate_job
from flashsim.experiments.validate_compare import add_call_work
from flashsim.hw_profiles import load_profile

pytest.importorskip("simpy")

H200 = load_profile("h200")


def _validation(impl: str, algo: str, config: dict) -> dict:
    """What validation predicts for a measurement of `impl` on `config` (prediction_inputs + the call work)."""
    rec = {"impl": impl, "algo": algo, "config": config, "tiling": None}
    tiling = ran_tiling(rec)
    problem = dict(config)
    if impl == "sdpa-cudnn":
        problem["headdim"] = {96: 128}.get(config["headdim"], config["headdim"])
    row = {"impl": impl, "algo": algo, **simulate_job((algo, problem, tiling, "h200", [], {}, False, True))}
    add_call_work([row], H200)
    return row


def _cli(capsys, backend: str, config: dict) -> dict:
    argv = ["simulate", "--hw", "h200", "--sdpa", backend, "--full", "--json", "--batch", str(config["batch"]),
            "--heads", str(config["heads"]), "--seqlen", str(config["seqlen_q"]), "--headdim", str(config["headdim"])]
    assert cli.main(argv + (["--causal"] if config["causal"] else [])) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(("backend", "impl", "algo", "config"), [
    ("cudnn", "sdpa-cudnn", "v3", {"batch": 2, "heads": 12, "seqlen_q": 128, "seqlen_k": 128, "headdim": 96,
                                   "causal": False, "dtype": "bf16"}),
    ("flash", "sdpa-flash", "v2", {"batch": 1, "heads": 8, "seqlen_q": 1024, "seqlen_k": 1024, "headdim": 128,
                                   "causal": True, "dtype": "bf16"}),
])
def test_the_command_line_predicts_an_sdpa_call_as_validation_does(capsys, backend, impl, algo, config) -> None:
    got = _cli(capsys, backend, config)
    want = _validation(impl, algo, config)
    assert got["kernel_time_s"] == want["predicted"]["kernel_time_s"]
    assert got["problem"]["headdim"] == config["headdim"]  # the problem asked, whatever head dim the kernel runs
    assert got["sim"]["sdpa"]["call"] == want.get("call", {})
    if backend == "cudnn":
        assert got["sim"]["sdpa"]["kernel_headdim"] == 128 and got["sim"]["sdpa"]["call"]["memset_s"] > 0
        assert got["tiling"]["block_m"] == 128 and got["tiling"]["block_n"] == 128
    else:
        assert got["tiling"]["exp2"] == "exp2f" and "call" not in want


@pytest.mark.parametrize(("args", "kernel", "steps"), [
    (["--seqlen", "1024", "--headdim", "128", "--causal"], "even", 2),  # 128 x 64 tiles
    (["--seqlen", "1000", "--headdim", "128", "--causal"], "odd", 3),
    (["--seqlen", "1024", "--headdim", "256"], "odd", None),  # over d128 FA2 has only the odd kernel
])
def test_the_answer_says_which_fa2_kernel_runs(capsys, args, kernel, steps) -> None:
    argv = ["simulate", "--hw", "h200", "--sdpa", "flash", "--batch", "4", "--heads", "16", *args]  # no split-KV
    assert cli.main([*argv, "--json"]) == 0
    launch = json.loads(capsys.readouterr().out)["sim"]["sdpa"]
    assert launch["fa2_kernel"] == kernel and launch.get("masking_steps") == steps
    assert cli.main(argv) == 0
    note = capsys.readouterr().out.split("SDPA flash:")[1]
    assert ("odd-length kernel" in note) == (kernel == "odd") and (f"last {steps} K/V steps" in note) == bool(steps)


@pytest.mark.parametrize("extra", [["--algo", "v1"], ["--block-m", "64"], ["--pass", "bwd"], ["--dtype", "fp32"]])
def test_sdpa_refuses_what_the_backend_does_not_take_in_one_line(capsys, extra) -> None:
    assert cli.main(["simulate", "--sdpa", "flash", "--seqlen", "256", *extra]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "flashsim: error:" in err


def test_cudnn_is_its_hopper_kernel(capsys) -> None:
    assert cli.main(["simulate", "--sdpa", "cudnn", "--hw", "a100", "--seqlen", "256"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Hopper" in err and "a100" in err


def test_cudnn_d256_runs_the_kernels_tiles_in_its_own_loop(capsys) -> None:
    base = ["simulate", "--sdpa", "cudnn", "--hw", "h200", "--batch", "1", "--heads", "2", "--seqlen", "512"]
    assert cli.main([*base, "--headdim", "256"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "on the kernel's tiles in the kernel's own loop" in out and "stand" not in out
    assert cli.main([*base, "--headdim", "256", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["tiling"]["pipeline"] == "serial" and doc["tiling"]["stages"] == 1
    assert "stand_in_tiles" not in doc["sim"]["sdpa"]
    assert cli.main([*base, "--headdim", "128"]) == 0
    out = capsys.readouterr().out
    assert "on the kernel's tiles" in out and "own loop" not in out


def test_without_sdpa_simulate_still_runs_v2_by_default(capsys) -> None:
    assert cli.main(["simulate", "--seqlen", "256", "--batch", "1", "--heads", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["algo"] == "v2" and "sdpa" not in out["sim"]


def test_compare_puts_the_sdpa_backends_beside_the_algorithms(capsys, tmp_path) -> None:
    shape = ["--hw", "h200", "--batch", "1", "--heads", "4", "--seqlen", "512", "--headdim", "128", "--json"]
    assert cli.main(["compare", "--algos", "v3", "--sdpa", "cudnn", "flash", "--no-cache", "--jobs", "1",
                     "--out", str(tmp_path), *shape]) == 0
    rows = {r["algo"]: r for r in json.loads(capsys.readouterr().out)["results"]}
    assert set(rows) == {"v3", "sdpa-cudnn", "sdpa-flash"}
    assert cli.main(["simulate", "--sdpa", "cudnn", *shape]) == 0
    alone = json.loads(capsys.readouterr().out)
    assert rows["sdpa-cudnn"]["kernel_time_s"] == alone["kernel_time_s"]
    assert rows["sdpa-cudnn"]["sim"]["sdpa"]["call"] == alone["sim"]["sdpa"]["call"]
    assert cli.main(["compare", "--algos", "v3", "--sdpa", "flash", "--pass", "bwd", "--out", str(tmp_path),
                     *shape]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--sdpa compares forward calls" in err


def test_sweep_adds_the_sdpa_backends_on_the_same_grid(capsys, tmp_path) -> None:
    assert cli.main(["sweep", "--hw", "h200", "--algos", "v2", "--sdpa", "flash", "--seqlens", "512",
                     "--headdims", "64", "--causal", "on", "--batch", "1", "--heads", "4", "--no-cache", "--jobs",
                     "1", "--json", "--out", str(tmp_path)]) == 0
    rows = {r["algo"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    assert set(rows) == {"v2", "sdpa-flash"}
    assert (rows["sdpa-flash"]["seqlen"], rows["sdpa-flash"]["causal"]) == (512, True)
    # four query tiles on 132 SMs: FA2's split rule splits the K/V sequence, which our v2 does not
    assert cli.main(["simulate", "--hw", "h200", "--sdpa", "flash", "--seqlen", "512", "--headdim", "64", "--causal",
                     "--batch", "1", "--heads", "4", "--json"]) == 0
    alone = json.loads(capsys.readouterr().out)
    assert rows["sdpa-flash"]["time_s"] == alone["time_s"] and alone["tiling"]["splits"] > 1
