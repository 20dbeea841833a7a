"""The two sets `flashsim validate` scores the simulator on, each measured into and reported from its own files.

dev: the FA2 benchmark grid and the ragged shapes, on which the model was developed and tuned.
test: the held-out LLM shapes of experiments/testset.py, on which it never was.
test-decode, test-bwd: held-out decoding steps and backward passes (experiments/testset_passes.py).
dev-llm: LLM shapes drawn like the test set from another seed, as development data off the FA2 grid.
dev-tiles: one Q tile per head against K/V of 128-8192 keys, and short causal problems: what a tile costs
beyond its K/V iterations, as development data.
dev-d256: head dim 256 at few and many blocks per SM, as development data for what the test set's d256 rows
miss.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DataSet:
    name: str
    title: str
    measured: str  # measurement file (JSON lines) under the results directory
    stem: str  # the report files: <stem>.json, <stem>.md, <stem>.png

    @property
    def report(self) -> str:
        return f"{self.stem}.json"


DEV = DataSet("dev", "development set (FA2 grid + ragged; the model was tuned on it)", "validation-measured.jsonl",
              "validation")  # fmt: skip
TEST = DataSet("test", "test set (LLM shapes the model was never tuned on)", "testset-measured.jsonl", "testset")
DECODE = DataSet("test-decode", "decode test set (one decoding step against a dense or paged K/V cache; never "
                 "tuned on)", "testset-decode-measured.jsonl", "testset-decode")  # fmt: skip
BWD = DataSet("test-bwd", "backward test set (the backward kernels alone; never tuned on)",
              "testset-bwd-measured.jsonl", "testset-bwd")  # fmt: skip
DEV_LLM = DataSet("dev-llm", "LLM-shaped development set (drawn like the test set from another seed; "
                  "mechanisms may be looked for here)", "devset-llm-measured.jsonl", "devset-llm")  # fmt: skip
DEV_TILES = DataSet("dev-tiles", "per-tile development set (a Q tile per head against 128-8192 keys, and short "
                    "causal problems; what a tile costs beyond its iterations)", "devset-tiles-measured.jsonl",
                    "devset-tiles")  # fmt: skip
DEV_D256 = DataSet("dev-d256", "head-dim-256 development set (few and many blocks per SM, causal or not, GQA and "
                   "prefix shapes; where the test set's d256 rows go wrong, looked for off the test set)",
                   "devset-d256-measured.jsonl", "devset-d256")  # fmt: skip
SETS = (DEV, TEST, DECODE, BWD, DEV_LLM, DEV_TILES, DEV_D256)
