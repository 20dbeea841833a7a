"""ncu_regions on the committed Nsight Compute runs of our v2 forward (experiments/results/h200/fa2-sass/):
the loop body splits into regions whose times add up to a warp's K/V step, and the split shows what d128
adds over d64."""

from __future__ import annotations

from pathlib import Path

import pytest
from flashsim.experiments.code_lines import stretches
from flashsim.experiments.ncu_regions import main, regions, sections

DIR = Path(__file__).resolve().parents[1] / "experiments/results/h200/fa2-sass"


def _run(name: str) -> dict:
    return regions(str(DIR / f"ncu-{name}-details.txt"), str(DIR / f"ncu-{name}-sass.txt.gz"))


def test_regions_add_up_to_the_step_and_hold_the_products():
    r = _run("v2-d128-n4096-c0")
    assert r["warps"] == 32 * 16 * 4 * 4 and r["kv_blocks_per_warp"] == pytest.approx(64)
    # sub-partition active cycles x 1.95 active warps x 528 / (8192 warps x 64 blocks)
    assert r["cycles_per_warp_step"] == pytest.approx(2_569_767 * 1.95 * 528 / (8192 * 64), rel=1e-3)
    parts = r["regions"].values()
    assert sum(p["cycles"] for p in parts) == pytest.approx(r["cycles_per_warp_step"])
    # 32 x 64 x 128 and 32 x 128 x 64 per warp: 128 m16n8k16 each
    assert [p["hmma"] for p in parts] == [0, 128, 0, 128]


def test_d128s_s_gemm_waits_on_its_fragments_more_than_d64s():
    d128 = _run("v2-d128-n4096-c0")["regions"]["S = Q K^T"]["stalls"]
    d64 = _run("v2-d64-n4096-c0")["regions"]["S = Q K^T"]["stalls"]
    assert d128["short_sb"] > 2 * d64.get("short_sb", 0.0)


def test_odd_arguments_exit_2(capsys):
    assert main(["only-one.txt"]) == 2
    assert "usage" in capsys.readouterr().err


D96 = Path(__file__).resolve().parents[1] / "experiments/results/h200"


def _d96(session: str) -> dict:
    base = D96 / session / "ncu-v2-d96-n4096-c0"
    return regions(f"{base}-details.txt.gz", f"{base}-sass.txt.gz")


def test_d96_copies_without_per_copy_arithmetic_shorten_the_step():
    """Our v2 at d96 before and after its copies kept one chunk column per thread: the body is still one K/V
    block per warp although the copies' branch (120 of 128 threads) runs its reconvergence more often than
    the products, and the region that issues the copies holds fewer instructions and cycles."""
    before, after = _d96("session12/v3-ncu"), _d96("session16/v2-d96")
    for r in (before, after):
        assert r["kv_blocks_per_warp"] == pytest.approx(64)
        assert [p["hmma"] for p in r["regions"].values()] == [0, 96, 0, 96]
    copies = "before S (copies, addresses, barrier)"
    assert after["regions"][copies]["instructions"] < 0.6 * before["regions"][copies]["instructions"]
    assert after["regions"][copies]["cycles"] < 0.6 * before["regions"][copies]["cycles"]
    assert after["cycles_per_warp_step"] < 0.95 * before["cycles_per_warp_step"]


SHORT = Path(__file__).resolve().parents[1] / "experiments/results/h200/session18/causal-short"


def _sections(name: str) -> dict:
    return sections(str(SHORT / f"ncu-{name}-details.txt.gz"), str(SHORT / f"ncu-{name}-sass.txt.gz"))


def test_sections_add_up_to_a_warps_life_and_hold_its_products():
    """Our v2 at d64, causal, N 512 (blocks of 128 x 128): the four Q blocks of a head visit 1 to 4 K/V blocks,
    2.5 on average, each 256 m16n8k16 per warp."""
    r = _sections("v2-d64-n512-c1")
    assert r["warps"] == 32 * 32 * 4 * 4
    assert sum(s["cycles"] for s in r["sections"]) == pytest.approx(r["cycles_per_warp"])
    assert sum(s["hmma"] * s["per_warp"] for s in r["sections"]) == pytest.approx(2.5 * 256)


def test_fa2s_short_causal_blocks_wait_on_instruction_fetch():
    """SDPA's flash kernel on short causal rows spends about 30% of a warp's life waiting for instructions
    (no_inst): its causal code (66 KiB run per block) misses the SM's instruction cache on every block; its
    non-causal code, and our v2's either way, far less."""
    def share(name: str) -> float:
        r = _sections(name)
        return r["stalls"].get("no_inst", 0.0) / r["cycles_per_warp"]

    assert share("sdpa-flash-d64-n512-c1") > 0.2 and share("sdpa-flash-d128-n512-c1") > 0.1
    assert share("sdpa-flash-d64-n512-c0") < 0.1
    assert max(share("v2-d64-n512-c1"), share("v2-d128-n512-c1"), share("v2-d64-n512-c0")) < 0.05


def test_code_lines_split_a_kernel_at_its_kv_loop():
    """The executed lines of SDPA flash's causal d64 kernel: a prologue that holds the peeled first iteration
    (more than the SM's 32 KiB instruction cache by itself), a loop of about 26 KiB, a short epilogue; our v2's
    non-causal and causal runs of one binary differ only in the loop (the mask's branch)."""
    fa2 = stretches(str(SHORT / "ncu-sdpa-flash-d64-n512-c1-sass.txt.gz"))
    assert fa2["prologue"] * 128 > 32 * 1024 and 190 <= fa2["loop"] <= 210 and fa2["epilogue"] < 80
    plain = stretches(str(SHORT / "ncu-v2-d64-n512-c0-sass.txt.gz"))
    causal = stretches(str(SHORT / "ncu-v2-d64-n512-c1-sass.txt.gz"))
    assert plain["prologue"] == causal["prologue"] and plain["epilogue"] == causal["epilogue"]
    assert causal["loop"] > plain["loop"]


def test_fa2s_second_masked_step_costs_most():
    """SDPA's flash kernel at d128 (tiles 128 x 64) masks two K/V steps per causal block, in code of their own
    before its loop: the first costs what the non-causal kernel's peeled first step does, the second (out of
    registers: MOV chains and spills between its products) about 1.8 loop passes."""
    from flashsim.experiments.ncu_regions import steps

    causal = steps(str(DIR / "ncu-sdpa-flash-d128-n4096-c1-sass.txt.gz"), 256)
    plain = steps(str(DIR / "ncu-sdpa-flash-d128-n4096-c0-sass.txt.gz"), 256)
    assert [p["piece"] for p in causal] == ["step 1 with the prologue", "step 2", "loop pass"]
    assert [p["piece"] for p in plain] == ["step 1 with the prologue", "loop pass"]
    assert all(p["HMMA"] == 256 for p in causal + plain)
    first, second, loop = causal
    assert second["MOV"] > 4 * loop["MOV"] and second["FSEL"] >= 64 > loop["FSEL"]
    assert 1.6 < second["samples"] / loop["samples"] < 2.0
    assert first["samples"] == pytest.approx(plain[0]["samples"], rel=0.1)


def test_steps_asks_a_product_count(capsys):
    assert main(["--steps", "many", "x.csv"]) == 2
    assert "usage" in capsys.readouterr().err
