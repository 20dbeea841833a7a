"""Session 32's measurements of short kernels (experiments/results/h200/session32/), read back: the page
translations cost nothing after the flush; one-wave warps wait for code and constants that many-wave ones find
cached; an SM's coalesced stores leave at 32-34 bytes a cycle, our v2's epilogue at about 20."""

import gzip
import json
import statistics
from pathlib import Path

import pytest
from flashsim.experiments import short_kernels

HERE = Path(__file__).resolve().parents[1] / "experiments/results/h200/session32"


def _chase(kind: str) -> dict:
    rows = json.loads((HERE / "first-touch/first-touch.json").read_text())["rows"]
    return {r["condition"]: r["median"] for r in rows if r["test"] == "chase" and r["kind"] == kind}


@pytest.mark.parametrize("kind", ["pages", "lines"])
def test_flush_leaves_translations(kind):
    chase = _chase(kind)
    # a step into a page untouched since the flush costs what a step within one page does, primed or not
    assert abs(chase["write"] / chase["write+prime"] - 1) < 0.05
    assert abs(chase["write"] / _chase("lines")["write"] - 1) < 0.1
    assert chase["warm"] < 0.5 * chase["write"]  # the cold steps really missed


def test_primer_and_idle_do_not_change_attention():
    rows = json.loads((HERE / "first-touch/busy-pages.json").read_text())["rows"]
    busy = {(r["impl"], r["config_id"], r["protocol"]): statistics.median(r["busy_us"]) for r in rows if "busy_us" in r}
    pairs = [k[:2] for k in busy if k[2] == "write"]
    assert len(pairs) >= 20
    for pair in pairs:
        write = busy[(*pair, "write")]
        assert abs(busy[(*pair, "write+pages")] - write) < max(0.25, 0.05 * write)
        assert abs(busy[(*pair, "write+idle")] - write) < max(0.25, 0.05 * write)


def test_one_wave_warps_wait_for_code_and_constants():
    sass = HERE / "short-cycles/sass"
    one_wave = [short_kernels.stall_shares(sass / f"v2-{s}-sass.csv.gz")
                for s in ("b1-h64-n128-d128", "b2-h24-kv12-n256-d64-causal")]
    many = short_kernels.stall_shares(sass / "v2-b16-h48-kv6-n512-d64-causal-sass.csv.gz")
    for share in one_wave:
        assert share["stall_no_inst"] + share["stall_imc"] > 0.12
    assert many["stall_no_inst"] + many["stall_imc"] < 0.04


def test_ncu_reports_read_back():
    ncu = HERE / "short-cycles/ncu"
    for path in sorted(ncu.glob("ncu-*.txt")):
        m = short_kernels.ncu_metrics(path)
        # elapsed cycles exceed the busiest SM's active cycles by the launch's own time
        assert 2500 < m["sm__cycles_elapsed.max"] - m["sm__cycles_active.max"] < 4000, path.name
        assert 1.7 < m["sm__cycles_elapsed.avg.per_second"] < 2.0, path.name


def test_sm_store_path_rate():
    rows = json.loads((HERE / "store-burst/store-burst.json").read_text())["rows"]
    assert len(rows) == 36
    for r in rows:
        rate = r["bytes_per_clk_per_sm"]
        if r["blocks"] < 132:  # one SM or half the chip: the SM's own path, whatever the warps and the L2
            assert 28 < rate < 36, r
        elif r["warps"] * r["kib_per_warp"] >= 64:  # every SM storing a lot: the chip's limit
            assert 18 < rate < 24, r
        assert r["fence_cycles"] > r["issue_cycles"] + 500  # visible well after issue


@pytest.mark.parametrize("run", [HERE, HERE.parent / "session38"])
def test_v2_epilogue_stores_near_20_bytes_a_cycle(run):
    """Every one-wave shape a run stamped (session 38 added a non-causal twin)."""
    from flashsim.experiments import phase_stamps

    rows = json.loads(gzip.decompress((run / "phase-stamps/phase-stamps.json.gz").read_bytes()))["rows"]
    heads_dim = {c: d for c, d, *_ in phase_stamps.SHAPES}
    stamped = [c for c in phase_stamps.ONE_WAVE if any(r["config_id"] == c for r in rows)]
    assert len(stamped) >= 4
    for config_id in stamped:
        blocks = [b for r in rows if r["config_id"] == config_id and r["protocol"] == "write" for b in r["blocks"]]
        stored = statistics.median(b["phases"][phase_stamps.PHASES.index("O stored")] for b in blocks)
        block_bytes = 128 * heads_dim[config_id] * 2  # a 128-row bf16 O tile
        assert 15 < block_bytes / stored < 25, config_id


def test_a_masked_step_takes_its_codes_fetch():
    """Session 38's twin: the first step of a causal B2 H24/12 N256 d64 block is its masked one, and the phase
    that holds the mask (S issued -> V landed) is 800-890 cycles longer than the unmasked twin's: about what
    the mask's 56 lines of code take to come at the streamed fetch's 16.4 cycles a line (918)."""
    from flashsim.experiments import phase_stamps

    rows = json.loads(gzip.decompress((HERE.parent / "session38/phase-stamps/phase-stamps.json.gz")
                                      .read_bytes()))["rows"]
    phase = phase_stamps.PHASES.index("step 1: V landed")

    def median(config_id, protocol):
        return statistics.median(b["phases"][phase] for r in rows if r["config_id"] == config_id
                                 and r["protocol"] == protocol for b in r["blocks"])

    for protocol in ("write", "warm"):
        extra = median("b2-h24-kv12-n256-d64-causal", protocol) - median("b2-h24-kv12-n256-d64", protocol)
        assert 700 < extra < 56 * 16.4 * 1.1, protocol


def test_stamped_build_names_every_shape():
    from flashsim.experiments import phase_stamps

    text = phase_stamps.tu_text()
    assert text.count("#define FLASHSIM_PHASE_STAMPS") == 1
    for _, d, bm, bn in phase_stamps.SHAPES:
        assert f"FLASHSIM_V2({phase_stamps._name(d, bm, bn)}, bf16, {d}, {bm}, {bn}, 4, 2)" in text


def test_v3_first_tile_starts_late_and_ends_slow():
    from flashsim.experiments import phase_stamps_v3 as v3

    data = json.loads(gzip.decompress((HERE / "phase-stamps-v3/phase-stamps-v3.json.gz").read_bytes()))
    assert tuple(data["consumer_phases"]) == v3.CONSUMER and tuple(data["producer_phases"]) == v3.PRODUCER
    for row in data["rows"]:
        for block in row["blocks"]:
            assert 1000 < sum(block["producer"][:4]) < 2500  # entry to Q's copy issued
            first = block["consumers"][0]
            assert first[v3.CONSUMER.index("O stored")] > 1000  # normalising and storing O


def test_v3_stamped_build_holds_the_launched_entries():
    from flashsim.experiments import phase_stamps_v3 as v3
    from flashsim.kernels import hopper_tiles

    text = v3.tu_text()
    assert text.count("#define FLASHSIM_PHASE_STAMPS") == 1
    rows = {t.kernel: t for t in hopper_tiles.tiles("v3")}
    for config_id in v3.SHAPES:
        _, launch = v3._launch(config_id)
        assert rows[launch.name].entry_line in text
