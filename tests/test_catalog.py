"""Algorithm records: the catalog, a schedule added through one record, default tiles that always fit, the
tensor-core shape rule, and no algorithm-name comparisons scattered over the sources."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch
from flashsim import cli
from flashsim.algorithms import Problem, Tiling, attention, catalog
from flashsim.algorithms.counting import count_io
from flashsim.algorithms.explain import explain
from flashsim.algorithms.footprint import REG_OVERHEAD, check_fits, problems
from flashsim.algorithms.ir import RMEM, SMEM, Fill, Gemm, Kernel, Load, OnlineSoftmax, Role, Schedule, SyncThreads
from flashsim.algorithms.parts import cdiv, flash_epilogue, gemm_dtype, kv_block_count, row_tile, tile_mask
from flashsim.algorithms.record import Algorithm
from flashsim.algorithms.schedules import build
from flashsim.algorithms.tiling import default_tiling, resolve_tiling
from flashsim.errors import FlashsimError
from flashsim.hw_profiles import load_profile
from flashsim.hw_profiles.loader import list_profiles
from flashsim.simulator.api import simulate

ROOT = Path(__file__).resolve().parents[1]
MAX_NAME_COMPARISONS = 8
HEADDIMS = (64, 96, 128, 192, 256)


# -- no name comparisons outside the records -------------------------------------------------------------


def _patterns() -> tuple[re.Pattern, re.Pattern, re.Pattern]:
    """(comparison, membership test, loop over names) for the catalog's names as string literals."""
    names = "|".join(re.escape(n) for n in catalog.names())
    lit = rf"""["'](?:{names})["']"""
    return (re.compile(rf"(?:==|!=)\s*{lit}|{lit}\s*(?:==|!=)|\.startswith\(\s*{lit}"),
            re.compile(rf"\bin\s*[(\[]\s*{lit}"),
            re.compile(rf"\bfor\b[^:]*?\bin\s*[(\[]\s*{lit}"))


def comparisons_in(line: str) -> int:
    compare, member, loop = _patterns()
    return len(compare.findall(line)) + len(member.findall(line)) - len(loop.findall(line))


def name_comparisons() -> list[str]:
    """Places outside the records that compare against an algorithm name.

    How it counts: every .py file of the repository except tests/ and algorithms/schedules/ (the records) and
    what an install copies to build/,
    line by line; a line counts once per match of a catalog name as a string literal ("v3", 'v3-fp8', ...)
    that is compared: `== NAME`, `!= NAME`, `NAME ==`, `NAME !=`, `in (NAME, ...)` / `not in [NAME, ...]`
    (but not `for x in (NAME, ...)`, which iterates), or `.startswith(NAME`. Lists of names, dict keys and
    messages are not comparisons and are not counted."""
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(("tests/", "algorithms/schedules/", ".", "build/")):  # build/: an install's copies
            continue
        for no, line in enumerate(path.read_text().splitlines(), 1):
            found += [f"{rel}:{no}: {line.strip()}"] * comparisons_in(line)
    return found


def test_algorithm_names_are_compared_in_few_places():
    found = name_comparisons()
    assert len(found) <= MAX_NAME_COMPARISONS, "\n".join(found)


@pytest.mark.parametrize("line, count", [
    ('if algo == "v3":', 1),
    ("if 'v1' != algo and name == 'v2':", 2),
    ('if algo in ("v1", "v2"):', 1),
    ('if algo not in ["standard"]:', 1),
    ('if name.startswith("v3"):', 1),
    ('ALGOS = ("v1", "v2")', 0),
    ('x = {"v1": 1}', 0),
    ('for algo in ("v1", "v2"):', 0),
    ('worst = [r for r in rows for m in ("v3", "v2")]', 0),
])
def test_the_counter_counts_comparisons_only(line, count):
    assert comparisons_in(line) == count


# -- the catalog -----------------------------------------------------------------------------------------


def test_catalog_lists_and_refuses():
    assert catalog.names()[:5] == ("standard", "v1", "v2", "v3", "v3-fp8")
    for rec in catalog.records():
        assert catalog.get(rec.name) is rec and rec.summary and rec.dtypes
    with pytest.raises(FlashsimError, match="unknown algorithm 'v9'; choose one of standard, v1, v2, v3, v3-fp8"):
        catalog.get("v9")
    with pytest.raises(FlashsimError, match="already in the catalog"):
        catalog.register(catalog.get("v2"))


def test_records_drive_features_and_dtypes():
    a100, h100 = load_profile("a100"), load_profile("h100")
    with pytest.raises(FlashsimError, match="v3 needs tma and wgmma, which a100-sxm4-80gb does not have"):
        catalog.check_features("v3", Problem(1, 1, 128, 64), a100)
    with pytest.raises(FlashsimError, match=r"v2 takes bf16, fp16, fp32 inputs, not fp8 \(fp8 runs with v3-fp8\)"):
        catalog.check_features("v2", Problem(1, 1, 128, 64, dtype="fp8"), h100)
    assert catalog.get("v3-fp8").default_dtype == "fp8" and catalog.get("v2").default_dtype == "bf16"


# -- a schedule added through one record -----------------------------------------------------------------


def _toy_build(p: Problem, t: Tiling) -> Schedule:
    """Flash attention at its plainest: one thread block per Q block, K and V loaded synchronously."""
    bm, bn, d, w = t.block_m, t.block_n, p.headdim, t.warps

    def program(cta):
        b, h, i = cta
        row0 = i * bm
        yield Load(row_tile(p, "Q", b, h, row0, bm), "sQ", SMEM)
        yield Fill("acc", bm, d, 0.0)
        yield Fill("m", bm, 1, -math.inf)
        yield Fill("l", bm, 1, 0.0)
        for j in range(kv_block_count(p, row0, bm, bn)):
            yield SyncThreads()
            yield Load(row_tile(p, "K", b, h, j * bn, bn, kv=True), "sK", SMEM)
            yield Load(row_tile(p, "V", b, h, j * bn, bn, kv=True), "sV", SMEM)
            yield SyncThreads()
            yield Gemm("S", "sQ", "sK", bm, bn, d, SMEM, SMEM, "mma_sync", gemm_dtype(p), w, trans_b=True)
            yield OnlineSoftmax("S", "P", "m", "l", bm, bn, p.scale, tile_mask(p, row0, j * bn, bm, bn),
                                gemm_dtype(p), acc="acc", acc_cols=d, warps=w)
            yield Gemm("acc", "P", "sV", bm, d, bn, RMEM, SMEM, "mma_sync", gemm_dtype(p), w, accumulate=True)
        yield from flash_epilogue(p, b, h, row0, bm, "acc", "m", "l", w)

    ctas = [(b, h, i) for b in range(p.batch) for h in range(p.heads) for i in range(cdiv(p.seqlen_q, bm))]
    kernel = Kernel("toy", ctas, (Role("warps", w, program),), _toy_smem(p, t), _toy_regs(p, t),
                    classes=lambda c: (c[2],))
    return Schedule("toy", p, t, (kernel,))


def _toy_smem(p: Problem, t: Tiling) -> int:
    return (t.block_m + 2 * t.block_n) * p.headdim * p.elem_bytes


def _toy_regs(p: Problem, t: Tiling) -> int:
    return REG_OVERHEAD + (t.block_m * t.block_n + t.block_m * p.headdim) // t.threads


TOY = Algorithm(name="toy", summary="flash attention without pipelining", build=_toy_build,
                mapper=lambda p, profile: Tiling(64, 64, 4, 1), smem_bytes=_toy_smem, registers=_toy_regs)


@pytest.fixture
def toy():
    catalog.register(TOY)
    yield TOY
    catalog.unregister(TOY.name)


def test_a_registered_schedule_simulates_counts_and_computes(toy):
    h100 = load_profile("h100")
    p = Problem(1, 2, 200, 64, seqlen_k=150, causal=True)
    assert "toy" in catalog.names()
    r = simulate("toy", p, h100)
    assert r.tiling == Tiling(64, 64, 4, 1) and r.time_s > 0 and r.bytes["hbm_read"] > 0
    io = count_io(build("toy", p, r.tiling))
    n = [kv_block_count(p, i * 64, 64, 64) for i in range(4)]
    assert io.flops["mma_sync/bf16"] == sum(2 * 2 * 64 * 64 * 64 * k for k in n) * 2  # S and P V, 2 heads
    assert io.gmem_read["Q"] == 2 * 200 * 64 * 2
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, n_, 64, generator=g) for n_ in (200, 150, 150))
    out = attention(q, k, v, algo="toy", causal=True)
    s = (q.double() @ k.double().transpose(-1, -2)) / 8
    s = s.masked_fill(torch.arange(150)[None, :] > torch.arange(200)[:, None] - 50, -math.inf)
    ref = torch.nan_to_num(torch.softmax(s, -1), nan=0.0) @ v.double()
    assert (out.double() - ref).abs().max().item() < 1e-5
    with pytest.raises(FlashsimError, match="toy has no closed form"):
        explain("toy", p, r.tiling)


# -- default tiles always fit ----------------------------------------------------------------------------


def _cases():
    for info in list_profiles():
        profile = load_profile(info.name)
        for rec in catalog.records():
            if not all(profile.has(f) for f in rec.features):
                continue
            for d in HEADDIMS:
                if rec.name == "v3-bwd" and d == 256 and profile.smem_per_block_max_bytes < 150 * 1024:
                    continue  # FA3's backward stages a Br x d fp32 dQ tile beside Q and dO: ~146 KB at least
                for dtype in rec.dtypes:
                    for causal in (False, True):
                        yield profile, rec, Problem(2, 4, 4096, d, dtype=dtype, causal=causal)


def test_default_tiles_fit_every_profile_headdim_and_dtype():
    seen = 0
    for profile, rec, p in _cases():
        t = default_tiling(rec.name, p, profile)
        assert not problems(rec, p, t, profile), (rec.name, profile.name, p.describe(), t.describe())
        check_fits(rec, p, t, profile)  # the instruction's shape rule and the schedule's own rules too
        seen += 1
    assert seen > 200


@pytest.mark.parametrize("hw, d, tiles", [
    ("h100", 192, (128, 112, 12, 2)),  # FA3's 128x128 needs 240 KiB of shared memory: block_n shrinks
    ("h200", 192, (128, 112, 12, 2)),
    ("h100", 256, (128, 80, 12, 2)),  # FA3's own d256 tile already fits
    ("half-smem", 128, (128, 80, 12, 2)),  # (128 + 2 x 2 x 80) x 128 x 2 B = 112 KiB of the 113 KiB
])
def test_v3_shrinks_block_n_first(hw, d, tiles):
    assert default_tiling("v3", Problem(1, 1, 4096, d), load_profile(hw)) == Tiling(*tiles)


def test_tiles_that_fit_are_left_alone():
    h100 = load_profile("h100")
    for rec in catalog.records():
        p = Problem(1, 1, 4096, 128, dtype=rec.default_dtype)
        assert default_tiling(rec.name, p, h100) == rec.mapper(p, h100)


def test_v2_fp32_inputs_run_with_default_tiles():
    """fp32 doubles the tiles' bytes; the default tiling still fits and the schedule computes attention."""
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 1, 96, 256, generator=g) for _ in range(3))
    profile = load_profile("half-smem")
    out = attention(q, k, v, algo="v2", profile=profile)
    ref = torch.softmax((q.double() @ k.double().transpose(-1, -2)) / 16, -1) @ v.double()
    assert (out.double() - ref).abs().max().item() < 1e-5


# -- the tensor-core shape rule --------------------------------------------------------------------------


@pytest.mark.parametrize("algo, tiles, needle", [
    ("v2", dict(block_m=100, block_n=37), "block_m must be a multiple of 64 and block_n a multiple of 16"),
    ("v2", dict(block_m=128, block_n=72), "cannot be tiled by mma.sync"),
    ("v1", dict(block_m=16, block_n=96), "block_n a multiple of 64"),
    ("v3", dict(block_m=96, block_n=64), "block_m must be a multiple of 64"),
    ("v3", dict(block_m=128, block_n=264), "up to 256"),
])
def test_untileable_tiles_are_refused(algo, tiles, needle):
    with pytest.raises(FlashsimError, match=re.escape(needle)):
        resolve_tiling(algo, Problem(1, 1, 1024, 64), load_profile("h100"), **tiles)


def test_untileable_tiles_one_line_exit_2(capsys):
    assert cli.main(["simulate", "--algo", "v2", "--block-m", "100", "--block-n", "37"]) == 2
    err = capsys.readouterr().err.strip()
    assert "cannot be tiled by mma.sync" in err and len(err.splitlines()) == 1


def test_a_record_is_imported_when_first_asked_for():
    """A run of one algorithm does not import every schedule module (process start-up time)."""
    import subprocess
    import sys

    code = ("import sys; from flashsim.algorithms import catalog; catalog.get('v2'); "
            "print(sorted(m.rsplit('.', 1)[1] for m in sys.modules if m.startswith('flashsim.algorithms.schedules.')))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "'v2'" in loaded and "'decode'" not in loaded and "'v3_bwd'" not in loaded
    assert [r.name for r in catalog.records()] == list(catalog.names())
