"""The held-out decode and backward test sets (`flashsim validate --grid test-decode` / `--grid test-bwd`),
frozen as the forward one is (experiments/testset.py, whose draws and caps they reuse): drawn once from a
fixed seed, committed (results/testset-decode.json, results/testset-bwd.json), and checked by a test that
draws them again.

Decode: one decoding step of a served model: batch 1..64, 8..64 query heads with GQA ratios 1..8, 1..16 new
tokens (mostly one; causal, aligned bottom-right, for some of the longer ones) against a cache of 1k..128k
tokens (odd lengths too), head dim 64 or 128, the cache dense or paged (16..256 tokens a page, about half).
Cut to DECODE_MEMORY_CAP of K/V cache: the batch first, then the heads.

Backward: drawn like the forward set but with head dims 64 and 128 and the scenarios training runs
(prefill and bidirectional mostly; some Nq != Nk), cut to BWD_FLOP_CAP of forward work (the backward runs
2.5x that) and BWD_MEMORY_CAP.

    python3 -m flashsim.experiments.testset_passes            # both lists and the device-time estimate
    python3 -m flashsim.experiments.testset_passes --write    # commit the lists again (a test then checks them)
"""

from __future__ import annotations

import argparse
import random
from dataclasses import dataclass, replace
from pathlib import Path

from . import testset as base

RESULTS = Path(__file__).resolve().parent / "results"

# -- decode -----------------------------------------------------------------------------------------------

DECODE_SEED = 20261201
DECODE_COUNT = 32
DECODE_HEADDIMS = ((64, 1), (128, 3))
DECODE_HEADS = (8, 12, 16, 24, 32, 40, 48, 64)
MIN_CACHE = 1 << 10
MAX_QUERIES = 16
ONE_TOKEN = 2  # in 3: a step of one new token (the rest: 2..16, speculative decoding or a chunk)
DECODE_PAGES = ((0, 4), (16, 1), (32, 1), (64, 1), (256, 1))  # (tokens per page, weight); 0: dense
DECODE_MEMORY_CAP = 4 << 30  # bytes of K and V cache in bf16

# -- backward ---------------------------------------------------------------------------------------------

BWD_SEED = 20261202
BWD_COUNT = 32
BWD_HEADDIMS = ((64, 1), (128, 2))
BWD_SCENARIOS = (("prefill", 4), ("bidirectional", 3), ("cross", 1), ("prefix", 1))
BWD_FLOP_CAP = 4 * 10**12  # forward FLOPs of one call: the backward runs 2.5x that
BWD_MEMORY_CAP = 2 << 30  # bytes of Q, K, V and O (dO and the gradients double it)
BACKWARD_RATIO = 2.5  # backward FLOPs per forward FLOP (FA2's convention)

# -- what measuring costs (testset.estimate's accounting) ---------------------------------------------------

DEVICE_IMPLS = ("sdpa-flash", "sdpa-cudnn", "sdpa-efficient")  # what experiments/h200_testset_inference.sh times
DECODE_BANDWIDTH = 2.5e12  # bytes/s a decode kernel reads its cache at, on the slow side of an H200's 4.8 TB/s
BWD_TFLOPS = 200.0  # backward FLOP rate of SDPA's kernels, on the slow side
SETUP_OVERHEAD_S = 0.3  # per measurement: a cuDNN graph built for a new shape, profiler start and stop
PROCESS_START_S = 30.0  # importing torch, loading the flush kernel, CUDA context


def kv_bytes(cfg) -> int:
    return base.ELEM_BYTES * 2 * cfg.batch * cfg.hkv * cfg.nk * cfg.headdim


def generate_decode(seed: int = DECODE_SEED, count: int = DECODE_COUNT) -> list:
    from .validate import Config

    rng = random.Random(seed)
    out: dict[str, Config] = {}
    while len(out) < count:
        cfg = _fit_decode(_draw_decode(rng, Config))
        out.setdefault(cfg.id, cfg)
    return list(out.values())


def _draw_decode(rng: random.Random, config: type):
    d = base._weighted(rng, DECODE_HEADDIMS)
    heads = DECODE_HEADS[rng.randrange(len(DECODE_HEADS))]
    ratios = [r for r in base.GQA_RATIOS if heads % r == 0]
    ratio = ratios[rng.randrange(len(ratios))]
    batch = min(64, rng.randrange(1 << (e := rng.randrange(7)), 2 << e))
    nk = base._length(rng, MIN_CACHE)
    nq = 1 if rng.randrange(3) < ONE_TOKEN else rng.randrange(2, MAX_QUERIES + 1)
    causal = nq > 1 and rng.randrange(3) > 0  # one new token sees the whole cache either way
    page = base._weighted(rng, DECODE_PAGES)
    return config(batch, heads, nq, d, causal, seqlen_k=nk, kv_heads=heads // ratio if ratio > 1 else 0,
                  pass_name="decode", page_size=page)  # fmt: skip


def _fit_decode(cfg):
    """The step cut to DECODE_MEMORY_CAP of cache: batch first, then heads (GQA ratio kept)."""
    while kv_bytes(cfg) > DECODE_MEMORY_CAP and cfg.batch > 1:
        cfg = replace(cfg, batch=cfg.batch // 2)
    ratio = cfg.heads // cfg.hkv
    while kv_bytes(cfg) > DECODE_MEMORY_CAP and cfg.hkv % 2 == 0 and cfg.heads // 2 >= base.MIN_HEADS:
        kv = cfg.hkv // 2
        cfg = replace(cfg, heads=kv * ratio, kv_heads=kv if ratio > 1 else 0)
    if kv_bytes(cfg) > DECODE_MEMORY_CAP:
        raise AssertionError(f"{cfg.id} cannot be cut under the cap")  # 64 heads x 128k x d128 fit it
    return cfg


def generate_bwd(seed: int = BWD_SEED, count: int = BWD_COUNT) -> list:
    from .validate import Config

    rng = random.Random(seed)
    out: dict[str, Config] = {}
    while len(out) < count:
        cfg = base._fit(base._draw(rng, Config, BWD_HEADDIMS, BWD_SCENARIOS), BWD_FLOP_CAP, BWD_MEMORY_CAP)
        cfg = replace(cfg, pass_name="bwd")
        out.setdefault(cfg.id, cfg)
    return list(out.values())


# -- the committed lists --------------------------------------------------------------------------------


@dataclass(frozen=True)
class FrozenSet:
    name: str
    seed: int
    file: Path
    draw: object  # (seed) -> list of validate.Config
    caps: dict

    def generate(self, seed: int | None = None) -> list:
        return self.draw(self.seed if seed is None else seed)

    def as_json(self, configs: list) -> str:
        return base.as_json(configs, {"seed": self.seed, **self.caps})

    def committed(self) -> list:
        return base.committed(self.file, "testset_passes")


DECODE_SET = FrozenSet("test-decode", DECODE_SEED, RESULTS / "testset-decode.json", generate_decode,
                       {"kv_cache_cap_bytes": DECODE_MEMORY_CAP})  # fmt: skip
BWD_SET = FrozenSet("test-bwd", BWD_SEED, RESULTS / "testset-bwd.json", generate_bwd,
                    {"flop_cap": BWD_FLOP_CAP, "memory_cap_bytes": BWD_MEMORY_CAP})  # fmt: skip


# -- measuring cost -------------------------------------------------------------------------------------


def call_seconds(cfg) -> float:
    """One call's device time, guessed on the slow side: a decoding step reads its cache; a backward runs
    2.5x the forward's FLOPs."""
    if cfg.is_decode:
        return kv_bytes(cfg) / DECODE_BANDWIDTH
    return BACKWARD_RATIO * base.work_flops(cfg) / (BWD_TFLOPS * 1e12)


def estimate(configs: list, impls: tuple[str, ...] = DEVICE_IMPLS) -> dict:
    """Device seconds of `flashsim validate` on the set: per configuration the reference (for the backward a
    forward and a backward), per implementation its untimed and timed calls (testset.calls_per_measurement),
    the backward's forward outside them, and a setup."""
    seconds = PROCESS_START_S
    for cfg in configs:
        t = call_seconds(cfg)
        fwd = 0.0 if cfg.is_decode else t / BACKWARD_RATIO
        # the reference, twice where the causal alignments differ; a bottom-right one repeats the K/V heads
        refs = 2 if cfg.causal and cfg.seqlen_q != cfg.nk else 1
        seconds += refs * (t + fwd) * (cfg.heads // cfg.hkv if cfg.is_decode else 1)
        for _ in impls:
            calls = base.calls_per_measurement(t)
            seconds += calls * (t + base.CALL_OVERHEAD_S) + fwd + SETUP_OVERHEAD_S
    return {"configs": len(configs), "seconds": seconds}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="write the drawn lists to results/")
    args = parser.parse_args(argv)
    total = 0.0
    for s in (DECODE_SET, BWD_SET):
        configs = s.generate()
        if args.write:
            s.file.write_text(s.as_json(configs))
        for c in configs:
            print(f"{c.id:<48} {call_seconds(c) * 1e3:8.3f} ms a call (guess)")
        e = estimate(configs)
        total += e["seconds"]
        print(f"{s.name}: {e['configs']} configurations x {', '.join(DEVICE_IMPLS)}: about "
              f"{e['seconds'] / 60:.1f} min of device time")  # fmt: skip
    print(f"both sets: about {total / 60:.1f} min of device time")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
