"""The xwarp microbenchmark (kernels/microbench/xwarp.cu): V1's softmax with its row statistics combined across
the block's warps through shared memory, measured on an H200 (experiments/results/h200/session28/xwarp/), and
the timing interpreter's cycles for the same ops."""

from __future__ import annotations

import json
from pathlib import Path

from flashsim.experiments.calibrate_xwarp import KERNELS, model_cycles
from flashsim.hw_profiles import load_profile

MEASURED = Path(__file__).resolve().parents[1] / "experiments/results/h200/session28/xwarp/calibration.json"


def _points() -> dict[tuple[str, int, int], float]:
    points = json.loads(MEASURED.read_text())["results"]["xwarp"]["points"]
    return {(p["kernel"], p["warps"], p["blocks_per_sm"]): p["cycles_per_iteration"] for p in points}


def test_every_kernel_was_measured_at_each_warp_and_block_count():
    assert set(_points()) == {(k, w, b) for k in KERNELS for w in (4, 8) for b in (1, 2)}


def test_the_exchange_is_a_latency_chain_that_grows_with_the_warps():
    m = _points()
    exchange = {(w, b): m["xwarp_v1", w, b] - m["xwarp_local", w, b] for w in (4, 8) for b in (1, 2)}
    for (w, b), cycles in exchange.items():
        # far more than its three barriers alone: the shared-memory round trips and the fold wait in turn
        assert cycles > 4 * m["xwarp_bar", w, b]
    assert min(exchange[8, b] for b in (1, 2)) > 1.4 * max(exchange[4, b] for b in (1, 2))
    # two blocks on an SM hide each other's chains: a block's step grows by far less than twice
    for w in (4, 8):
        assert m["xwarp_v1", w, 2] < 1.25 * m["xwarp_v1", w, 1]


def test_model_cycles_count_the_exchange_and_the_warps():
    h200 = load_profile("h200")
    for blocks in (1, 2):
        assert model_cycles(h200, 4, True, blocks) >= model_cycles(h200, 4, False, blocks)
    assert model_cycles(h200, 8, True, 1) > model_cycles(h200, 4, True, 1)
