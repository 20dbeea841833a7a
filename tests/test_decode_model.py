"""The decode record follows our decode kernel (kernels/decode.cu): its cp.async ring of `stages` (K, V) pairs
drives both the shared memory a block holds and how many K/V blocks it keeps in flight; warps whose rows are
padding skip the math, and a tile of one warp's rows splits each block's keys over the warps. The kernel's
tiling is the record's, round trip included. Numeric and closed-form checks of these shapes sit beside the
mechanisms they cover."""

from __future__ import annotations

from dataclasses import replace

import pytest
from flashsim.algorithms import Problem, Tiling, catalog
from flashsim.algorithms.closed_form import closed_form
from flashsim.algorithms.counting import count_io
from flashsim.algorithms.ir import Gemm, Load, StoreShared, Wait
from flashsim.algorithms.schedules import build
from flashsim.algorithms.schedules import decode as schedule
from flashsim.algorithms.tiling import check_fits
from flashsim.errors import FlashsimError
from flashsim.hw_profiles import load_profile
from flashsim.simulator.api import simulate

from .test_inference import run

H200 = load_profile("h200")
DECODE = catalog.get("decode")


def block_program(p: Problem, t: Tiling, cta=None):
    kernel = build("decode", p, t).kernels[0]
    return list(kernel.roles[0].program(cta or kernel.ctas[0]))


def blocks_in_flight(ops) -> list[int]:
    """At each K/V wait, the K/V blocks issued whose wait has not come yet (this one included)."""
    issued, waited, seen = 0, 0, []
    for op in ops:
        if isinstance(op, Load) and op.src.tensor == "K":
            issued += 1
        elif isinstance(op, Wait) and op.barrier == "kv":
            seen.append(issued - waited)
            waited += 1
    return seen


@pytest.mark.parametrize("stages", [2, 3, 4])
def test_the_ring_keeps_stages_minus_one_blocks_ahead(stages):
    p = Problem(1, 8, 1, 128, seqlen_k=64 * 12, kv_heads=1)
    ops = block_program(p, Tiling(64, 64, 4, stages))
    in_flight = blocks_in_flight(ops)
    assert len(in_flight) == 12
    # the prologue issued stages - 1 blocks; each step refills the stage it freed, so stages - 1 stay issued
    # ahead until the range runs out
    assert in_flight[:12 - stages + 1] == [stages - 1] * (12 - stages + 1)
    assert in_flight[-1] == 1
    # block j is multiplied out of ring stage j % stages
    s_gemms = [op for op in ops if isinstance(op, Gemm) and op.dst == "S"]
    assert [op.b for op in s_gemms] == [f"sK{j % stages}" for j in range(12)]


def test_three_stages_predict_faster_than_two_on_a_latency_bound_decode():
    """One block per SM streaming its K/V range: with two stages a block has one K/V block in flight while it
    multiplies another, too few bytes to cover the HBM latency; a third stage doubles them."""
    p = Problem(1, 32, 1, 128, seqlen_k=65536, kv_heads=4)  # 4 tiles x 32 splits: 128 blocks on 132 SMs
    two, three = (simulate("decode", p, H200, Tiling(64, 64, 4, stages, splits=32)) for stages in (2, 3))
    assert three.kernel_time_s < 0.85 * two.kernel_time_s
    assert two.hbm_bandwidth_fraction < 0.65 < three.hbm_bandwidth_fraction
    assert three.bytes["hbm_read"] == two.bytes["hbm_read"]  # the same bytes, more of them in flight


def test_smem_footprint_grows_with_stages_and_matches_the_kernel():
    from flashsim.kernels import registry
    from flashsim.kernels.decode import smem_bytes as kernel_smem

    p = Problem(1, 32, 1, 128, seqlen_k=4096, kv_heads=4)
    sizes = [DECODE.smem_bytes(p, Tiling(64, 64, 4, s)) for s in (2, 3, 4)]
    assert sizes[1] - sizes[0] == sizes[2] - sizes[1] == 2 * 64 * 128 * 2  # one (K, V) pair per stage
    fam = registry.family("decode")
    for d in (64, 128):
        t = fam.tiling_for(d, None)
        assert kernel_smem(fam.variant(d, "bf16", t), "fwd") == DECODE.smem_bytes(replace(p, headdim=d), t)
    # five stages at d128 (176 KiB) leave room for one block per SM only: the SM's footprint check sees the ring
    assert DECODE.smem_bytes(p, Tiling(64, 64, 4, 5)) > H200.smem_per_sm_bytes // 2
    with pytest.raises(FlashsimError):
        check_fits("decode", p, Tiling(64, 128, 4, 5), H200)


@pytest.mark.parametrize("d", [64, 128])
def test_validate_simulates_the_tiles_and_stages_the_kernel_ran(d):
    """The kernel's tile table is the record's: validate asks the kernel family, the simulator's mapper gives
    the same tiles, and the tiling survives the dict validate records it as."""
    from flashsim.experiments.validate_impls import kernel_tiling
    from flashsim.kernels import registry

    recorded = kernel_tiling("decode", d, False)
    assert recorded["stages"] == schedule.STAGES == 3
    t = Tiling(**recorded)
    assert t == registry.family("decode").tiling_for(d, None) == schedule.kernel_tiling(d)
    p = Problem(8, 32, 1, d, seqlen_k=8192, kv_heads=4)
    assert replace(DECODE.mapper(p, None), splits=1) == t
    assert DECODE.mapper(p, H200).stages == 3
    check_fits("decode", p, t, H200)


def test_a_ring_needs_two_stages():
    p = Problem(1, 8, 1, 64, seqlen_k=256, kv_heads=1)
    with pytest.raises(FlashsimError, match="at least 2 stages"):
        check_fits("decode", p, Tiling(64, 64, 4, 1), H200)


@pytest.mark.parametrize("nq, group, rows, warps, split", [
    (1, 8, 16, 4, "n"),    # one query, GQA 8: every warp on the same 16 rows, a quarter of the keys each
    (1, 16, 16, 4, "n"),
    (4, 8, 32, 2, "m"),    # 32 packed rows: two warps multiply, two only copy and wait
    (16, 8, 64, 4, "m"),   # 128 rows: two full row blocks
])
def test_math_follows_the_kernels_warps(nq, group, rows, warps, split):
    p = Problem(1, group, nq, 128, seqlen_k=256, kv_heads=1)
    ops = block_program(p, Tiling(64, 64, 4, 3))
    gemms = [op for op in ops if isinstance(op, Gemm)]
    assert {(op.m, op.warps, op.split) for op in gemms} == {(rows, warps, split)}
    merges = [op for op in ops if isinstance(op, StoreShared)]
    assert len(merges) == (split == "n")  # the key-split warps merge once, at the end


def test_key_split_tiles_move_a_quarter_of_the_shared_memory_bytes():
    """With the keys split, K and V are read once per block, not once per warp."""
    t = Tiling(64, 64, 4, 3)
    gqa = count_io(build("decode", Problem(1, 8, 1, 128, seqlen_k=4096, kv_heads=1), t))
    rows32 = count_io(build("decode", Problem(1, 8, 4, 128, seqlen_k=4096, kv_heads=1), t))
    assert gqa.smem_read["K"] == gqa.smem_write["K"]  # every byte loaded is read once
    assert rows32.smem_read["K"] == 2 * rows32.smem_write["K"]  # two active warps each read all of K


@pytest.mark.parametrize("nq, group, causal, page_size, stages", [
    (1, 8, False, 0, 3), (1, 4, True, 16, 3), (3, 8, True, 0, 2), (10, 8, True, 64, 4), (16, 8, False, 0, 3)])
def test_counts_equal_closed_form_for_every_math_shape(nq, group, causal, page_size, stages):
    p = Problem(2, 2 * group, nq, 64, seqlen_k=777, kv_heads=2, causal=causal, page_size=page_size)
    t = Tiling(64, 64, 4, stages, splits=3)
    assert count_io(build("decode", p, t)).as_dict() == closed_form("decode", p, t).as_dict()


@pytest.mark.parametrize("nq, group, stages", [(1, 8, 3), (2, 8, 4), (5, 4, 2), (16, 8, 3)])
def test_ring_and_math_shapes_equal_reference(nq, group, stages):
    p = Problem(2, 2 * group, nq, 32, seqlen_k=300, kv_heads=2, causal=True, dtype="fp16", page_size=16)
    out, ref = run("decode", p, Tiling(64, 32, 4, stages, splits=2))
    err = max((out["O"][b, :, :nq].double() - ref[b]).abs().max().item() for b in range(p.batch))
    assert err < 2e-3


def test_a_flushed_l2_makes_reads_pay_the_flushs_write_backs():
    """simulate(flushed_l2=True) starts from the L2 a flush leaves: a decode reading more than the L2 evicts
    all its dirty lines (their write-backs share HBM with the reads); one reading a few MB evicts dirty lines
    in the share the flush leaves them among the clean ones (l2_dirty_max_bytes / l2_bytes)."""
    t = Tiling(64, 64, 4, 3, splits=1)
    long = Problem(64, 32, 1, 128, seqlen_k=1024, kv_heads=4)
    empty, flushed = (simulate("decode", long, H200, t, flushed_l2=f) for f in (False, True))
    assert flushed.bytes["hbm_write"] - empty.bytes["hbm_write"] == pytest.approx(H200.l2_dirty_max_bytes, rel=0.02)
    assert flushed.bytes["hbm_write_flush"] == pytest.approx(H200.l2_dirty_max_bytes, rel=0.02)
    assert "hbm_write_flush" not in empty.bytes
    assert flushed.kernel_time_s > empty.kernel_time_s
    short = Problem(1, 32, 1, 128, seqlen_k=1024, kv_heads=4)
    empty, flushed = (simulate("decode", short, H200, t, flushed_l2=f) for f in (False, True))
    share = H200.l2_dirty_max_bytes / H200.l2_bytes
    written_back = flushed.bytes["hbm_write"] - empty.bytes["hbm_write"]
    assert written_back == pytest.approx(share * flushed.bytes["hbm_read"], rel=0.1)
    assert flushed.bytes["hbm_write_flush"] == pytest.approx(written_back, rel=0.01)
    # its four blocks draw far below HBM's rate (each at its requester cap): the write-backs cost them nothing
    assert flushed.kernel_time_s == pytest.approx(empty.kernel_time_s, rel=1e-3)


@pytest.mark.parametrize("page_size", [0, 16])
def test_copies_carry_the_kernels_address_arithmetic(page_size):
    """Each K/V block's copies carry the instructions the kernel's SASS spends on them (16 per 16-byte copy
    of a thread, plus the next block's page numbers), the Q tile's copies 72 each, issued by the 4 warps."""
    p = Problem(1, 8, 1, 128, seqlen_k=64 * 4, kv_heads=1, page_size=page_size)
    ops = block_program(p, Tiling(64, 64, 4, 3))
    kv = [op for op in ops if isinstance(op, Load) and op.src.tensor in ("K", "V")]
    q = [op for op in ops if isinstance(op, Load) and op.src.tensor == "Q"]
    per_block = 2 * 8 * schedule.KV_COPY_ISSUE + 8 * schedule.PAGE_FETCH_ISSUE[bool(page_size)]
    assert sum(op.issue for op in kv) == pytest.approx(4 * per_block)
    assert sum(op.issue for op in q) == pytest.approx(8 * schedule.Q_COPY_ISSUE)  # 64 rows x 16 chunks / 128
    assert {op.warps for op in kv + q} == {4}


def test_a_copys_issue_holds_its_warps(monkeypatch):
    """The warps issue a copy's instructions before going on: a lone block's steps cannot be shorter than
    its refills' instructions at one per cycle per scheduler."""
    p = Problem(1, 8, 1, 128, seqlen_k=64 * 16, kv_heads=1)
    t = Tiling(64, 64, 4, 3, splits=1)
    monkeypatch.setattr(schedule, "KV_COPY_ISSUE", 400)
    res = simulate("decode", p, H200, t)
    refills = 16 * 2 * 8 * 400  # every block's copies, one warp per scheduler
    assert res.kernels[0]["cycles"] > refills


def test_our_combine_keeps_every_lse_in_flight():
    """Our combine loads every split's LSE at once (one lane each) and then the O partials one after the
    other: a split adds one L2 round trip, not two."""
    t = Tiling(64, 64, 4, 3)
    combine = {}
    for splits in (16, 48):
        p = Problem(1, 32, 1, 128, seqlen_k=64 * splits, kv_heads=4)
        kernel = build("decode", p, replace(t, splits=splits)).kernels[1]
        ops = list(kernel.roles[0].program(kernel.ctas[0]))
        lse = [op for op in ops if isinstance(op, Load) and op.src.tensor == "LSEaccum"]
        assert {op.in_flight for op in lse} == {splits}
        res = simulate("decode", p, H200, replace(t, splits=splits))
        combine[splits] = res.kernels[1]["cycles"]
    per_split = (combine[48] - combine[16]) / 32
    assert per_split == pytest.approx(H200.l2_hit_latency_cycles, rel=0.25)
