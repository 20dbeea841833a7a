"""The held-out test set of `flashsim validate --grid test`: attention problems shaped like LLM layers, drawn
once from a fixed seed. The model was tuned on the FA2 grid and the ragged shapes (the development set); it
is scored on these without ever being tuned on them.

The drawn list is committed (results/testset.json) and the grid reads it from there; a test draws it again
from SEED and requires the same list, so the set cannot be quietly redrawn until it flatters the model.
Only integer draws from Python's Mersenne Twister are used: the same on every platform and Python 3.

Each problem is cut to stay quick to measure on one GPU: at most FLOP_CAP of attention work per call and
MEMORY_CAP of Q, K, V and O. The cut takes the batch down first, then the heads (a tensor-parallel shard,
keeping the GQA ratio), then the query length (a chunk of a long prompt, which keeps the full context).

    python3 -m flashsim.experiments.testset            # the list, its total work and a time estimate
    python3 -m flashsim.experiments.testset --write    # commit the list again (the test then checks it)
    python3 -m flashsim.experiments.testset --dev      # the LLM-shaped development draw (another seed)
"""

from __future__ import annotations

import argparse
import json
import random
from dataclasses import asdict
from pathlib import Path

SEED = 20261130
COUNT = 72
FILE = Path(__file__).resolve().parent / "results" / "testset.json"
# A second draw from the same generator, another seed, as development data: LLM shapes off the FA2 grid where
# mechanisms may be looked for, so that the test set above stays untouched. No shape of it is in the test set.
DEV_SEED = 20261201
DEV_COUNT = 48
DEV_FILE = Path(__file__).resolve().parent / "results" / "devset-llm.json"

FLOP_CAP = 15 * 10**12  # attention FLOPs of one call (visible scores only)
MEMORY_CAP = 4 << 30  # bytes of Q, K, V and O in bf16
MIN_LEN, MAX_LEN = 128, 128 << 10
MIN_HEADS = 8
ELEM_BYTES = 2

HEADDIMS = ((64, 3), (96, 2), (128, 6), (256, 2))  # (head dim, weight): 128 dominates open LLMs
HEADS = (8, 12, 16, 24, 32, 40, 48, 64, 96, 128)  # query heads per GPU (whole model or a shard)
GQA_RATIOS = (1, 2, 4, 8)  # query heads per K/V head
HIDDEN = (512, 16384)  # heads x head dim of real layers (or their shards)
# prefill: one prompt, causal; prefix: new tokens against a cached prefix, causal, Nq < Nk;
# bidirectional: an encoder, Nq = Nk; cross: queries against another sequence, Nq != Nk
SCENARIOS = (("prefill", 4), ("prefix", 3), ("bidirectional", 2), ("cross", 1))

# What `flashsim validate` does per (configuration, implementation) (validate.SweepOptions defaults and
# _measure_one): a correctness call, two warm-up calls, 10..30 timed calls for up to 0.5 s, three profiled
# calls; each timed or profiled call follows a 256 MiB L2 flush. Plus a reference call per configuration and
# causal alignment.
ESTIMATE_TFLOPS = 400.0
UNTIMED_CALLS = 6
MIN_REPS, MAX_REPS, BUDGET_S = 10, 30, 0.5
CALL_OVERHEAD_S = 150e-6  # flush kernel and synchronisation around one call
MEASUREMENT_OVERHEAD_S = 0.1  # profiler start and stop, allocation
TEST_IMPLS = ("v2", "v3", "sdpa-flash", "sdpa-cudnn")


def visible_pairs(nq: int, nk: int, causal: bool) -> int:
    """(query, key) pairs a causal mask leaves visible, bottom-right aligned (the more of the two
    alignments when Nq <= Nk); every pair without a mask."""
    if not causal:
        return nq * nk
    shift = nk - nq  # row r sees keys 0 .. r + shift
    if shift < 0:  # the first -shift rows see nothing, the last Nk rows a triangle
        return nk * (nk + 1) // 2
    return nq * shift + nq * (nq + 1) // 2


def work_flops(cfg) -> int:
    """Attention FLOPs of one call: two GEMMs of 2 FLOPs per multiply-add over the visible scores."""
    return 4 * cfg.batch * cfg.heads * cfg.headdim * visible_pairs(cfg.seqlen_q, cfg.nk, cfg.causal)


def memory_bytes(cfg) -> int:
    """Q, K, V and O in bf16."""
    return ELEM_BYTES * cfg.headdim * cfg.batch * (2 * cfg.heads * cfg.seqlen_q + 2 * cfg.hkv * cfg.nk)


def generate(seed: int = SEED, count: int = COUNT, exclude: frozenset[str] = frozenset()) -> list:
    """`count` problems drawn from `seed` (validate.Config), unique by id and none of `exclude`, in draw order."""
    from .validate import Config

    rng = random.Random(seed)
    out: dict[str, Config] = {}
    while len(out) < count:
        cfg = _fit(_draw(rng, Config))
        if cfg.id not in exclude:
            out.setdefault(cfg.id, cfg)
    return list(out.values())


def generate_dev() -> list:
    """The LLM-shaped development draw: DEV_COUNT problems from DEV_SEED, none of them a test-set shape."""
    return generate(DEV_SEED, DEV_COUNT, exclude=frozenset(c.id for c in generate()))


def _weighted(rng: random.Random, table: tuple) -> object:
    total = sum(w for _, w in table)
    pick = rng.randrange(total)
    for value, weight in table:
        if pick < weight:
            return value
        pick -= weight
    raise AssertionError("unreachable")


def _length(rng: random.Random, lo: int = MIN_LEN) -> int:
    """A sequence length from MIN_LEN to MAX_LEN, about uniform in its logarithm: a power of two, a round
    number, or an odd one that no tile divides (a third each)."""
    e = rng.randrange(lo.bit_length() - 1, MAX_LEN.bit_length() - 1)  # [2^e, 2^(e+1))
    n = rng.randrange(1 << e, 2 << e)
    style = rng.randrange(3)
    if style == 0:
        n = 1 << (e + rng.randrange(2))
    elif style == 1:
        n = max(lo, n // 256 * 256)
    elif n % 64 == 0:
        n += 1 + rng.randrange(63)
    return max(lo, min(MAX_LEN, n))


def _draw(rng: random.Random, config: type, headdims: tuple = HEADDIMS, scenarios: tuple = SCENARIOS):
    while True:
        d = _weighted(rng, headdims)
        heads = HEADS[rng.randrange(len(HEADS))]
        if HIDDEN[0] <= heads * d <= HIDDEN[1]:
            break
    ratios = [r for r in GQA_RATIOS if heads % r == 0]
    ratio = ratios[rng.randrange(len(ratios))]
    batch = min(64, rng.randrange(1 << (e := rng.randrange(7)), 2 << e))
    scenario = _weighted(rng, scenarios)
    if scenario == "prefix":
        nk = _length(rng, 2 * MIN_LEN)
        nq = rng.randrange(max(MIN_LEN, nk // 64), nk // 2 + 1)
    elif scenario == "cross":
        nq, nk = _length(rng), _length(rng)
    else:
        nq = nk = _length(rng)
    causal = scenario in ("prefill", "prefix")
    return config(batch, heads, nq, d, causal, seqlen_k=nk if nk != nq else 0,
                  kv_heads=heads // ratio if ratio > 1 else 0)  # fmt: skip


def _fit(cfg, flop_cap: int = FLOP_CAP, memory_cap: int = MEMORY_CAP):
    """The problem cut to flop_cap and memory_cap: batch first, then heads (GQA ratio kept), then Nq."""
    from dataclasses import replace

    def over(c) -> bool:
        return work_flops(c) > flop_cap or memory_bytes(c) > memory_cap

    while over(cfg) and cfg.batch > 1:
        cfg = replace(cfg, batch=cfg.batch // 2)
    ratio = cfg.heads // cfg.hkv
    while over(cfg) and cfg.heads // 2 >= MIN_HEADS and cfg.hkv % 2 == 0:
        kv = cfg.hkv // 2
        cfg = replace(cfg, heads=kv * ratio, kv_heads=kv if ratio > 1 else 0)
    while over(cfg) and cfg.seqlen_q > MIN_LEN:
        nq = max(MIN_LEN, cfg.seqlen_q * 3 // 4)
        cfg = replace(cfg, seqlen_q=nq, seqlen_k=cfg.nk)
    if over(cfg):
        raise AssertionError(f"{cfg.id} cannot be cut under the caps")  # the draw ranges make this impossible
    return replace(cfg, seqlen_k=cfg.nk if cfg.nk != cfg.seqlen_q else 0)


# -- the committed list ---------------------------------------------------------------------------------


def as_json(configs: list, header: dict | None = None) -> str:
    header = {**(header or {"seed": SEED, "flop_cap": FLOP_CAP, "memory_cap_bytes": MEMORY_CAP}), "count": len(configs)}
    rows = [json.dumps({"id": c.id, **config_row(c)}, sort_keys=True) for c in configs]
    return json.dumps(header, sort_keys=True)[:-1] + ', "configs": [\n' + ",\n".join(rows) + "\n]}\n"


def config_row(cfg) -> dict:
    """A configuration's fields, less the pass and page size where they are the defaults (the forward set's
    rows predate them)."""
    fields = asdict(cfg)
    for name, default in (("pass_name", "fwd"), ("page_size", 0)):
        if fields.get(name) == default:
            del fields[name]
    return fields


def committed(path: Path = FILE, writer: str = "testset") -> list:
    """The committed test set (validate.Config), in its order; `writer` is the module that writes it."""
    from flashsim.errors import FlashsimError

    from .validate import Config

    if not path.is_file():
        raise FlashsimError(f"no test set at {path}; write it with python3 -m flashsim.experiments.{writer} --write")
    data = json.loads(path.read_text())
    return [Config(**{k: v for k, v in row.items() if k != "id"}) for row in data["configs"]]


# -- measuring cost -------------------------------------------------------------------------------------


def impls_for(cfg, impls: tuple[str, ...] = TEST_IMPLS) -> list[str]:
    """The implementations that will be timed on cfg: our kernels skip head dims they are not built for (the
    kernel registry says which); SDPA's backends decide for themselves when called."""
    from flashsim.kernels import registry

    ours = registry.families()
    return [i for i in impls if i not in ours or cfg.headdim in ours[i].headdims]


def call_seconds(flops: float, tflops: float = ESTIMATE_TFLOPS) -> float:
    return flops / (tflops * 1e12)


def calls_per_measurement(t: float) -> int:
    """Calls of one (configuration, implementation) measurement whose call takes t seconds."""
    timed = min(MAX_REPS, max(MIN_REPS, -int(-BUDGET_S // (t + CALL_OVERHEAD_S))))
    return UNTIMED_CALLS + timed


def estimate(configs: list, impls: tuple[str, ...] = TEST_IMPLS) -> dict:
    """Total FLOPs of the calls that validate makes, and their device time at ESTIMATE_TFLOPS."""
    flops = seconds = 0.0
    for cfg in configs:
        w = work_flops(cfg)
        t = call_seconds(w)
        # the reference call, and a second one with the other causal alignment where the two differ
        seconds += t * (2 if cfg.causal and cfg.seqlen_q != cfg.nk else 1)
        for _ in impls_for(cfg, impls):
            calls = calls_per_measurement(t)
            flops += w * calls
            seconds += calls * (t + CALL_OVERHEAD_S) + MEASUREMENT_OVERHEAD_S
    return {"configs": len(configs), "flops": flops, "seconds": seconds, "tflops": ESTIMATE_TFLOPS}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help=f"write the drawn list to {FILE.name}")
    dev_help = f"the development draw (seed {DEV_SEED}, {DEV_FILE.name}) instead of the test set"
    parser.add_argument("--dev", action="store_true", help=dev_help)
    args = parser.parse_args(argv)
    configs = generate_dev() if args.dev else generate()
    if args.write:
        header = {"seed": DEV_SEED, "flop_cap": FLOP_CAP, "memory_cap_bytes": MEMORY_CAP} if args.dev else None
        (DEV_FILE if args.dev else FILE).write_text(as_json(configs, header))
    for c in configs:
        print(f"{c.id:<40} {work_flops(c) / 1e12:7.3f} TFLOP {memory_bytes(c) / 2**30:6.2f} GiB")
    e = estimate(configs)
    print(f"{e['configs']} configurations x {', '.join(TEST_IMPLS)}: {e['flops'] / 1e12:.0f} TFLOP in all calls, "
          f"about {e['seconds'] / 60:.1f} min of device time at {e['tflops']:.0f} TFLOP/s")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
