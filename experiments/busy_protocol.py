"""Does a short kernel's GPU busy time depend on what ran just before it? The validation protocol against others.

`flashsim validate` times each call after writing 256 MiB (the write_cg flush), which leaves the L2 full of
dirty lines, and takes the median of three calls' profiler durations. Nsight Compute flushes by invalidating
and times one launch. On short development shapes the two disagree by up to a third for the same kernel
(experiments/results/h200/session31/short-blocks/). This times each (implementation, configuration) under
four protocols, `calls` profiled calls each:

- write: the write_cg flush, then the call (validate's protocol);
- write+idle: the flush, a GPU sleep of about 50 us, then the call (dirty lines left to drain);
- read: 256 MiB read with read_cg instead (the L2 full of clean lines), then the call;
- warm: the call alone, back to back (the inputs left in the L2 by the call before);
- write+pages: the write flush, then one 16-byte read every 64 KiB of the memory torch holds (the call's
  inputs, outputs and workspace): every page's address translation used, almost none of its lines
  (experiments/first_touch.py measures what a page's first touch costs apart from attention).

    python3 -m flashsim.experiments.busy_protocol [--calls 15] [--out FILE] [CONFIG_ID ...]

Writes one JSON object (provenance, rows: impl, config_id, protocol, busy_us: every call's duration) to FILE
(default experiments/results/h200/busy-protocol.json) and prints a table of medians.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

import numpy as np

from .validate import FLUSH_BYTES, FLUSH_KERNEL, gpu_calls, make_clock_probe, make_flush
from .validate_impls import IMPLS, Config, impl_context, inputs, make_call

DEFAULT_CONFIGS = (
    "b16-h48-kv6-n256-d64-causal", "b16-h48-kv6-n512-d64-causal", "b16-h48-kv6-n256-d128-causal",
    "b49-h48-kv6-n256-d128-causal", "b2-h24-kv12-n256-d64-causal", "b1-h16-kv8-n903-k2048-d128-causal",
    "b8-h132-n128-k8192-d128",
)
IMPL_NAMES = ("v2", "sdpa-flash", "v3", "sdpa-cudnn")
SLEEP_CYCLES = 90_000  # about 50 us at the H200's clock
PRIME_STRIDE = 64 << 10  # write+pages: one read per 64 KiB (the smallest page the allocator's memory may use)
ID = re.compile(r"b(\d+)-h(\d+)(?:-kv(\d+))?-n(\d+)(?:-k(\d+))?-d(\d+)(-causal)?$")


def parse_id(config_id: str) -> Config:
    m = ID.match(config_id)
    if not m:
        raise SystemExit(f"busy_protocol: cannot read configuration id {config_id!r} (e.g. b16-h48-kv6-n256-d64)")
    b, h, kv, n, nk, d, causal = m.groups()
    return Config(batch=int(b), heads=int(h), seqlen_q=int(n), headdim=int(d), causal=bool(causal),
                  seqlen_k=int(nk or 0), kv_heads=int(kv or 0))


def cases(config_ids, impl_names):
    """(config id, Config, q, k, v, implementation name, Impl) for every pair, each configuration's inputs made
    once (validate_impls.inputs) and freed after its implementations."""
    import torch

    for config_id in config_ids:
        cfg = parse_id(config_id)
        q, k, v = inputs(cfg)
        for name in impl_names:
            yield config_id, cfg, q, k, v, name, IMPLS[name]
        del q, k, v
        torch.cuda.empty_cache()


def warm_up(fn) -> str | None:
    """Three calls before any is timed; the first line of the error of a backend that refuses the shape (SDPA
    flash: causal Nq != Nk), or None."""
    import torch

    try:
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
    except RuntimeError as exc:
        return str(exc).splitlines()[0]
    return None


def protocols(cp, gpu) -> dict:
    """Each protocol's `prepare`, run before every call (the write flush kernel also marks where calls start)."""
    import torch

    from .calibrate_bench import BLOCK_TIME
    from .calibrate_gpu import load_module

    write = make_flush(cp, gpu)
    read = load_module(cp, "membw", gpu.arch).get_function("read_cg")
    buf = cp.empty(FLUSH_BYTES, dtype=cp.uint8)
    sink = cp.zeros(1, dtype=cp.uint32)
    blocks = 4 * gpu.sm_count
    times = cp.empty(blocks * BLOCK_TIME.itemsize, dtype=cp.uint8)
    n16 = np.uint64(FLUSH_BYTES // 16)
    tiny = cp.empty(16, dtype=cp.uint8)
    mark = make_flush_marker(cp, gpu, tiny)

    def write_idle():
        write()
        torch.cuda._sleep(SLEEP_CYCLES)

    def read_flush():
        mark()
        read((blocks,), (512,), (buf, n16, np.int32(1), sink, times))

    touch = load_module(cp, "page_walk", gpu.arch).get_function("touch_stride")

    def write_pages():
        write()
        for seg in torch.cuda.memory_snapshot():
            n = seg["total_size"] // PRIME_STRIDE
            touch((-(-n // 128),), (128,), (np.uint64(seg["address"]), np.uint64(PRIME_STRIDE // 16), np.uint64(n),
                                            sink))

    return {"write": write, "write+idle": write_idle, "read": read_flush, "warm": mark, "write+pages": write_pages}


def make_flush_marker(cp, gpu, tiny):
    """A write_cg launch over 16 bytes: it marks where a call starts in the profile and flushes nothing."""
    from .calibrate_bench import BLOCK_TIME
    from .calibrate_gpu import load_module

    write = load_module(cp, "membw", gpu.arch).get_function(FLUSH_KERNEL)
    times = cp.empty(BLOCK_TIME.itemsize, dtype=cp.uint8)
    return lambda: write((1,), (32,), (tiny, np.uint64(1), np.int32(1), times))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m flashsim.experiments.busy_protocol", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("configs", nargs="*", default=list(DEFAULT_CONFIGS))
    ap.add_argument("--impls", default=",".join(IMPL_NAMES))
    ap.add_argument("--calls", type=int, default=15)
    ap.add_argument("--protocols", default="", help="comma-separated subset (default: all)")
    ap.add_argument("--out", default="experiments/results/h200/busy-protocol.json")
    args = ap.parse_args(argv)
    import torch  # noqa: F401 (torch before CuPy, as the calls were timed so far)

    from .calibrate_gpu import argv_tail, provenance, read_gpu, require_gpu

    cp = require_gpu("busy_protocol")
    gpu = read_gpu(cp)
    preps = protocols(cp, gpu)
    clock = make_clock_probe(cp, gpu)
    rows = []
    for config_id, cfg, q, k, v, name, impl in cases(args.configs, args.impls.split(",")):
        with impl_context(impl):
            fn = make_call(impl, q, k, v, cfg)
            refused = warm_up(fn)
            if refused:
                rows.append({"impl": name, "config_id": config_id, "skipped": refused})
                continue
            for proto, prep in preps.items():
                if args.protocols and proto not in args.protocols.split(","):
                    continue
                # the read flush leaves the marker first; other work after the marker is the call's
                before = clock()
                work = gpu_calls(fn, prep, args.calls)
                clocks = [before, clock()]  # the SM clock (GHz) just before and after the profiled calls
                busy = [sum(e.time_range.elapsed_us() for e in w if not e.name.startswith(("read_cg", "touch_stride"))
                            and "spin_kernel" not in e.name) for w in work if w]
                rows.append({"impl": name, "config_id": config_id, "protocol": proto, "busy_us": busy,
                             "sm_clock_ghz": clocks})
                print(f"{name:11} {config_id:40} {proto:10} median {statistics.median(busy):9.2f} us  "
                      f"min {min(busy):9.2f}  max {max(busy):9.2f}  clock {clocks[0]:.3f}-{clocks[1]:.3f} GHz",
                      flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"provenance": provenance(cp, gpu, ["busy_protocol", *argv_tail()]),
                               "calls": args.calls, "sleep_cycles": SLEEP_CYCLES, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
