"""cuDNN's forward is simulated as it launches: the rule in simulator/sdpa.py against what the library ran on the
development shapes, and the comparison's use of it."""

import json
from pathlib import Path

import pytest
from flashsim.experiments.prediction_inputs import problem_args as _problem_args
from flashsim.experiments.prediction_inputs import rows_from
from flashsim.experiments.sdpa_launches import _kernel_events, cudnn_tile, summary
from flashsim.simulator.sdpa import cudnn_sm90_headdim, cudnn_sm90_tiling

RESULTS = Path(__file__).resolve().parents[1] / "experiments" / "results" / "h200"
NAME = "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x{d}_4x1x1_cga1x1x1_kernel0_0"


def test_head_dims_round_up_to_a_compiled_kernel():
    assert [cudnn_sm90_headdim(d) for d in (32, 64, 80, 96, 128, 192, 256)] == [64, 64, 128, 128, 128, 256, 256]
    assert cudnn_sm90_tiling(96) == cudnn_sm90_tiling(128) == {"block_m": 128, "block_n": 128, "warps": 12,
                                                               "stages": 2}  # fmt: skip
    # d256: one K and one V buffer, in the kernel's own loop (session 53's adoption)
    assert cudnn_sm90_tiling(256) == {"block_m": 128, "block_n": 128, "warps": 12, "stages": 1, "pipeline": "serial"}


def test_kernel_name_carries_the_tile():
    assert cudnn_tile(NAME.format(d=64)) == {"knob": 7, "block_m": 64, "block_n": 128, "headdim": 64,
                                             "warp_layout": [4, 1, 1]}  # fmt: skip
    assert cudnn_tile("void pytorch_flash::flash_fwd_kernel<...>") is None


@pytest.mark.parametrize("grid", ["dev-llm", "fa2"])
def test_rule_matches_what_cudnn_launched(grid):
    """Every cuDNN launch recorded on a development set: consumers of 64 rows whose count the block's threads
    give (one producer warpgroup besides them) make the rule's block_m, its key tile is the rule's block_n and
    its head dim the rule's; the grid never exceeds the SMs (a persistent kernel)."""
    doc = json.loads((RESULTS / f"sdpa-launches-{grid}.json").read_text())
    sms = doc["provenance"]["sm_count"]
    seen = 0
    for row in doc["rows"]:
        if row["impl"] != "sdpa-cudnn":
            continue
        d = row["config"]["headdim"]
        for k in row["kernels"]:
            tile = cudnn_tile(k["name"])
            if tile is None:
                continue
            seen += 1
            assert tile["headdim"] == cudnn_sm90_headdim(d)
            rule = cudnn_sm90_tiling(d)
            consumers = k["block"][0] // 128 - 1
            assert tile["block_m"] * consumers == rule["block_m"]
            assert tile["block_n"] == rule["block_n"]
            assert k["block"][0] == 32 * rule["warps"]
            assert k["grid"][0] <= sms
    assert seen >= 30


def test_cudnn_at_d256_holds_one_k_and_one_v_tile():
    """cuDNN's launch on all 12 shapes of the head-dim-256 development set (run 227): 128 query rows (two consumers
    of 64), 128 keys a tile and the SM's whole 227 KiB of shared memory, of which Q, one K and one V tile take
    192 KiB: a single buffer each, where v3's schedule keeps a ring of at least two K/V pairs (320 KiB at 128
    keys). So the rule gives d256 one stage, in the kernel's own loop, which turns K and V over apart."""
    doc = json.loads((RESULTS / "sdpa-launches-dev-d256.json").read_text())
    rows = [r for r in doc["rows"] if r["impl"] == "sdpa-cudnn"]
    assert len(rows) == 12
    for row in rows:
        (k,) = [k for k in row["kernels"] if cudnn_tile(k["name"])]
        tile = cudnn_tile(k["name"])
        assert (tile["block_m"] * (k["block"][0] // 128 - 1), tile["block_n"], tile["headdim"]) == (128, 128, 256)
        tile_bytes = 128 * 256 * 2
        assert 3 * tile_bytes <= k["dynamic_smem_bytes"] < (1 + 2 * 2) * tile_bytes
        assert k["grid"][0] <= doc["provenance"]["sm_count"]
    rule = cudnn_sm90_tiling(256)
    assert (rule["stages"], rule["pipeline"]) == (1, "serial")
    assert (128 + 2 * rule["block_n"] * rule["stages"]) * 256 * 2 <= k["dynamic_smem_bytes"]


def _record(impl, d):
    cfg = {"batch": 1, "heads": 8, "kv_heads": 8, "seqlen_q": 1024, "seqlen_k": 1024, "headdim": d,
           "causal": False, "dtype": "bf16"}  # fmt: skip
    cid = f"b1-h8-n1024-d{d}"
    return {"type": "time", "key": f"time|{impl}|{cid}", "impl": impl, "algo": "v3", "config": cfg,
            "config_id": cid, "status": "ok", "time_s": 1e-4, "kernel_time_s": 1e-4}  # fmt: skip


def test_comparison_runs_cudnn_rows_with_its_launch():
    rows = {(r["impl"], r["config"]["headdim"]): r for r in rows_from(
        [_record("sdpa-cudnn", 96), _record("sdpa-cudnn", 64), _record("v3", 96)])}  # fmt: skip
    d96 = rows["sdpa-cudnn", 96]
    assert d96["tiling"]["block_m"] == 128 and d96["sim_headdim"] == 128
    assert _problem_args(d96["config"], d96.get("sim_headdim"))["headdim"] == 128
    assert "sim_headdim" not in rows["sdpa-cudnn", 64] and rows["sdpa-cudnn", 64]["tiling"]["warps"] == 12
    # our own v3 keeps its problem and the tiles its records name
    assert "sim_headdim" not in rows["v3", 96] and _problem_args(rows["v3", 96]["config"])["headdim"] == 96


def test_trace_reading():
    trace = {"traceEvents": [
        {"cat": "kernel", "name": NAME.format(d=128), "dur": 12.5,
         "args": {"grid": [132, 1, 1], "block": [384, 1, 1], "shared memory": 232448, "registers per thread": 168}},
        {"cat": "cuda_runtime", "name": "cudaLaunchKernel"},
    ]}  # fmt: skip
    events = _kernel_events(trace["traceEvents"])
    assert len(events) == 1 and events[0]["block"] == [384, 1, 1] and events[0]["dynamic_smem_bytes"] == 232448
    text = summary([{"impl": "sdpa-cudnn", "kernels": events}, {"impl": "sdpa-cudnn", "kernels": events}])
    assert text.startswith("   2  sdpa-cudnn  block [384, 1, 1]  smem 232448  regs 168")


@pytest.mark.parametrize("grid", ["dev-llm", "fa2"])
def test_fa2_rule_matches_what_flash_launched(grid):
    """SDPA's flash backend on every development shape it took: the tiles in its kernel's traits and, where it
    split the K/V sequence, the split count in its grid's y, are fa2_tiling's on the h200."""
    import re

    from flashsim.algorithms.problem import Problem
    from flashsim.hw_profiles import load_profile
    from flashsim.simulator.sdpa import fa2_tiling

    profile = load_profile("h200")
    doc = json.loads((RESULTS / f"sdpa-launches-{grid}.json").read_text())
    checked = split = 0
    for row in doc["rows"]:
        if row["impl"] != "sdpa-flash" or row.get("error"):
            continue
        main = [k for k in row["kernels"] if re.search(r"flash_fwd_(splitkv_)?kernel<", k["name"])]
        assert len(main) == 1
        traits = re.search(r"Flash_fwd_kernel_traits<(\d+), (\d+), (\d+), (\d+),", main[0]["name"])
        d, bm, bn, warps = (int(x) for x in traits.groups())
        rule = fa2_tiling(Problem(**row["config"]), profile)
        splits = main[0]["grid"][1] if "splitkv" in main[0]["name"] else 1
        assert (bm, bn, warps, splits) == (rule["block_m"], rule["block_n"], rule["warps"], rule["splits"])
        assert d == -(-row["config"]["headdim"] // 32) * 32
        checked += 1
        split += splits > 1
    assert checked >= 30 and (split >= 1 if grid == "dev-llm" else True)


def test_sdpa_launches_refuses_bad_input_in_one_line(capsys):
    from flashsim.experiments.sdpa_launches import main

    assert main(["--grid", "nope"]) == 2
    assert main(["--impls", "sdpa-x"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "unknown grid 'nope'" in err[0] and "unknown implementation 'sdpa-x'" in err[1]
