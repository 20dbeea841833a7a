"""Every piece of GPU work one SDPA call launches, each timed on its own: kernels and the memsets and copies
that GPU busy time also counts.

`flashsim validate` measures a call's GPU busy time as the summed durations of everything the call puts on the
GPU after the write flush (validate.gpu_work). cuDNN's forward starts each call with a `Memset (Device)` before
its kernel; this says how long each piece takes, with validate's protocol, so the model can charge each piece
on its own. `--memset` adds a microbenchmark: cudaMemsetAsync of 4 B to 64 MiB after the same flush.

    python3 -m flashsim.experiments.call_events [--impls sdpa-cudnn,sdpa-flash] [--calls 5]
        [--from-report REPORT.json ...] [--memset] [--out FILE] [CONFIG_ID ...]

Writes one JSON object (provenance; rows: impl, config_id, events: per call a list of {name, cat, us, bytes});
memset: bytes, busy_us per call) and prints a table of medians. Needs a CUDA GPU, torch and CuPy.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from .busy_protocol import cases, warm_up
from .sdpa_launches import trace_events
from .validate import FLUSH_KERNEL, make_clock_probe, make_flush
from .validate_impls import impl_context, make_call

MEMSET_BYTES = (4, 256, 4 << 10, 64 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20)
GPU_CATS = ("kernel", "gpu_memset", "gpu_memcpy")


def _trace(fn, prepare, calls: int) -> list[dict]:
    """The GPU events of `calls` rounds of prepare() then fn(), from the profiler's trace, in start order:
    {name, cat, ts, us, bytes}."""
    import warnings

    import torch
    from torch.profiler import ProfilerActivity, profile

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                prepare()
                fn()
            torch.cuda.synchronize()
    out = [{"name": e.get("name", ""), "cat": e.get("cat"), "ts": e.get("ts", 0), "us": e.get("dur", 0),
            "bytes": (e.get("args") or {}).get("bytes")} for e in trace_events(prof) if e.get("cat") in GPU_CATS]
    return sorted(out, key=lambda e: e["ts"])


def per_call(events: list[dict]) -> list[list[dict]]:
    """The events after each flush kernel, one list per call (the flush marks where a call starts)."""
    calls: list[list[dict]] = []
    for e in events:
        if e["name"].split("(")[0].strip() == FLUSH_KERNEL:
            calls.append([])
        elif calls:
            calls[-1].append({k: e[k] for k in ("name", "cat", "us", "bytes")})
    return [c for c in calls if c]


def report_ids(paths: list[str], impls: list[str]) -> list[str]:
    """Configuration ids that a committed report holds rows of for any of `impls`, in report order."""
    seen: dict[str, None] = {}
    for p in paths:
        for r in json.loads(Path(p).read_text()).get("rows", []):
            if r.get("impl") in impls and r.get("measured", {}).get("kernel_time_s"):
                seen.setdefault(r["config_id"], None)
    return list(seen)


def memset_rows(cp, flush, calls: int) -> list[dict]:
    """cudaMemsetAsync of each size in MEMSET_BYTES on torch's stream after the write flush: busy time per call."""
    import torch

    rows = []
    buf = torch.empty(max(MEMSET_BYTES), dtype=torch.uint8, device="cuda")
    stream = torch.cuda.current_stream().cuda_stream
    for n in MEMSET_BYTES:
        def fn(n=n):
            cp.cuda.runtime.memsetAsync(buf.data_ptr(), 0, n, stream)

        fn()
        torch.cuda.synchronize()
        work = per_call(_trace(fn, flush, calls))
        busy = [sum(e["us"] for e in w) for w in work]
        rows.append({"bytes": n, "busy_us": busy, "events": [[e["name"] for e in w] for w in work[:1]]})
        print(f"memset {n:>10} B  median {statistics.median(busy):7.2f} us  min {min(busy):7.2f}  "
              f"max {max(busy):7.2f}", flush=True)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m flashsim.experiments.call_events", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("configs", nargs="*")
    ap.add_argument("--impls", default="sdpa-cudnn")
    ap.add_argument("--calls", type=int, default=5)
    ap.add_argument("--from-report", nargs="*", default=[], help="also every configuration these reports hold "
                    "rows of for the implementations")
    ap.add_argument("--memset", action="store_true", help="add the cudaMemsetAsync microbenchmark")
    ap.add_argument("--out", default="call-events.json")
    args = ap.parse_args(argv)
    impls = args.impls.split(",")
    configs = list(dict.fromkeys([*args.configs, *report_ids(args.from_report, impls)]))
    import torch  # noqa: F401 (torch before CuPy, as the calls were timed so far)

    from .calibrate_gpu import argv_tail, provenance, read_gpu, require_gpu

    cp = require_gpu("call_events")
    gpu = read_gpu(cp)
    flush = make_flush(cp, gpu)
    clock = make_clock_probe(cp, gpu)
    rows, memsets = [], []
    if args.memset:
        memsets = memset_rows(cp, flush, args.calls)
    for config_id, _cfg, q, k, v, name, impl in cases(configs, impls):
        with impl_context(impl):
            fn = make_call(impl, q, k, v, _cfg)
            refused = warm_up(fn)
            if refused:
                rows.append({"impl": name, "config_id": config_id, "skipped": refused})
                continue
            before = clock()
            work = per_call(_trace(fn, flush, args.calls))
            rows.append({"impl": name, "config_id": config_id, "events": work, "sm_clock_ghz": [before, clock()]})
            parts = {}
            for w in work:
                for e in w:
                    parts.setdefault(e["name"][:40], []).append(e["us"])
            print(f"{name:11} {config_id:40} " + "  ".join(f"{n}: {statistics.median(u):.2f} us"
                                                          for n, u in parts.items()), flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"provenance": provenance(cp, gpu, ["call_events", *argv_tail()]),
                               "calls": args.calls, "memset": memsets, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
