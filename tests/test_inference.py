"""Inference schedules: split-KV (Flash-Decoding) with its combine kernel, decode with the query heads of a K/V
head packed in one tile, a paged K/V cache and variable-length batches. Each computes attention (against an
fp64 reference), counts bytes as its closed forms say, and the decode is limited by HBM in the simulator."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
import torch
from flashsim import cli
from flashsim.algorithms import Problem, Tiling, paged
from flashsim.algorithms.closed_form import closed_form
from flashsim.algorithms.counting import count_io
from flashsim.algorithms.ir import Load
from flashsim.algorithms.numeric import run_numeric
from flashsim.algorithms.schedules import build
from flashsim.algorithms.splitkv import COMBINE_KERNEL, splits_heuristic
from flashsim.algorithms.tiling import resolve_tiling
from flashsim.errors import FlashsimError
from flashsim.hw_profiles import load_profile
from flashsim.simulator.api import simulate
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

SMALL = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def reference(p: Problem, q, k, v) -> list[torch.Tensor]:
    """fp64 attention per sequence (its own lengths; causal bottom-right), K/V heads shared by groups."""
    out = []
    for b in range(p.batch):
        nq, nk = p.q_len(b), p.k_len(b)
        kk = k[b, :, :nk].repeat_interleave(p.group, 0).double()
        vv = v[b, :, :nk].repeat_interleave(p.group, 0).double()
        s = q[b, :, :nq].double() @ kk.transpose(-1, -2) * p.scale
        if p.causal:
            s = s.masked_fill(torch.arange(nk)[None] > torch.arange(nq)[:, None] + nk - nq, -math.inf)
        out.append(torch.nan_to_num(torch.softmax(s, -1), nan=0.0) @ vv)
    return out


def run(algo: str, p: Problem, t: Tiling, seed: int = 0) -> tuple[dict, list[torch.Tensor]]:
    """The numeric interpreter's tensors (K and V laid out in shuffled pages when the problem is paged)
    and the reference."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(p.batch, p.heads, p.seqlen_q, p.headdim, generator=g)
    k, v = (torch.randn(p.batch, p.kv_heads, p.seqlen_k, p.headdim, generator=g) for _ in range(2))
    inputs = {"Q": q, "K": k, "V": v}
    if p.page_size:
        table = paged.page_table(p)
        assert sorted(x for row in table for x in row) != [x for row in table for x in row]  # really shuffled
        inputs.update(K=paged.to_pages(p, k, table), V=paged.to_pages(p, v, table))
    return run_numeric(build(algo, p, t), inputs), reference(p, q, k, v)


def max_error(p: Problem, out: dict, ref: list[torch.Tensor]) -> float:
    return max((out["O"][b, :, :p.q_len(b)].double() - ref[b]).abs().max().item() for b in range(p.batch))


# -- split-KV ---------------------------------------------------------------------------------------------


@SMALL
@given(nq=st.integers(1, 70), nk=st.integers(1, 300), splits=st.integers(2, 7), causal=st.booleans(),
       group=st.sampled_from([1, 2]), algo=st.sampled_from(["v2", "v3"]))
def test_split_kv_equals_reference(nq, nk, splits, causal, group, algo):
    """Each split normalises its own range; the combine merges the partials exactly, including splits that see
    no key (causal rows, or more splits than blocks)."""
    v2 = algo == "v2"
    p = Problem(2, 2 * group, nq, 32, seqlen_k=nk, kv_heads=2, causal=causal, dtype="fp32" if v2 else "fp16")
    out, ref = run(algo, p, Tiling(16, 32, 2, splits=splits) if v2 else Tiling(64, 32, 8, splits=splits))
    # fp16 rounds P and O to 11 bits (half an ulp 4.9e-4 of values up to ~4 here): a few ulps, not 2e-3
    assert max_error(p, out, ref) < (1e-5 if v2 else 4e-3)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("nq, nk, splits", [(1, 1000, 5), (40, 333, 3), (100, 100, 8)])
@pytest.mark.parametrize("algo, tiling", [("v2", Tiling(32, 64, 4)), ("v3", Tiling(128, 64, 12))])
def test_split_kv_counts_equal_closed_form_with_combine(nq, nk, splits, causal, algo, tiling):
    p = Problem(2, 4, nq, 64, seqlen_k=nk, kv_heads=2, causal=causal)
    t = replace(tiling, splits=splits)
    counted = count_io(build(algo, p, t))
    assert counted.as_dict() == closed_form(algo, p, t).as_dict()
    attention, combine = counted.kernels
    assert combine.name == COMBINE_KERNEL
    rows = p.batch * p.heads * nq
    # the combine reads every split's fp32 O and LSE of every query row once and writes O and LSE
    assert combine.gmem_read == {"Oaccum": splits * rows * 64 * 4, "LSEaccum": splits * rows * 4}
    assert combine.gmem_write == {"O": rows * 64 * 2, "LSE": rows * 4}
    assert attention.gmem_write == {"Oaccum": splits * rows * 64 * 4, "LSEaccum": splits * rows * 4}
    # K and V still cross global memory once per q-block: splitting cuts the range, it does not repeat it
    one = count_io(build(algo, p, tiling))
    assert attention.gmem_read["K"] == one.gmem_read["K"]


def test_fa2_split_heuristic():
    # FA2's own example: 48 tiles on 108 slots take 2 splits (efficiency 0.89), not 3 (0.67)
    assert splits_heuristic(48, 108, 64) == 2
    assert splits_heuristic(100, 108, 64) == 1  # 80% of the slots already busy
    assert splits_heuristic(1, 264, 3) == 3  # never more splits than K/V blocks
    # an ineligible count (64 blocks: 11 splits do the work of 11 x 6 like 12 would not) is never chosen
    assert all(splits_heuristic(t, 264, 64) != 12 for t in range(1, 200))


def test_splits_auto_from_the_profile():
    h100 = load_profile("h100")
    decode = Problem(2, 16, 1, 128, seqlen_k=32768, kv_heads=4)
    assert resolve_tiling("v2", decode, h100, splits="auto").splits > 1
    # 8 x 32 one-row tiles already fill 80% of twice the SMs: FA2 does not split them (the decode record,
    # packing 4 heads per tile, has a quarter of the tiles and splits)
    busy = Problem(8, 32, 1, 128, seqlen_k=32768, kv_heads=8)
    assert resolve_tiling("v2", busy, h100, splits="auto").splits == 1
    assert resolve_tiling("decode", busy, h100).splits > 1
    with pytest.raises(FlashsimError, match="does not split"):
        resolve_tiling("standard", decode, h100, splits=4)


# -- decode: GQA packing -----------------------------------------------------------------------------------


@SMALL
@given(nq=st.integers(1, 16), nk=st.integers(1, 400), group=st.sampled_from([1, 4, 8]), splits=st.integers(1, 5),
       causal=st.booleans())
def test_packed_decode_equals_reference(nq, nk, group, splits, causal):
    p = Problem(2, 2 * group, nq, 64, seqlen_k=nk, kv_heads=2, causal=causal, dtype="fp16")
    out, ref = run("decode", p, Tiling(64, 64, 4, splits=splits))
    # P rounded to fp16 before the PV product, as the kernel does: up to half an ulp (2^-11) of each P times
    # |V| (a few units for normal V) and the fp16 output rounding on top
    assert max_error(p, out, ref) < 5e-3


def test_packed_decode_reads_kv_once_per_kv_head():
    """With packing the K/V cache is read once per K/V head; one tile per query head (v2, split-KV too)
    reads it heads / kv_heads times."""
    p = Problem(3, 32, 1, 128, seqlen_k=4096, kv_heads=4)
    once = 3 * 4 * 4096 * 128 * 2
    packed = count_io(build("decode", p, Tiling(64, 128, 4, splits=4)))
    unpacked = count_io(build("v2", p, Tiling(128, 64, 4, splits=4)))
    assert packed.gmem_read["K"] == packed.gmem_read["V"] == once
    assert unpacked.gmem_read["K"] == unpacked.gmem_read["V"] == p.group * once


@pytest.mark.parametrize("page_size", [0, 16, 64, 256])
@pytest.mark.parametrize("nq, causal", [(1, False), (5, True)])
def test_paged_decode_counts_equal_closed_form(page_size, nq, causal):
    p = Problem(2, 8, nq, 64, seqlen_k=1000, kv_heads=2, causal=causal, page_size=page_size)
    t = Tiling(64, 128, 4, splits=3)
    counted = count_io(build("decode", p, t))
    assert counted.as_dict() == closed_form("decode", p, t).as_dict()
    if page_size:
        # the block table: each split reads the entries of the pages its range touches
        per_split = [max(0, min(1000, (s + 1) * 384) - s * 384) for s in range(3)]
        pages = sum(-(-(s * 384 + n) // page_size) - s * 384 // page_size for s, n in enumerate(per_split) if n)
        assert counted.gmem_read[paged.TABLE] == 2 * 2 * pages * 4
    plain = count_io(build("decode", Problem(2, 8, nq, 64, seqlen_k=1000, kv_heads=2, causal=causal), t))
    assert counted.gmem_read["K"] == plain.gmem_read["K"]  # pages change requests, not bytes


def test_small_pages_split_a_tile_into_page_requests():
    p = Problem(1, 4, 1, 64, seqlen_k=512, kv_heads=1, page_size=16)
    kernel = build("decode", p, Tiling(64, 128, 4)).kernels[0]
    k_loads = [op for op in kernel.roles[0].program(kernel.ctas[0]) if isinstance(op, Load) and op.src.tensor == "K"]
    assert len(k_loads) == 512 // 16 and all(op.src.rows == 16 for op in k_loads)


@pytest.mark.parametrize("page_size", [16, 32, 64, 256])
def test_shuffled_pages_equal_reference(page_size):
    p = Problem(2, 4, 3, 32, seqlen_k=700, kv_heads=2, page_size=page_size, causal=True, dtype="fp16")
    out, ref = run("decode", p, Tiling(64, 64, 4, splits=2))
    assert max_error(p, out, ref) < 2e-3


# -- variable-length batches -------------------------------------------------------------------------------


@pytest.mark.parametrize("algo, nq, tiling", [("v2", 0, Tiling(16, 32, 2)), ("v2", 0, Tiling(16, 32, 2, splits=3)),
                                              ("decode", 2, Tiling(64, 32, 4, splits=2))])
def test_varlen_equals_reference_and_closed_form(algo, nq, tiling):
    lens = (50, 130, 7)
    p = Problem(3, 4, nq or max(lens), 32, kv_heads=2, seqlens=lens, causal=True,
                dtype="fp32" if algo == "v2" else "fp16", page_size=16 if algo == "decode" else 0)
    out, ref = run(algo, p, tiling)
    assert max_error(p, out, ref) < (1e-5 if algo == "v2" else 2e-3)
    schedule = build(algo, p, tiling)
    assert count_io(schedule).as_dict() == closed_form(algo, p, tiling).as_dict()
    if algo == "v2":  # thread blocks only for each sequence's real Q tiles
        assert len(schedule.kernels[0].ctas) == 4 * sum(-(-n // 16) for n in lens) * tiling.splits


def test_varlen_problem_checks():
    assert Problem(3, 2, 9000, 64, seqlens=(5, 9, 7)).seqlen_k == 9
    with pytest.raises(FlashsimError, match="batch"):
        Problem(2, 2, 8, 64, seqlens=(5, 9, 7))
    with pytest.raises(FlashsimError, match="page size"):
        Problem(1, 2, 1, 64, page_size=48)


# -- the simulator -----------------------------------------------------------------------------------------


def test_decode_is_hbm_bound_and_reports_bandwidth():
    """A one-token GQA decode with packing and split-KV is limited by reading the cache: the simulator names
    HBM and the achieved fraction of its bandwidth; v2 without splits leaves most SMs idle."""
    h100 = load_profile("h100")
    p = Problem(4, 32, 1, 128, seqlen_k=8192, kv_heads=8)
    dec = simulate("decode", p, h100)
    assert dec.bound_by == "hbm" and dec.tiling.splits > 1
    assert 0.4 < dec.hbm_bandwidth_fraction <= 1.0
    assert dec.as_dict()["hbm_bandwidth_fraction"] == dec.hbm_bandwidth_fraction
    v2 = simulate("v2", p, h100)
    assert v2.hbm_bandwidth_fraction < dec.hbm_bandwidth_fraction / 2 and v2.time_s > 2 * dec.time_s


def test_simulate_reports_padding_avoided(capsys):
    argv = ["simulate", "--algo", "decode", "-n", "1", "--seqlens", "512,3000,8000", "--heads", "8",
            "--kv-heads", "2", "--page-size", "64", "--json"]
    assert cli.main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    pad = out["padding"]
    assert out["problem"]["seqlens"] == [512, 3000, 8000] and out["problem"]["page_size"] == 64
    # bytes: the K/V of 11512 keys instead of 3 x 8000
    assert pad["gmem_bytes"] < pad["gmem_bytes_padded"] and 0.5 < pad["gmem_bytes_avoided"] < 0.53
    assert out["bound_by"] and 0 < out["hbm_bandwidth_fraction"] <= 1


def test_explain_shows_splits_and_combine_bytes(capsys):
    argv = ["explain", "--algo", "v2", "-n", "1", "--seqlen-kv", "4096", "--heads", "8", "--batch", "1",
            "--splits", "4"]
    assert cli.main(argv) == 0
    text = capsys.readouterr().out
    assert "4 splits" in text and COMBINE_KERNEL in text and "Split-KV" in text
    assert "totals agree with the op-by-op count" in text


@pytest.mark.parametrize("argv, message", [
    (["simulate", "--algo", "standard", "--splits", "3", "-n", "256"], "does not split"),
    (["simulate", "--algo", "decode", "-n", "64"], "1 to 16 new queries"),
    (["simulate", "--algo", "v3", "-n", "256", "--seqlens", "100,200"], "variable-length"),
])
def test_bad_inference_options_are_one_line_errors(capsys, argv, message):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err


def test_compare_takes_splits(tmp_path, capsys):
    argv = ["compare", "--algos", "v2", "v3", "-n", "1", "--seqlen-kv", "2048", "--heads", "4", "--batch", "1",
            "--splits", "3", "--jobs", "1", "--out", str(tmp_path), "--json"]
    assert cli.main(argv) == 0
    results = json.loads(capsys.readouterr().out)["results"]
    assert [r["tiling"]["splits"] for r in results] == [3, 3]
    assert all(r["kernels"][-1]["name"] == COMBINE_KERNEL for r in results)


def test_decode_is_left_out_of_prefill_runs():
    """tour, and compare without --algos, run every record that takes the problem: decode takes 1 to 16
    queries per sequence."""
    from flashsim.algorithms import catalog

    assert not catalog.get("decode").takes(Problem(1, 4, 4096, 64))
    assert catalog.get("decode").takes(Problem(1, 4, 16, 64)) and catalog.get("v2").takes(Problem(1, 4, 4096, 64))
