"""The held-out decode and backward sets: drawn from their seeds exactly as committed, in the ranges they
promise; configurations that keep every forward id and record; the grids the CLI takes; the calls our
kernels do not have yet skipped with the reason (GPU-free)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from flashsim import cli
from flashsim.errors import FlashsimError
from flashsim.experiments import testset, testset_passes, validate, validate_compare, validate_passes, validate_support
from flashsim.experiments import validate_store as store
from flashsim.experiments.validate_impls import BACKWARD_ALGO, sim_algo
from flashsim.experiments.validate_sets import BWD, DECODE

SETS = (testset_passes.DECODE_SET, testset_passes.BWD_SET)

# -- the frozen lists -------------------------------------------------------------------------------------


@pytest.mark.parametrize("frozen", SETS, ids=lambda s: s.name)
def test_seed_reproduces_the_committed_list_exactly(frozen) -> None:
    drawn = frozen.generate()
    assert frozen.as_json(drawn) == frozen.file.read_text()
    assert frozen.committed() == drawn == validate.GRIDS[frozen.name]()
    assert frozen.generate(frozen.seed + 1) != drawn  # the seed decides


def test_decode_set_covers_what_serving_runs() -> None:
    configs = testset_passes.DECODE_SET.committed()
    assert len(configs) >= 24 and len({c.id for c in configs}) == len(configs)
    assert all(c.pass_name == "decode" and c.id.endswith("-decode") for c in configs)
    assert all(1 <= c.batch <= 64 and 8 <= c.heads <= 64 and c.heads % c.hkv == 0 for c in configs)
    assert {1, 8} <= {c.heads // c.hkv for c in configs}
    assert all(1 <= c.seqlen_q <= 16 for c in configs)
    assert sum(c.seqlen_q == 1 for c in configs) > len(configs) / 2  # mostly one new token
    assert any(c.causal and c.seqlen_q > 1 for c in configs)
    assert not any(c.causal and c.seqlen_q == 1 for c in configs)  # one token sees the cache either way
    assert all(1 << 10 <= c.nk <= 128 << 10 for c in configs)
    assert sum(c.nk % 64 != 0 for c in configs) >= 3  # cache lengths no tile or page divides
    assert {c.headdim for c in configs} == {64, 128}
    paged = [c for c in configs if c.page_size]
    assert len(configs) / 4 <= len(paged) <= 3 * len(configs) / 4
    assert {c.page_size for c in paged} <= {16, 32, 64, 256} and len({c.page_size for c in paged}) >= 3
    assert all(testset_passes.kv_bytes(c) <= testset_passes.DECODE_MEMORY_CAP for c in configs)


def test_backward_set_is_drawn_like_the_forward_one_and_cut_smaller() -> None:
    configs = testset_passes.BWD_SET.committed()
    assert len(configs) >= 24 and len({c.id for c in configs}) == len(configs)
    assert all(c.pass_name == "bwd" and c.id.endswith("-bwd") and not c.page_size for c in configs)
    assert {c.headdim for c in configs} == {64, 128}
    assert len({c.heads // c.hkv for c in configs}) >= 3
    assert sum(c.seqlen_q % 64 != 0 for c in configs) >= 5  # odd lengths
    assert any(c.seqlen_q != c.nk for c in configs) and any(c.causal for c in configs)
    assert any(not c.causal and c.seqlen_q == c.nk for c in configs)  # bidirectional
    assert not any(c.causal and c.seqlen_q > c.nk for c in configs)
    for c in configs:
        assert testset.work_flops(c) <= testset_passes.BWD_FLOP_CAP, c.id
        assert testset.memory_bytes(c) <= testset_passes.BWD_MEMORY_CAP, c.id


def test_both_sets_measure_within_the_device_script_caps() -> None:
    """The device script gives each grid 2.8 minutes (--max-minutes); the estimate must stay under it."""
    for frozen in SETS:
        e = testset_passes.estimate(frozen.committed())
        assert 30 < e["seconds"] < 2.8 * 60, frozen.name
    big = testset_passes.BWD_SET.committed()[0]
    assert testset_passes.call_seconds(big) == pytest.approx(2.5 * testset.work_flops(big) / 200e12)


# -- Config: new fields with defaults that change nothing ---------------------------------------------------


def test_forward_ids_and_records_are_unchanged() -> None:
    assert validate.Config(2, 32, 4096, 128, causal=True, kv_heads=8).id == "b2-h32-kv8-n4096-d128-causal"
    text = testset.FILE.read_text()
    assert "pass_name" not in text and "page_size" not in text
    records = store.latest(store.load(Path(validate.__file__).parent / "results/h200/testset-measured.jsonl"), "time")
    assert len(records) > 200
    for rec in records.values():
        c = rec["config"]
        cfg = validate.Config(c["batch"], c["heads"], c["seqlen_q"], c["headdim"], c["causal"],
                              seqlen_k=c["seqlen_k"] if c["seqlen_k"] != c["seqlen_q"] else 0,
                              kv_heads=c["kv_heads"] if c["kv_heads"] != c["heads"] else 0)  # fmt: skip
        impl = validate.IMPLS[rec["impl"]]
        assert cfg.id == rec["config_id"]
        assert rec["key"] == validate.key("time", impl.name, cfg)
        assert cfg.problem_dict(impl.sim_dtype, validate_support.causal_align(impl, cfg)) == c
        assert sim_algo(impl, cfg) == rec["algo"]


def test_pass_and_page_size_name_the_configuration() -> None:
    dec = validate.Config(8, 32, 1, 128, seqlen_k=32768, kv_heads=8, pass_name="decode", page_size=16)
    assert dec.id == "b8-h32-kv8-n1-k32768-d128-p16-decode"
    assert "page_size" not in dec.problem_dict("bf16")  # SDPA's dense stand-in
    assert dec.problem_dict("bf16", paged=True)["page_size"] == 16
    assert validate.Config(1, 8, 300, 64, pass_name="bwd").id == "b1-h8-n300-d64-bwd"
    with pytest.raises(FlashsimError, match="unknown pass"):
        validate.Config(1, 8, 300, 64, pass_name="fwd+bwd")
    with pytest.raises(FlashsimError, match="page size"):
        validate.Config(1, 8, 300, 64, pass_name="bwd", page_size=16)


def test_each_pass_is_simulated_by_its_schedule() -> None:
    from flashsim.algorithms.backward import backward_of

    assert {k: v for k, v in backward_of().items() if k in BACKWARD_ALGO} == BACKWARD_ALGO
    bwd = validate.Config(1, 8, 512, 64, pass_name="bwd")
    dec = validate.Config(1, 8, 1, 64, seqlen_k=4096, pass_name="decode")
    impls = validate.IMPLS
    assert [sim_algo(impls[n], bwd) for n in ("v2", "sdpa-flash", "sdpa-cudnn")] == ["v2-bwd", "v2-bwd", "v3-bwd"]
    assert {sim_algo(impls[n], dec) for n in ("decode", "sdpa-flash", "sdpa-cudnn", "sdpa-efficient")} == {"decode"}
    causal = validate.Config(1, 8, 4, 64, causal=True, seqlen_k=4096, pass_name="decode")
    assert validate_support.causal_align(impls["sdpa-flash"], causal) == "bottom-right"  # an explicit mask
    assert validate_support.causal_align(impls["sdpa-flash"], validate.Config(1, 8, 4, 64, True, 64)) == "top-left"


# -- the CLI ------------------------------------------------------------------------------------------------


def test_cli_takes_the_new_grids_and_refuses_unknown_ones(tmp_path: Path, capsys) -> None:
    for grid in ("test-decode", "test-bwd"):
        code = cli.main(["validate", "--grid", grid, "--measure-only", "--out-dir", str(tmp_path)])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1 and "GPU" in err  # past the grid check: no GPU here
    assert cli.main(["validate", "--grid", "test-decoder", "--out-dir", str(tmp_path)]) == 2
    assert "test-decode, test-bwd" in capsys.readouterr().err
    assert validate.measured_name("test-decode") == DECODE.measured == "testset-decode-measured.jsonl"
    assert validate.measured_name("test-bwd") == BWD.measured
    assert validate.DEFAULT_IMPLS["fa2"] == validate.DEV_IMPLS and "decode" not in validate.DEV_IMPLS


def test_compare_only_reports_the_decode_set_with_its_page_size(tmp_path: Path, monkeypatch, capsys) -> None:
    seen = []

    def fixed(job):
        seen.append(job)
        return {"predicted": {"time_s": 1.1e-3, "kernel_time_s": 1e-3, "hbm_read": 1e6, "hbm_write": 1e5,
                              "l2_bytes": 1e7}, "sim": {"bound_by": "hbm"}}  # fmt: skip

    monkeypatch.setattr(validate_compare, "_simulate", fixed)
    cfg = validate.Config(4, 32, 1, 128, seqlen_k=8000, kv_heads=8, pass_name="decode", page_size=64)
    path = tmp_path / DECODE.measured
    store.append(path, {"type": "session", "gpu": "Test GPU", "date": "2026-01-01", "command": "flashsim validate"})
    for name, busy in (("decode", 0.8e-3), ("sdpa-flash", 1.25e-3)):
        impl = validate.IMPLS[name]
        store.append(path, {"type": "time", "key": validate.key("time", name, cfg), "impl": name,
                            "algo": sim_algo(impl, cfg), "config": cfg.problem_dict("bf16", paged=impl.paged),
                            "config_id": cfg.id, "tiling": None, "causal_align": "bottom-right", "status": "ok",
                            "time_s": busy, "kernel_time_s": busy, "pass": "decode"})  # fmt: skip
    assert cli.main(["validate", "--compare-only", "--out-dir", str(tmp_path), "--jobs", "1"]) == 0
    assert "decode test set" in capsys.readouterr().out
    report = json.loads((tmp_path / DECODE.report).read_text())
    assert report["summary"]["decode"]["kernel_time_s"]["mape"] == pytest.approx(25.0)
    assert report["summary"]["sdpa-flash"]["kernel_time_s"]["mape"] == pytest.approx(20.0)
    jobs = {job[1].get("page_size") for job in seen}
    assert {job[0] for job in seen} == {"decode"} and jobs == {64, None}  # ours paged, SDPA dense


# -- measuring without our kernels, and the paged cache ---------------------------------------------------------


@pytest.mark.parametrize(("impl", "cfg", "missing"), [
    ("decode", validate.Config(2, 8, 1, 64, seqlen_k=2048, pass_name="decode", page_size=16), "decode"),
    ("v2", validate.Config(2, 8, 256, 64, pass_name="bwd"), "attention_backward"),
])  # fmt: skip
def test_a_missing_kernel_of_ours_is_skipped_with_the_reason(impl, cfg, missing, monkeypatch) -> None:
    torch = pytest.importorskip("torch")
    from flashsim import kernels

    monkeypatch.delattr(kernels, missing, raising=False)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)  # no GPU here: the context is fine
    opts = validate.SweepOptions([impl], [cfg], Path("."))
    rec = validate._measure_one(validate.IMPLS[impl], cfg, None, None, None, None, None, opts, False)
    assert rec["status"] == validate_support.SKIPPED and not rec.get("fatal")
    assert f"kernels.{missing} does not exist" in rec["error"]
    assert rec["pass"] == cfg.pass_name and rec["algo"] == sim_algo(validate.IMPLS[impl], cfg)
    bwd = validate.Config(1, 8, 64, 64, pass_name="bwd")
    with pytest.raises(FlashsimError, match="v3 has none"):
        validate_passes.make_call(validate.IMPLS["v3"], None, None, None, bwd)
    dec = validate.Config(1, 8, 1, 64, seqlen_k=2048, pass_name="decode")
    with pytest.raises(FlashsimError, match="v2 is not timed here"):  # not kernels.decode under another name
        validate_passes.make_call(validate.IMPLS["v2"], None, None, None, dec)


def test_paged_cache_holds_every_token_where_the_block_table_says() -> None:
    torch = pytest.importorskip("torch")
    b, hkv, nk, d, page = 3, 2, 37, 4, 16
    k = torch.randn(b, hkv, nk, d)
    v = torch.randn(b, hkv, nk, d)
    k_pool, v_pool, table = validate_passes.paged_cache(k, v, page)
    pages = -(-nk // page)
    assert k_pool.shape == (b * pages, page, hkv, d) and table.shape == (b, pages) and table.dtype == torch.int32
    assert sorted(table.flatten().tolist()) == list(range(b * pages))  # every page used once
    assert table.flatten().tolist() != list(range(b * pages))  # in a shuffled order
    for pool, dense in ((k_pool, k), (v_pool, v)):
        gathered = pool[table.long()].reshape(b, pages * page, hkv, d).permute(0, 2, 1, 3)
        assert torch.equal(gathered[:, :, :nk], dense)
        assert not gathered[:, :, nk:].any()  # the last page's tail is padding


def test_rel_err_of_gradients_is_the_worst_one() -> None:
    torch = pytest.importorskip("torch")
    ref = (torch.ones(4), torch.ones(4), torch.ones(4))
    out = (torch.ones(4), torch.ones(4) * 1.5, torch.ones(4) * 1.1)
    assert validate.rel_err(out, ref) == pytest.approx(0.5)


# -- the calls on CPU tensors (fp32): what the GPU runs, less the backend selection ---------------------------


def _qkv(torch, cfg):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(cfg.batch, cfg.heads, cfg.seqlen_q, cfg.headdim, generator=g)
    k = torch.randn(cfg.batch, cfg.hkv, cfg.nk, cfg.headdim, generator=g)
    return q, k, torch.randn(k.shape, generator=g)


def test_sdpa_backward_call_times_the_gradients_again_and_again() -> None:
    torch = pytest.importorskip("torch")
    cfg = validate.Config(2, 8, 67, 64, causal=True, kv_heads=2, pass_name="bwd")
    q, k, v = _qkv(torch, cfg)
    fn = validate.make_call(validate.IMPLS["sdpa-flash"], q, k, v, cfg)
    ref = validate_passes.reference(q, k, v, cfg, "top-left")
    first, again = fn(), fn()  # the graph is retained between calls
    assert [g.shape for g in first] == [q.shape, k.shape, v.shape]
    assert validate.rel_err(first, ref) < 1e-5 and validate.rel_err(again, ref) < 1e-5
    assert validate.rel_err(first, validate_passes.reference(q, k, v, cfg, "bottom-right")) < 1e-5  # Nq == Nk


def test_decode_calls_see_the_cache_bottom_right_dense_or_paged(monkeypatch) -> None:
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F
    from flashsim import kernels

    cfg = validate.Config(2, 8, 4, 64, causal=True, seqlen_k=100, kv_heads=2, pass_name="decode", page_size=16)
    q, k, v = _qkv(torch, cfg)
    ref = validate_passes.reference(q, k, v, cfg, "bottom-right")
    top_left = F.scaled_dot_product_attention(q, k.repeat_interleave(4, 1), v.repeat_interleave(4, 1), is_causal=True)
    assert validate.rel_err(top_left, ref) > 0.1  # the two masks differ here

    def decode(q, k_cache, v_cache, cache_seqlens=None, block_table=None, causal=False):
        """Our decode's contract, computed densely: gather the pages back, attend bottom-right."""
        b, pages = block_table.shape
        dense = [c[block_table.long()].reshape(b, -1, *c.shape[2:])[:, : int(cache_seqlens[0])].transpose(1, 2)
                 for c in (k_cache, v_cache)]  # fmt: skip
        return validate_passes.reference(q, *dense, cfg, "bottom-right")

    monkeypatch.setattr(kernels, "decode", decode, raising=False)
    ours = validate.make_call(validate.IMPLS["decode"], q, k, v, cfg)()
    assert validate.rel_err(ours, ref) < 1e-6
    try:
        sdpa = validate.make_call(validate.IMPLS["sdpa-efficient"], q, k, v, cfg)()
    except RuntimeError:  # a torch without GQA under an explicit mask: on a GPU that is a skipped row
        return
    assert validate.rel_err(sdpa, ref) < 1e-5
