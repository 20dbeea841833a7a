"""flashsim animate: the page's data comes from the trace and the numeric interpreter, and the page works in
a real headless browser (no console errors, no network request, stepping changes what is drawn)."""

from __future__ import annotations

import json
import math
import re
import shutil

import pytest
import torch
from flashsim.algorithms.problem import Problem
from flashsim.algorithms.tiling import resolve_tiling
from flashsim.cli import main
from flashsim.hw_profiles import load_profile
from flashsim.simulator.animate import SEED, build_animation, render_page, row_statistics

BROWSER_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync"]
PROBLEM = Problem(1, 2, 512, 64)


@pytest.fixture(scope="module")
def h100():
    return load_profile("h100")


def _data(algo, profile):
    return build_animation(algo, PROBLEM, profile, resolve_tiling(algo, PROBLEM, profile))


def _reference_row_stats(block_n: int) -> list[tuple[float, float]]:
    """Running max and sum of row 0 of head 0, block by block, straight from the scores."""
    gen = torch.Generator().manual_seed(SEED)
    q = torch.randn(1, 2, 512, 64, generator=gen)
    k = torch.randn(1, 2, 512, 64, generator=gen)
    s = (q[0, 0, 0].to(torch.bfloat16).float() @ k[0, 0].to(torch.bfloat16).float().T) * 64**-0.5
    out, m, l = [], -math.inf, 0.0
    for j in range(0, 512, block_n):
        block = s[j:j + block_n]
        m_new = max(m, float(block.max()))
        l = l * math.exp(m - m_new) + float(torch.exp(block - m_new).sum())
        m = m_new
        out.append((m, l))
    return out


@pytest.mark.parametrize("algo", ["v1", "v2", "v3"])
def test_row_statistics_follow_the_online_softmax(algo, h100):
    t = resolve_tiling(algo, PROBLEM, h100)
    got = row_statistics(algo, PROBLEM, t)
    want = _reference_row_stats(t.block_n)
    assert len(got) == len(want)
    for g, (m, l) in zip(got, want, strict=True):
        assert g["m"] == pytest.approx(m, rel=1e-3)
        assert g["l"] == pytest.approx(l, rel=1e-3)


@pytest.mark.parametrize("algo", ["v2", "v3"])
def test_events_come_from_the_first_sms_and_number_kv_tiles(algo, h100):
    data = _data(algo, h100)
    # two neighbouring SMs from the one running the followed row's block (v3 runs a head's last query
    # block first, so that block is not always on SM 0)
    shown = sorted({int(re.match(r"SM(\d+)", t).group(1)) for t in data["tracks"]})
    assert len(shown) == 2 and shown[1] == shown[0] + 1
    loads = [e for e in data["events"] if e[1] == "load K" and data["tracks"][e[0]].startswith(f"SM{shown[0]}")]
    assert [e[6] for e in loads] == list(range(data["kv_blocks"]))
    stat_cycles = [s["cycle"] for s in data["row_stats"]]
    assert stat_cycles == sorted(stat_cycles) and all(0 < c <= data["cycles"] for c in stat_cycles)


def test_v3_ring_slots_fill_before_they_empty(h100):
    data = _data("v3", h100)
    first = min(r["sm"] for r in data["ring"])
    ring = [r for r in data["ring"] if r["sm"] == first]
    assert {r["slot"] for r in ring} == {"K0", "K1", "V0", "V1"}
    for r in ring:
        assert r["load"] < r["full"] <= r["empty"]
    # a slot is refilled only after the consumers released its previous tile
    for slot in ("K0", "V0"):
        uses = sorted((r for r in ring if r["slot"] == slot), key=lambda r: r["j"])
        for a, b in zip(uses, uses[1:], strict=False):
            assert b["load"] >= a["empty"]


def test_causal_v3_shows_the_sms_of_row_0s_work_tile(h100):
    causal = Problem(1, 2, 512, 64, causal=True)
    data = build_animation("v3", causal, h100, resolve_tiling("v3", causal, h100))
    # causal work tiles run longest first, so Q block 0 of head 0 is not the first tile launched
    assert not data["tracks"][0].startswith("SM0 ")
    assert data["row_stats"] and all(s["cycle"] is not None for s in data["row_stats"])
    assert data["row_stats"][0]["l"] == pytest.approx(1.0)  # row 0 sees key 0 only


def test_animate_rejects_a_bad_sm_count(tmp_path, capsys):
    assert main(["animate", "--sms", "9", "--out", str(tmp_path / "a.html")]) == 2
    assert "--sms must be between 1 and 4" in capsys.readouterr().err


def _browser_path() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


@pytest.mark.parametrize("algo", ["v1", "v2", "v3"])
def test_page_runs_in_a_headless_browser(algo, tmp_path, h100):
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    browser_path = _browser_path()
    if browser_path is None:
        pytest.skip("no chromium browser found (apt-get install chromium)")
    page_path = tmp_path / f"{algo}.html"
    assert main(["animate", "--algo", algo, "--out", str(page_path)]) == 0
    text = page_path.read_text()
    assert "http://" not in text.replace("http://www.w3.org/2000/svg", "") and "https://" not in text
    embedded = json.loads(re.search(r'<script id="data" type="application/json">(.*?)</script>', text, re.S).group(1))
    assert embedded["algo"] == algo and embedded["events"]

    problems, requests = [], []
    url = page_path.resolve().as_uri()
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=browser_path, args=BROWSER_ARGS)
        try:
            page = browser.new_page()
            page.on("console", lambda m: problems.append(m.text) if m.type in ("error", "warning") else None)
            page.on("pageerror", lambda e: problems.append(str(e)))
            page.on("request", lambda r: requests.append(r.url) if r.url != url else None)
            page.goto(url)
            before = page.get_attribute("#stage", "data-cycle"), page.inner_html("#stage")
            page.click("#fwd")
            page.click("#fwd")
            after = page.get_attribute("#stage", "data-cycle"), page.inner_html("#stage")
            assert int(after[0]) > int(before[0])
            assert after[1] != before[1]  # the drawing itself changed, not only the clock
            page.click("#back")
            back = page.get_attribute("#stage", "data-cycle")
            assert int(before[0]) < int(back) < int(after[0])
        finally:
            browser.close()
    assert problems == []
    assert requests == []


def test_render_page_escapes_closing_tags(h100):
    data = _data("v2", h100)
    data["problem"] = "</script><b>x"
    page = render_page(data)
    assert "</script><b>x" not in page
    assert page.count("</script>") == 2  # the data block's and the script's own
