"""The v2-bwd schedule against the kernel it models (kernels/v2_bwd.cu) and the development comparison."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from flashsim.algorithms import Problem, Tiling
from flashsim.algorithms.counting import count_io
from flashsim.algorithms.ir import Gemm, StoreShared, SyncThreads
from flashsim.algorithms.schedules import build
from flashsim.algorithms.schedules.v2_bwd import _reads, warp_grids
from flashsim.algorithms.tiling import default_tiling
from flashsim.experiments import backward_dev_compare as dev
from flashsim.hw_profiles import load_profile

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "experiments/results/h200/backward/backward.json"
REPORT = ROOT / "experiments/results/h200/backward-dev-compare.json"
H200 = load_profile("h200")


def _main_program(p: Problem, t: Tiling, cta=(0, 0, 0)) -> list:
    kernel = next(k for k in build("v2-bwd", p, t).kernels if k.name == "flash_bwd_v2")
    return list(kernel.roles[0].program(cta))


def _kernel_step_source() -> str:
    """The body of the kernel's loop over Q blocks, from its source."""
    src = (ROOT / "kernels/v2_bwd.cu").read_text()
    start = src.index("for (int mb = first; mb < n_q_blocks; ++mb)")
    return src[start:src.index("// Epilogue", start)]


def test_a_step_has_the_kernels_barriers():
    """Each Q block costs the kernel's __syncthreads (Q_i landed; P and dS complete; dO_i free)."""
    p, t = Problem(1, 1, 512, 128, dtype="bf16"), Tiling(64, 128, 8, 2)
    steps = 512 // 64
    barriers = sum(isinstance(op, SyncThreads) for op in _main_program(p, t))
    assert barriers == steps * _kernel_step_source().count("__syncthreads()")


@pytest.mark.parametrize("d, bm, bn", [(64, 128, 128), (128, 64, 128)])
def test_p_and_ds_pass_through_shared_memory(d, bm, bn):
    """The kernel writes P and dS (16-bit) to shared memory once a step; dV and dK read them transposed and dQ
    reads dS, each once per warp column of its warp grid, as ldmatrix fragments."""
    p, t = Problem(2, 3, 1024, d, dtype="bf16"), Tiling(bm, bn, 8, 2)
    steps = 2 * 3 * (1024 // bn) * (1024 // bm)
    io = count_io(build("v2-bwd", p, t))
    tile = bm * bn * 2
    assert io.smem_write["P"] == io.smem_write["dS"] == steps * tile
    _, (kv_a, _), (dq_a, _) = (_reads(g) for g in warp_grids(d, t))
    assert io.smem_read["P"] == kv_a * steps * tile
    assert io.smem_read["dS"] == (kv_a + dq_a) * steps * tile


def test_products_read_their_staged_operands_from_shared_memory():
    ops = _main_program(Problem(1, 1, 256, 128, dtype="bf16"), Tiling(64, 128, 8, 2))
    staged = {op.dst for op in ops if isinstance(op, StoreShared)}
    a_of = {op.dst: (op.a, op.a_level) for op in ops if isinstance(op, Gemm)}
    assert staged == {"sP", "sdS"}
    assert a_of["dV"] == ("sP", "smem") and a_of["dK"] == ("sdS", "smem") and a_of["dQ"] == ("sdS", "smem")


def test_kernel_tile_names_are_read():
    fa2 = ("void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<128, 64, 128, "
           "8, 2, 4, 2, false, true, cutlass::bfloat16_t")
    assert dev.ran_tiling({"kernels": ["x_dot_do_o", fa2]}) == {"block_m": 64, "block_n": 128, "warps": 8,
                                                                "stages": 1, "exp2": "exp2f"}
    ours = "flashsim_v2_bwd_d64_bf16_128x128w8s2_bwd"
    assert dev.ran_tiling({"kernels": [ours]}) == {"block_m": 128, "block_n": 128, "warps": 8, "stages": 2}
    with pytest.raises(ValueError):
        dev.ran_tiling({"kernels": ["elementwise_kernel"]})


def test_the_schedules_tiles_are_the_kernels():
    """Where a measurement names no tiles the validator simulates the record's mapper: on the H200 it picks
    what our kernels (their family's tiling_for) and FA2's (their kernel names) ran in the benchmark."""
    from flashsim.kernels import registry

    family = registry.family("v2-bwd")
    for rec in json.loads(BENCH.read_text())["records"]:
        if rec["impl"] not in dev.IMPLS:
            continue
        d = rec["headdim"]
        mapped = default_tiling("v2-bwd", Problem(1, 1, 128, d, dtype="bf16"), H200)
        ran = {k: v for k, v in dev.ran_tiling(rec).items() if k != "exp2"}  # the tiles, not FA2's exponential
        assert {k: mapped.as_dict()[k] for k in ran} == ran
        if rec["impl"] == "ours":
            assert family.tiling_for(d, None) == mapped


def test_committed_dev_comparison_recomputes():
    """The committed table covers every timed record of the benchmark and its MAPE is its rows'."""
    report = json.loads(REPORT.read_text())
    records = [r for r in json.loads(BENCH.read_text())["records"] if r["impl"] in dev.IMPLS and r["status"] == "ok"]
    assert len(report["rows"]) == len(records)
    for impl, s in report["summary"].items():
        errs = [r["predicted_s"] / r["measured_s"] - 1 for r in report["rows"] if r["impl"] == impl]
        assert s["n"] == len(errs) and s["mape"] == pytest.approx(sum(map(abs, errs)) / len(errs))
    assert re.search(r"MAPE", (REPORT.with_suffix(".md")).read_text())


@pytest.mark.parametrize("d, bm, chain", [(64, 128, 16), (128, 64, 32)])
def test_each_dk_store_waits_for_the_one_before(d, bm, chain):
    """The kernel stores dK and dV straight from the accumulators, a bf16 pair per store, and ptxas packs every
    dK pair into the same register: under Nsight Compute each pack waits ~300 cycles (long scoreboard) for the
    store before it to let go of that register, and the epilogue takes about (dK stores per thread) x an L2
    round trip. The model's epilogue lasts at least that."""
    from flashsim.algorithms.ir import Store
    from flashsim.simulator import simulate

    src = (ROOT / "kernels/v2_bwd.cu").read_text()
    start = src.index("// Epilogue")
    epilogue = src[start:src.index("// D = rowsum", start)]
    assert "Elem<T>::pack(k0, k1)" in epilogue and "acc_dk[mt][nt][2 * r]" in epilogue
    p, t = Problem(1, 1, 512, d, dtype="bf16"), Tiling(bm, 128, 8, 2)
    stores = {op.src: op for op in _main_program(p, t) if isinstance(op, Store)}
    assert stores["dK"].chained == chain == 128 * d // (2 * 256) and stores["dV"].chained == 0
    trace: list = []
    simulate("v2-bwd", p, H200, t, sms=None, trace=trace)
    start = {name: t0 for track, name, t0, _ in trace if track == "SM0.0 warps"}
    assert start["store dV"] - start["store dK"] >= chain * H200.l2_hit_latency_cycles


@pytest.mark.parametrize("d, bm", [(64, 128), (128, 64)])
def test_dq_reductions_wait_for_one_another_by_row_slice(d, bm):
    """Each thread adds its dQ fragment with float2 reductions, one address per 8-row slice of its warp's rows
    (4 slices at both tiles), and ptxas reuses the address registers from slice to slice: under Nsight Compute
    each slice's address arithmetic waits ~270 cycles (long scoreboard) for the slice before it, four times a
    step. The model holds the warps that many L2 round trips before the next step."""
    from flashsim.algorithms.ir import AtomicAdd
    from flashsim.simulator import simulate

    step = _kernel_step_source()
    assert "float* dst = dq_accum + (int64_t)row * D" in step and "for (int r = 0; r < 2; ++r)" in step
    p, t = Problem(1, 1, 256, d, dtype="bf16"), Tiling(bm, 128, 8, 2)
    reds = [op for op in _main_program(p, t) if isinstance(op, AtomicAdd)]
    rows = int(warp_grids(d, t)[2].split("x")[0])
    assert reds and all(op.chained == bm // rows // 8 == 4 for op in reds)
    trace: list = []
    simulate("v2-bwd", p, H200, t, sms=None, trace=trace)
    ops = [(name, t0, t1) for track, name, t0, t1 in trace if track == "SM0.0 warps"]
    dq_end = next(t1 for name, _, t1 in ops if name == "gemm dQ")
    next_s = [t0 for name, t0, _ in ops if name == "gemm S"][1]
    assert next_s - dq_end >= 4 * H200.l2_hit_latency_cycles


def test_dev_comparison_refuses_a_missing_benchmark_in_one_line(tmp_path, capsys):
    assert dev.main([str(tmp_path / "none.json"), str(tmp_path / "out" / "cmp")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "none.json" in err
    assert not (tmp_path / "out").exists()
