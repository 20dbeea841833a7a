"""IO accounting: the counting interpreter against the closed forms, its sharing rules, and `flashsim io`."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from flashsim import cli
from flashsim.algorithms import Problem, Tiling
from flashsim.algorithms.closed_form import closed_form
from flashsim.algorithms.counting import count_io
from flashsim.algorithms.ir import RMEM, SMEM, Gemm, GTile, Kernel, Load, Role, Schedule, Store
from flashsim.algorithms.problem import HEADDIMS
from flashsim.algorithms.schedules import build
from flashsim.algorithms.schedules.v3_fp8 import build as build_fp8
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[1]
ALGOS = ("standard", "v1", "v2", "v3", "v3-fp8")


def tiling_for(algo: str):
    if algo in ("v3", "v3-fp8"):
        return st.builds(lambda bm, bn, s: Tiling(bm, bn, 4 * (bm // 64 + 1), s), st.sampled_from([64, 128, 192]),
                         st.sampled_from([16, 48, 64, 80, 128, 176]), st.integers(2, 3))
    blocks = st.sampled_from([16, 32, 48, 64, 128])
    return st.builds(Tiling, blocks, blocks, st.sampled_from([1, 2, 4, 8]), st.integers(1, 2))


@st.composite
def problems(draw, algo: str):
    kv_heads = draw(st.integers(1, 3))
    nq = draw(st.integers(1, 700))
    return Problem(
        draw(st.integers(1, 3)),
        kv_heads * draw(st.sampled_from([1, 2, 4])),
        nq,
        draw(st.sampled_from(HEADDIMS)),
        seqlen_k=draw(st.one_of(st.just(nq), st.integers(1, 700))),
        kv_heads=kv_heads,
        causal=draw(st.booleans()),
        dtype="fp8" if algo == "v3-fp8" else draw(st.sampled_from(["fp32", "fp16", "bf16"])),
    )


@pytest.mark.parametrize("algo", ALGOS)
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_counts_equal_closed_forms(algo, data):
    """Every term, per kernel and per tensor: ragged N, causal, Nq != Nk both ways, GQA/MQA, all dtypes."""
    p, t = data.draw(problems(algo)), data.draw(tiling_for(algo))
    hadamard = data.draw(st.booleans())
    schedule = build_fp8(p, t, hadamard=hadamard) if algo == "v3-fp8" else build(algo, p, t)
    assert count_io(schedule).as_dict() == closed_form(algo, p, t, hadamard).as_dict()


@pytest.mark.parametrize("algo", ["v1", "v2", "v3"])
def test_flash_tensor_flops_are_the_papers_flops(algo):
    """Without masking or ragged tiles the GEMMs do exactly 4 B H Nq Nk d FLOPs."""
    p = Problem(2, 4, 512, 64, seqlen_k=256, kv_heads=2, dtype="bf16")
    t = Tiling(128, 64, 12, 2) if algo == "v3" else Tiling(64, 64, 4, 2)
    assert sum(count_io(build(algo, p, t)).flops.values()) == p.flops()


def test_v2_reads_q_once_and_kv_once_per_q_block():
    p = Problem(2, 3, 1000, 128, dtype="fp16")
    io = count_io(build("v2", p, Tiling(128, 64, 4, 2)))
    nd = 2 * 3 * 1000 * 128 * 2
    assert io.gmem_read == {"Q": nd, "K": 8 * nd, "V": 8 * nd}  # 8 = ceil(1000 / 128) q-blocks
    assert io.gmem_write == {"O": nd, "LSE": 2 * 3 * 1000 * 4}
    assert io.gmem_bytes == nd * 18 + 2 * 3 * 1000 * 4


def test_fp8_prepass_is_its_own_memory_bound_kernel():
    """v3-fp8's first launch reads Q, K, V once in bf16 and writes e4m3 Q, K, V^T padded to whole key
    blocks and one fp32 scale per block; the attention kernel reads only the e4m3 copies and scales."""
    p = Problem(2, 4, 1000, 128, kv_heads=2, dtype="fp8")
    t = Tiling(128, 224, 12, 2)
    prepass, attn = count_io(build_fp8(p, t)).kernels
    assert prepass.name == "fp8_prepass"
    q, kv = 2 * 4 * 1000 * 128, 2 * 2 * 1000 * 128
    assert dict(prepass.gmem_read) == {"Q": 2 * q, "K": 2 * kv, "V": 2 * kv}
    padded = 2 * 2 * 5 * 224 * 128  # ceil(1000 / 224) = 5 key blocks of 224
    assert dict(prepass.gmem_write) == {"Qq": q, "Kq": kv, "Vq": padded, "Qscale": 2 * 4 * 8 * 4,
                                        "Kscale": 2 * 2 * 5 * 4, "Vscale": 2 * 2 * 5 * 4}
    assert not prepass.flops and {"Q", "K", "V"}.isdisjoint(attn.gmem_read)


def test_standard_materialises_s_and_p():
    p = Problem(1, 2, 300, 64, dtype="bf16")
    io = count_io(build("standard", p, Tiling(128, 128, 4, 2)))
    nn = 2 * 300 * 300 * 2
    assert io.gmem_write["S"] == io.gmem_write["P"] == nn
    assert io.gmem_read["S"] == 2 * nn  # the softmax kernel reads each row twice: stats, then P
    assert io.gmem_read["P"] == nn  # d = 64 fits one 128-wide output tile: P is read once


def _one_gemm(instr: str, split: str, a_level: str = SMEM) -> Schedule:
    """A one-CTA kernel: load A (32 x 16) and B (16 x 8) as fp16, multiply them with 4 warps."""
    def program(cta):
        yield Load(GTile("Q", 0, 0, 0, 32, 0, 16, 2), "a", a_level)
        yield Load(GTile("K", 0, 0, 0, 16, 0, 8, 2), "b", SMEM)
        yield Gemm("c", "a", "b", 32, 8, 16, a_level, SMEM, instr, "fp16", 4, split=split)
        yield Store("c", GTile("O", 0, 0, 0, 32, 0, 8, 4), RMEM)

    return Schedule("toy", None, None, (Kernel("toy", [(0, 0)], (Role("w", 4, program),), 0, 0),))


@pytest.mark.parametrize("instr, split, a_reads, b_reads", [
    ("mma_sync", "m", 1, 4),  # warps own rows: each reads its rows of A and all of B
    ("mma_sync", "n", 4, 1),
    ("mma_sync", "k", 1, 1),
    ("wgmma", "m", 1, 1),  # one warpgroup-wide instruction reads each operand once
])
def test_smem_operand_reads_follow_the_warp_split(instr, split, a_reads, b_reads):
    io = count_io(_one_gemm(instr, split))
    assert io.smem_read == {"Q": a_reads * 32 * 16 * 2, "K": b_reads * 16 * 8 * 2}
    assert io.smem_write == {"Q": 32 * 16 * 2, "K": 16 * 8 * 2}
    assert io.gmem_read == {"Q": 1024, "K": 256} and io.gmem_write == {"O": 32 * 8 * 4}
    assert io.flops == {f"{instr}/fp16": 2 * 32 * 8 * 16}


def test_register_operands_are_not_smem_reads():
    io = count_io(_one_gemm("mma_sync", "m", a_level=RMEM))
    assert io.smem_read == {"K": 4 * 16 * 8 * 2} and io.smem_write == {"K": 256}


def test_classes_multiply_one_representative():
    small = count_io(build("v2", Problem(1, 1, 777, 64, causal=True), Tiling(128, 64, 4, 2)))
    big = count_io(build("v2", Problem(3, 5, 777, 64, causal=True), Tiling(128, 64, 4, 2)))
    assert big.as_dict()["gmem_read"] == {k: 15 * v for k, v in small.gmem_read.items()}
    assert big.kernels[0].ctas == 15 * small.kernels[0].ctas
    assert json.loads(json.dumps(big.as_dict())) == big.as_dict()


def test_counting_a_million_tiles_takes_seconds():
    p = Problem(16, 16, 8192, 128, causal=True)
    schedule = build("standard", p, Tiling(128, 128, 4, 2))
    assert sum(len(k.ctas) for k in schedule.kernels) > 10**6
    start = time.perf_counter()
    io = count_io(schedule)
    assert time.perf_counter() - start < 20
    assert io.gmem_write["S"] == 16 * 16 * 8192 * 8192 * 2


# -- flashsim io ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def io_run(tmp_path_factory):
    """`flashsim io --json` through the real entry point, once for the module."""
    plots = tmp_path_factory.mktemp("plots")
    exe = shutil.which("flashsim")
    cmd = [exe] if exe else [sys.executable, "-m", "flashsim.cli"]
    start = time.perf_counter()
    done = subprocess.run([*cmd, "io", "--json", "--plot-dir", str(plots)], cwd=ROOT, capture_output=True,
                          text=True)
    return done, plots, time.perf_counter() - start


def test_io_json_is_one_object(io_run):
    done, plots, seconds = io_run
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("\n") == 1
    result = json.loads(done.stdout)
    assert set(result["fits"]) == {"standard", "v1", "v2"}
    assert all(set(f) == {"N", "d", "M"} for f in result["fits"].values())
    point = result["points"][0]
    assert {"algo", "N", "d", "M_bytes", "hbm_bytes"} <= set(point)
    assert {p["algo"] for p in result["points"]} == {"standard", "v1", "v2"}
    assert sorted(Path(x).name for x in result["plots"]) == ["io_complexity.png", "io_complexity.svg"]
    assert all((plots / name).stat().st_size > 0 for name in ("io_complexity.png", "io_complexity.svg"))
    assert seconds < 60  # it runs in CI


def test_io_fits_theorem_2(io_run):
    fits = json.loads(io_run[0].stdout)["fits"]
    for algo in ("v1", "v2"):  # Theta(N^2 d^2 / M)
        assert fits[algo]["N"] == pytest.approx(2, abs=0.1)
        assert fits[algo]["d"] == pytest.approx(2, abs=0.1)
        assert fits[algo]["M"] == pytest.approx(-1, abs=0.1)
    assert fits["standard"]["N"] == pytest.approx(2, abs=0.1)  # Theta(N d + N^2)
    assert fits["standard"]["M"] == pytest.approx(0, abs=0.01)
    assert 0 <= fits["standard"]["d"] <= 1


def test_io_past_nd_flattens(io_run):
    """Once M >= N d the flash traffic stops falling with M: a single pass over Q, K, V and O."""
    sat = json.loads(io_run[0].stdout)["saturation"]
    for algo in ("v1", "v2"):
        assert sat[algo]["M_exponent_past_4Nd"] == pytest.approx(0, abs=0.01)
        per_nd = sat[algo]["bytes_over_Nd"]
        assert per_nd == sorted(per_nd, reverse=True) and per_nd[-1] < 9  # ~4 tensors x 2 bytes


def test_io_table(capsys, tmp_path):
    assert cli.main(["io", "--no-plot", "--hw", "a100"]) == 0
    out = capsys.readouterr().out
    assert "Fitted exponents" in out and "a100" in out


@pytest.mark.parametrize("argv", [
    ["io", "--dtype", "fp9", "--no-plot"],
    ["io", "--dtype", "fp8", "--no-plot"],
    ["io", "--hw", "no-such-gpu", "--no-plot"],
    ["io", "--set", "smem_per_block_max_bytes=100", "--no-plot"],
    ["io", "--set", "smem_per_block_max_bytes=-5", "--no-plot"],
    ["io", "--pass", "bwd", "--dtype", "fp32", "--no-plot"],  # FA2's and FA3's backward take 16-bit inputs
])
def test_io_bad_input_is_one_line_exit_2(capsys, argv):
    assert cli.main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1 and "Traceback" not in captured.err


@pytest.fixture(scope="module", params=["bwd", "fwd+bwd"])
def io_pass(request):
    from flashsim.experiments.io_complexity import run
    from flashsim.hw_profiles import load_profile

    return run(load_profile("h200"), "fp16", progress=False, pass_=request.param)


def test_io_fits_the_backward(io_pass):
    """FlashAttention's backward (and a training step's two passes) move Theta(N^2 d^2 / M) bytes like its
    forward: Q, dO, LSE and D stream past every K/V block and dQ is added to once per K/V block. Standard
    attention's backward reads and writes P, dP and dS: Theta(N d + N^2), whatever M is. The exponents fall a
    little short of 2, 2, -1 where the Theta(N d) terms (K, V, dK, dV, the fp32 dQ's zeroing and conversion)
    are not yet negligible at Tc = 16..48 passes."""
    fits = io_pass["fits"]
    flash = [a for a in fits if not a.startswith("standard")]
    assert len(flash) == 2 and len(fits) == 3
    for algo in flash:
        assert fits[algo]["N"] == pytest.approx(2, abs=0.12)
        assert fits[algo]["d"] == pytest.approx(2, abs=0.12)
        assert fits[algo]["M"] == pytest.approx(-1, abs=0.12)
    standard = next(a for a in fits if a.startswith("standard"))
    assert fits[standard]["N"] == pytest.approx(2, abs=0.1)
    assert fits[standard]["M"] == pytest.approx(0, abs=0.01)
    assert 0 <= fits[standard]["d"] <= 1


def test_io_backward_past_nd_flattens(io_pass):
    """Past M = N d one K/V block holds every key: each tensor crosses global memory a fixed number of times."""
    for s in io_pass["saturation"].values():
        assert s["M_exponent_past_4Nd"] == pytest.approx(0, abs=0.01)
        assert s["bytes_over_Nd"] == sorted(s["bytes_over_Nd"], reverse=True)
        assert s["bytes_over_Nd"][0] > 4 * s["bytes_over_Nd"][-1]


def test_io_backward_points_sum_the_passes():
    """A fwd+bwd point is its forward's and its backward's bytes, each counted at that pass's tiles."""
    from flashsim.experiments.io_complexity import measure
    from flashsim.hw_profiles import load_profile

    h200 = load_profile("h200")
    args = ("N", 1024, 64, 4 * 64 * 64 * 2, h200, "fp16")
    both = measure(args[0], "v2 fwd+bwd", *args[1:]).hbm_bytes
    assert both == measure(args[0], "v2", *args[1:]).hbm_bytes + measure(args[0], "v2-bwd", *args[1:]).hbm_bytes


@pytest.mark.parametrize("splits", [2, 5])
@pytest.mark.parametrize("causal", [False, True])
def test_v1_splits_counts_equal_closed_form(splits, causal):
    """V1 with several thread blocks per (batch, head): each streams all of K and V."""
    p = Problem(2, 4, 300, 64, seqlen_k=260, kv_heads=2, causal=causal)
    t = Tiling(32, 64, 4, 1, splits=splits)
    counted, closed = count_io(build("v1", p, t)), closed_form("v1", p, t)
    assert counted.as_dict() == closed.as_dict()
    one = count_io(build("v1", p, Tiling(32, 64, 4, 1)))
    assert counted.gmem_read["K"] == splits * one.gmem_read["K"]
    assert counted.gmem_read["Q"] == one.gmem_read["Q"]
