"""`flashsim validate`: time real attention kernels on the GPU, measure their bytes with Nsight Compute, and
compare both with what the simulator predicts for the same configurations.

Measured: our reference kernels (kernels.attention, every algorithm) and PyTorch SDPA's backends: flash (the
FA2 kernels, simulated as v2 with the FA2 tiles), cuDNN (Hopper, simulated as v3), and math (unfused: two
batched GEMMs around a softmax, simulated as `standard`: by default it upcasts bf16 to fp32 and runs cuBLAS's
FFMA SGEMMs, so it is simulated in fp32 at the FP32 FMA rate; `sdpa-math-bf16` allows bf16 reductions and runs
bf16 tensor-core GEMMs). Each call is timed two ways: CUDA events around it (host time between its launches
included) and its GPU busy time from the CUDA profiler. Each measurement is appended to
validation-measured.jsonl as it finishes; a rerun skips what is there. The comparison (validate_compare.py)
can run on another machine with --compare-only.
"""

from __future__ import annotations

import statistics
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from flashsim.errors import FlashsimError

from . import validate_store as store
from . import validate_support as support
from .validate_impls import (  # noqa: F401 (re-exported: validate's callers use these names)
    DEV_IMPLS,
    IMPLS,
    Config,
    Impl,
    impl_context,
    inputs,
    key,
    make_call,
    our_tiling,
    sim_algo,
)
from .validate_passes import reference as pass_reference
from .validate_sets import BWD, DECODE, DEV, DEV_D256, DEV_LLM, DEV_TILES, TEST

DEFAULT_OUT_DIR = Path("experiments/results/h200")
BACKWARD_FLOPS_RATIO = 2.5  # FA2's convention (algorithms/problem.py): the backward counts 2.5x the forward
# Development and test measurements live in separate files, so that neither is ever scored as the other.
MEASURED_NAME = DEV.measured
TEST_MEASURED_NAME = TEST.measured
FLUSH_BYTES = 256 << 20  # written between timed calls: every call starts with a cold L2, like the simulator
FLUSH_KERNEL = "write_cg"  # the microbenchmark kernel that writes it (its name separates calls in profiles)
WRONG_REL_ERR = 0.1  # above this relative error against SDPA a kernel computes something else: not timed


def fa2_grid() -> list[Config]:
    """The FA2 paper's benchmark: seqlen 512..16k, batch 16k/seqlen, hidden 2048 as d64 x 32 heads or d128 x 16
    heads, causal off and on."""
    return [
        Config(16384 // n, heads, n, d, causal)
        for d, heads in ((64, 32), (128, 16))
        for causal in (False, True)
        for n in (512, 1024, 2048, 4096, 8192, 16384)
    ]


def ragged() -> list[Config]:
    """Shapes off the tile grid: sequence lengths that no tile divides, Nq != Nk, grouped-query heads."""
    return [
        Config(4, 16, 1000, 128),
        Config(8, 32, 700, 64),
        Config(3, 32, 3000, 64, causal=True),
        Config(1, 16, 5000, 128, causal=True),
        Config(4, 16, 1024, 128, seqlen_k=4096),
        Config(2, 32, 4096, 128, causal=True, kv_heads=8),
    ]


def smoke() -> list[Config]:
    """A few small configurations: checks the whole pipeline in seconds."""
    return [Config(8, 32, 512, 64), Config(4, 16, 1024, 128, causal=True), Config(2, 16, 1000, 128)]


def test_set() -> list[Config]:
    """The held-out test set (experiments/testset.py): LLM-shaped problems the model was never tuned on."""
    from .testset import committed

    return committed()


def llm_dev_set() -> list[Config]:
    """The LLM-shaped development set (experiments/testset.py, DEV_SEED): off-grid shapes to look for mechanisms."""
    from .testset import DEV_FILE, committed

    return committed(DEV_FILE)


def tiles_dev_set() -> list[Config]:
    """What a tile costs beyond its K/V iterations: 128 query rows per head (one Q tile of our kernels) over 1056
    heads (8 tiles per SM of the H200) against 128 to 8192 keys, so that time against the keys is a line whose
    intercept is the per-tile cost; and short causal GQA problems, whose tiles run one to eight iterations."""
    out = [Config(8, 132, 128, d, seqlen_k=nk) for d in (64, 128) for nk in (128, 512, 2048, 8192)]
    out += [Config(16, 48, n, d, causal=True, kv_heads=6) for d in (64, 128) for n in (256, 512, 1024)]
    return out


def d256_dev_set() -> list[Config]:
    """Head dim 256, where the test set's our-v2 rows come out 35% slow: one to many blocks per SM (a lone block
    per SM hides its loads' latency only with its own warps), causal or not, a GQA and two prefix shapes."""
    return [
        Config(1, 8, 2048, 256),
        Config(1, 8, 8192, 256),
        Config(1, 16, 16384, 256),
        Config(4, 16, 2048, 256),
        Config(16, 16, 1024, 256),
        Config(2, 32, 4096, 256),
        Config(1, 16, 8192, 256, causal=True),
        Config(4, 16, 2048, 256, causal=True),
        Config(16, 8, 1024, 256, causal=True),
        Config(2, 32, 4096, 256, causal=True, kv_heads=8),
        Config(4, 16, 1024, 256, seqlen_k=8192),
        Config(1, 32, 512, 256, seqlen_k=16384, causal=True),
    ]


def decode_test_set() -> list[Config]:
    """The held-out decode set (experiments/testset_passes.py): one decoding step against a dense or paged cache."""
    from .testset_passes import DECODE_SET

    return DECODE_SET.committed()


def backward_test_set() -> list[Config]:
    """The held-out backward set (experiments/testset_passes.py): the backward kernels alone."""
    from .testset_passes import BWD_SET

    return BWD_SET.committed()


GRIDS: dict[str, Callable[[], list[Config]]] = {"fa2": lambda: fa2_grid() + ragged(), "smoke": smoke,
                                                "test": test_set, DECODE.name: decode_test_set,
                                                BWD.name: backward_test_set, DEV_LLM.name: llm_dev_set,
                                                DEV_TILES.name: tiles_dev_set, DEV_D256.name: d256_dev_set}  # fmt: skip
# The measurement file of each grid: each test set's own, everything else the development set's.
MEASURED_NAMES = {"test": TEST_MEASURED_NAME, DECODE.name: DECODE.measured, BWD.name: BWD.measured,
                  DEV_LLM.name: DEV_LLM.measured, DEV_TILES.name: DEV_TILES.measured,
                  DEV_D256.name: DEV_D256.measured}  # fmt: skip
# What each grid times unless --impls says otherwise.
DEFAULT_IMPLS = {
    "fa2": DEV_IMPLS,
    "smoke": DEV_IMPLS,
    "test": ["v2", "v3", "sdpa-flash", "sdpa-cudnn"],
    DECODE.name: ["decode", "sdpa-flash", "sdpa-cudnn", "sdpa-efficient"],
    BWD.name: ["v2", "sdpa-flash", "sdpa-cudnn", "sdpa-efficient"],
    DEV_LLM.name: ["v2", "v3", "sdpa-flash", "sdpa-cudnn"],
    DEV_TILES.name: ["v2", "v3", "sdpa-flash", "sdpa-cudnn"],
    DEV_D256.name: ["v2", "v3", "sdpa-flash", "sdpa-cudnn"],
}
# Grids that are timed only (no Nsight Compute byte counts unless --ncu-sample asks for a sample of them).
TIMED_ONLY = ("test", DECODE.name, BWD.name, DEV_LLM.name, DEV_TILES.name, DEV_D256.name)
# The byte sample's draw: fixed, so a rerun measures (and resumes) the same configurations.
BYTE_SAMPLE_SEED = 2026


def byte_sample(configs: list[Config], n: int, seed: int = BYTE_SAMPLE_SEED) -> list[Config]:
    """n configurations for Nsight Compute's byte counts, half causal and half not (as far as each kind
    goes), drawn with a fixed seed; grouped-query ones come as the set has them."""
    import random

    rng = random.Random(seed)
    causal = sorted((c for c in configs if c.causal), key=lambda c: c.id)
    full = sorted((c for c in configs if not c.causal), key=lambda c: c.id)
    take_causal = min(len(causal), max(n - len(full), n // 2))
    picked = rng.sample(causal, take_causal) + rng.sample(full, min(len(full), n - take_causal))
    return sorted(picked, key=lambda c: c.id)


def measured_name(grid: str) -> str:
    return MEASURED_NAMES.get(grid, MEASURED_NAME)


def time_call(fn: Callable[[], object], flush, min_reps: int, max_reps: int, budget_s: float) -> list[float]:
    """Seconds per call: CUDA events around each call after two warm-up calls, L2 flushed before each;
    at least min_reps samples, more until max_reps or budget_s of wall time."""
    import torch

    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples: list[float] = []
    t0 = time.perf_counter()
    while len(samples) < max_reps and (len(samples) < min_reps or time.perf_counter() - t0 < budget_s):
        flush()
        start.record()
        fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e-3)
    return samples


def profiled_events(fn: Callable[[], object], prepare: Callable[[], None], calls: int) -> list:
    """The GPU work (kernels, copies, memsets as profiler events, in start order) of `calls` rounds of
    prepare() then fn(), read by the CUDA profiler (CUPTI)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the profiler warns about its own event buffering
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                prepare()
                fn()
            torch.cuda.synchronize()
    return sorted((e for e in prof.events() if str(e.device_type).endswith("CUDA")), key=lambda e: e.time_range.start)


def gpu_calls(fn: Callable[[], object], flush: Callable[[], None], calls: int = 3) -> list[list]:
    """The GPU work of each of `calls` calls (profiled_events), each call after an L2 flush whose kernel
    separates them."""
    calls_work: list[list] = []
    for e in profiled_events(fn, flush, calls):
        if e.name.split("(")[0].strip() == FLUSH_KERNEL:
            calls_work.append([])
        elif calls_work:
            calls_work[-1].append(e)
    return calls_work


def gpu_work(fn: Callable[[], object], flush: Callable[[], None], calls: int = 3) -> tuple[list[float], list[str]]:
    """GPU busy time per call: the summed durations of the work one call launches (gpu_calls). Unlike CUDA
    events around the call it leaves out host time between launches. Also the first call's work names."""
    busy, names, _ = gpu_parts(fn, flush, calls)
    return busy, names


def gpu_parts(fn: Callable[[], object], flush: Callable[[], None],
              calls: int = 3) -> tuple[list[float], list[str], list[float]]:
    """gpu_work, and each piece of the call's work (kernels, memsets, copies, in launch order) timed on its own:
    the median over the calls that launched the first call's pieces, in seconds."""
    calls_work = [w for w in gpu_calls(fn, flush, calls) if w]
    busy = [sum(e.time_range.elapsed_us() for e in work) * 1e-6 for work in calls_work]
    names = [e.name[:160] for e in calls_work[0]] if calls_work else []
    alike = [w for w in calls_work if [e.name[:160] for e in w] == names]
    parts = [statistics.median(w[i].time_range.elapsed_us() for w in alike) * 1e-6 for i in range(len(names))]
    return busy, names, parts


def rel_err(out, ref) -> float:
    """Relative L2 error; of the worst one for a tuple of tensors (the backward's dQ, dK, dV)."""
    if isinstance(out, (tuple, list)):
        return max(rel_err(o, r) for o, r in zip(out, ref, strict=True))
    import torch

    o, r = out.float(), ref.float()
    if not torch.isfinite(o).all():
        return float("inf")
    return float((o - r).norm() / r.norm())


# -- the sweep ---------------------------------------------------------------------------------------------


@dataclass
class SweepOptions:
    impls: list[str]
    configs: list[Config]
    out_dir: Path
    max_minutes: float = 8.0
    min_reps: int = 10
    max_reps: int = 30
    budget_s: float = 0.5
    retry_failed: bool = False
    measured: str = MEASURED_NAME  # the file name under out_dir (measured_name(grid))


def sweep(
    configs: list[Config],
    impls: list[str],
    path: Path,
    run_config: Callable[[Config, list[str]], Iterator[dict]],
    deadline: float,
    retry_failed: bool = False,
    log=print,
) -> int:
    """Measure every (config, impl) whose time key is not yet in the file at `path`, config by config:
    run_config(cfg, pending impls) yields one record per impl, and each is appended before the next is
    measured. Stops at the deadline (time.monotonic()). Returns the number of records written."""
    done = store.done_keys(store.load(path), retry_failed)
    written = 0
    for cfg in configs:
        todo = [n for n in impls if key("time", n, cfg) not in done]
        if not todo:
            continue
        if time.monotonic() > deadline:
            log("validate: time limit reached; rerun the same command to continue")
            break
        for rec in run_config(cfg, todo):
            store.append(path, rec)
            written += 1
            status = (
                f"{rec['time_s'] * 1e3:.3f} ms" if rec["status"] == "ok" else f"{rec['status']}: {rec.get('error')}"
            )
            log(f"validate: {cfg.id:<28} {rec['impl']:<15} {status}")
            if rec.get("fatal"):
                raise FlashsimError(
                    f"{rec['impl']} on {cfg.id} broke the CUDA context ({rec['error']}); what was measured is saved "
                    f"in {path}; rerun (it resumes) with --impls leaving {rec['impl']} out"
                )
            if time.monotonic() > deadline:
                break
    return written


def measure(opts: SweepOptions, deadline: float | None = None, log=print) -> Path:
    """Time the sweep on this GPU into the measurement file (see sweep); returns the file."""
    from .calibrate_gpu import argv_tail, provenance, read_gpu, require_gpu

    cp = require_gpu("flashsim validate")
    import torch

    if not torch.cuda.is_available():
        raise FlashsimError("flashsim validate needs PyTorch with CUDA; torch.cuda.is_available() is False")
    path = opts.out_dir / opts.measured
    profiled = {r["impl"] for r in store.load(path) if r.get("launched")}
    store.append(path, {"type": "session", **provenance(cp, read_gpu(cp), ["validate", *argv_tail()[1:]])})
    flush = make_flush(cp, read_gpu(cp))
    clock = make_clock_probe(cp, read_gpu(cp))

    def run_config(cfg: Config, names: list[str]) -> Iterator[dict]:
        q, k, v = inputs(cfg)
        refs: dict[str, object] = {}  # by causal alignment, made when an implementation needs it
        for name in names:
            align = support.causal_align(IMPLS[name], cfg)
            if align not in refs:
                refs[align] = pass_reference(q, k, v, cfg, align)
            rec = _measure_one(IMPLS[name], cfg, q, k, v, refs.get(align), flush, opts, name not in profiled, clock)
            if rec.get("launched"):
                profiled.add(name)
            yield rec
        del q, k, v, refs
        torch.cuda.empty_cache()

    deadline = deadline or time.monotonic() + opts.max_minutes * 60
    sweep(opts.configs, opts.impls, path, run_config, deadline, opts.retry_failed, log)
    return path


def make_flush(cp, gpu) -> Callable[[], None]:
    """A function that overwrites FLUSH_BYTES (several times L2) with the write_cg microbenchmark kernel, on
    the stream torch uses (both use the legacy default stream)."""
    from .calibrate_bench import BLOCK_TIME
    from .calibrate_gpu import load_module

    write = load_module(cp, "membw", gpu.arch).get_function(FLUSH_KERNEL)
    buf = cp.empty(FLUSH_BYTES, dtype=cp.uint8)
    blocks = 4 * gpu.sm_count
    times = cp.empty(blocks * BLOCK_TIME.itemsize, dtype=cp.uint8)
    n16 = np.uint64(FLUSH_BYTES // 16)
    return lambda: write((blocks,), (512,), (buf, n16, np.int32(1), times))


def make_clock_probe(cp, gpu) -> Callable[[], float]:
    """A function giving the SM clock (GHz) right now: a short read of an L2-resident MiB on every SM, its
    blocks' clock64 span over their %globaltimer span (the median block). A short kernel runs at the clock the
    work before it left (about 1.96 GHz after idling, 1.72 after a stretch of HBM streaming on the H200:
    experiments/results/h200/session31/busy-protocol/), so each timing records it."""
    from .calibrate_bench import BLOCK_TIME, block_times
    from .calibrate_gpu import load_module

    read = load_module(cp, "membw", gpu.arch).get_function("read_cg")
    buf, sink = cp.zeros(1 << 20, dtype=cp.uint8), cp.zeros(1, dtype=cp.uint32)
    blocks = gpu.sm_count
    times = cp.zeros(blocks * BLOCK_TIME.itemsize, dtype=cp.uint8)

    def clock_ghz() -> float:
        read((blocks,), (512,), (buf, np.uint64((1 << 20) // 16), np.int32(64), sink, times))
        cp.cuda.Device().synchronize()
        t = block_times(times)
        return float(np.median((t["clk1"] - t["clk0"]) / np.maximum(t["ns1"] - t["ns0"], 1)))

    return clock_ghz


def _reference(q, k, v, cfg: Config):
    """SDPA's output (flash backend, else whatever SDPA picks) to check each kernel computes attention."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    gqa = cfg.hkv != cfg.heads
    for backends in ([SDPBackend.FLASH_ATTENTION], [SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]):
        try:
            with sdpa_kernel(backends):
                return F.scaled_dot_product_attention(q, k, v, is_causal=cfg.causal, enable_gqa=gqa)
        except RuntimeError:
            continue
    return None


def _measure_one(impl: Impl, cfg: Config, q, k, v, ref, flush, opts: SweepOptions, profile_it: bool,
                 clock: Callable[[], float] | None = None) -> dict:
    import torch

    align = support.causal_align(impl, cfg)
    rec = {
        "type": "time",
        "key": key("time", impl.name, cfg),
        "impl": impl.name,
        "algo": sim_algo(impl, cfg),
        "config": cfg.problem_dict(impl.sim_dtype, align, paged=impl.paged),
        "config_id": cfg.id,
        "tiling": None,
        "causal_align": align,
        "status": "ok",
    }
    if cfg.pass_name != "fwd":  # forward records stay as they were
        rec["pass"] = cfg.pass_name
    if cfg.page_size and not impl.paged:
        rec["note"] = f"ran on a dense cache, standing in for pages of {cfg.page_size} (this backend has none)"
    try:
        # inside the try: a kernel that refuses the shape (a head dim it is not built for) is a skipped result
        with impl_context(impl):
            fn = make_call(impl, q, k, v, cfg)  # first: a kernel this checkout lacks is a skip, not a failure
            rec["tiling"] = our_tiling(impl, cfg, q, k, v)
            out = fn()
            torch.cuda.synchronize()
            err = rel_err(out, ref) if ref is not None else None
            rec["rel_err"] = err
            if err is not None and not err <= WRONG_REL_ERR:
                rec["status"] = "wrong"
                rec["error"] = f"relative error {err:.3g} against SDPA exceeds {WRONG_REL_ERR}"
                return rec
            del out
            samples = time_call(fn, flush, opts.min_reps, opts.max_reps, opts.budget_s)
            clocks = [clock()] if clock else []  # the SM clock the profiled calls start at (make_clock_probe)
            try:
                busy, names, parts = gpu_parts(fn, flush)
            except Exception as exc:  # the profiler is an extra; the event timing stands without it
                busy, names, parts = [], [f"(profiler failed: {type(exc).__name__})"], []
            if clock:
                clocks.append(clock())
                rec["sm_clock_ghz"] = [round(c, 4) for c in clocks]  # before and after the profiled calls
            if busy:
                rec.update(kernel_time_s=statistics.median(busy), kernels_per_call=len(names))
                # each piece's busy time (a library's memset beside its kernel: simulator/calls.py)
                rec["parts"] = [[n, t] for n, t in zip(names, parts, strict=True)]
            if profile_it:
                rec["launched"] = names
    except Exception as exc:  # a refused, missing or failing kernel is a result, and the sweep goes on
        rec["status"] = support.SKIPPED if support.is_refusal(exc) else "failed"
        rec["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        try:
            torch.cuda.synchronize()
        except Exception:  # a sticky error (illegal address): nothing more can run in this process
            rec["fatal"] = True
        return rec
    flops = 4.0 * cfg.batch * cfg.heads * cfg.seqlen_q * cfg.nk * cfg.headdim / (2 if cfg.causal else 1)
    flops *= BACKWARD_FLOPS_RATIO if cfg.pass_name == "bwd" else 1.0
    med = statistics.median(samples)
    rec.update(
        time_s=med,
        time_min_s=min(samples),
        time_max_s=max(samples),
        n=len(samples),
        tflops=flops / med / 1e12,
    )
    return rec


def measure_bytes(opts: SweepOptions, seqlens: list[int], deadline: float, log=print,
                  sample: list[Config] | None = None) -> None:
    """Nsight Compute byte counts for the non-causal configurations of the given sequence lengths (or for
    the given sample of configurations, any shape), for every implementation whose timing succeeded;
    appended like the timings."""
    from dataclasses import asdict

    from . import validate_ncu

    path = opts.out_dir / opts.measured
    records = store.load(path)
    done = store.done_keys(records, opts.retry_failed)
    timed = store.latest(records, "time")
    plan = []
    chosen = sample if sample is not None else [
        c for c in opts.configs
        if not c.causal and c.seqlen_q in seqlens and c.hkv == c.heads and c.nk == c.seqlen_q]
    for cfg in chosen:
        for name in opts.impls:
            t = timed.get(key("time", name, cfg))
            if key("ncu", name, cfg) in done or t is None or t["status"] != "ok":
                continue
            impl = IMPLS[name]
            plan.append({"key": key("ncu", name, cfg), "impl": name, "algo": impl.algo, "config": t["config"],
                         "config_id": cfg.id, "tiling": t.get("tiling"), "cfg": asdict(cfg)})  # fmt: skip
    if not plan:
        return
    for rec in validate_ncu.run(plan, deadline, log):
        store.append(path, rec)
