"""Which step of `flashsim validate`'s measurement makes some short kernels time 10-25% longer than the same
kernel timed alone (experiments/busy_protocol.py, Nsight Compute)?

For each configuration and implementation, in one process, in this order:
1. validate's own measurement (the reference SDPA output, then `validate._measure_one`: its check, the
   event-timed calls, then the profiler's three calls after the write flush) -> its kernel_time_s;
2. the profiler's calls again straight after, three and then fifteen (every call's busy time);
3. the event-timed loop again (validate.time_call), then three profiled calls;
4. a GPU sleep of about 0.2 s, then three profiled calls.
The SM clock NVML reports is read after each step.

    python3 -m flashsim.experiments.protocol_probe [--out FILE] [CONFIG_ID ...]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from . import validate_support as support
from .busy_protocol import cases, parse_id
from .validate import (
    SweepOptions,
    _measure_one,
    gpu_work,
    make_clock_probe,
    make_flush,
    pass_reference,
    time_call,
)
from .validate_impls import IMPLS, impl_context, inputs, make_call

DEFAULT_CONFIGS = ("b16-h48-kv6-n256-d64-causal", "b49-h48-kv6-n256-d128-causal", "b8-h132-n128-k8192-d128")


def _clock_mhz() -> float | None:
    import torch

    try:
        return float(torch.cuda.clock_rate())
    except Exception:  # NVML unavailable: the clock is an extra
        return None


def _after(heavy_id: str, config_ids: list[str], impls: list[str], flush, clock_ghz) -> list[dict]:
    """Each configuration's profiled calls right after a stretch of another kernel's work, and after idling;
    the SM clock just before each."""
    import torch

    heavy_cfg = parse_id(heavy_id)
    hq, hk, hv = inputs(heavy_cfg)
    heavy = make_call(IMPLS["v2"], hq, hk, hv, heavy_cfg)
    rows = []
    for config_id, cfg, q, k, v, name, impl in cases(config_ids, impls):
        with impl_context(impl):
            fn = make_call(impl, q, k, v, cfg)
            fn()
            row: dict = {"impl": name, "config_id": config_id, "after_heavy_us": [], "after_idle_us": [],
                         "clock_after_heavy_ghz": [], "clock_after_idle_ghz": []}
            for _ in range(5):
                for i in range(150):  # about 0.3 s of the heavy kernel, never far ahead of the host
                    flush()
                    heavy()
                    if i % 20 == 19:
                        torch.cuda.synchronize()
                torch.cuda.synchronize()
                row["clock_after_heavy_ghz"].append(clock_ghz())
                row["after_heavy_us"].append([b * 1e6 for b in gpu_work(fn, flush, 3)[0]])
                torch.cuda._sleep(400_000_000)
                torch.cuda.synchronize()
                row["clock_after_idle_ghz"].append(clock_ghz())
                row["after_idle_us"].append([b * 1e6 for b in gpu_work(fn, flush, 3)[0]])
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m flashsim.experiments.protocol_probe", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("configs", nargs="*", default=list(DEFAULT_CONFIGS))
    ap.add_argument("--impls", default="v2,sdpa-flash")
    ap.add_argument("--out", default="protocol-probe.json")
    ap.add_argument("--after", metavar="CONFIG_ID",
                    help="instead: time each configuration's three profiled calls straight after 0.3 s of this "
                         "one's calls (our v2), and again after a 0.2 s GPU sleep, five times each")
    args = ap.parse_args(argv)
    import torch

    from .calibrate_gpu import argv_tail, provenance, read_gpu, require_gpu

    cp = require_gpu("protocol_probe")
    gpu = read_gpu(cp)
    flush = make_flush(cp, gpu)
    if args.after:
        rows = _after(args.after, args.configs, args.impls.split(","), flush, make_clock_probe(cp, gpu))
        Path(args.out).write_text(json.dumps({"provenance": provenance(cp, gpu, ["protocol_probe", *argv_tail()]),
                                              "after": args.after, "rows": rows}, indent=1) + "\n")
        return 0
    rows = []
    for config_id, cfg, q, k, v, name, impl in cases(args.configs, args.impls.split(",")):
        row: dict = {"impl": name, "config_id": config_id}
        opts = SweepOptions(impls=[name], configs=[cfg], out_dir=Path("."))
        ref = pass_reference(q, k, v, cfg, support.causal_align(impl, cfg))  # as validate makes it first
        rec = _measure_one(impl, cfg, q, k, v, ref, flush, opts, False)
        del ref
        row["validate_us"] = (rec.get("kernel_time_s") or 0) * 1e6
        row["clock_after_validate_mhz"] = _clock_mhz()
        with impl_context(impl):
            fn = make_call(impl, q, k, v, cfg)
            row["again3_us"] = [b * 1e6 for b in gpu_work(fn, flush, 3)[0]]
            row["again15_us"] = [b * 1e6 for b in gpu_work(fn, flush, 15)[0]]
            row["clock_after_again_mhz"] = _clock_mhz()
            time_call(fn, flush, opts.min_reps, opts.max_reps, opts.budget_s)
            row["after_time_call3_us"] = [b * 1e6 for b in gpu_work(fn, flush, 3)[0]]
            torch.cuda._sleep(400_000_000)  # ~0.2 s of one busy warp: the chip left to cool and idle
            torch.cuda.synchronize()
            row["after_sleep3_us"] = [b * 1e6 for b in gpu_work(fn, flush, 3)[0]]
            row["clock_end_mhz"] = _clock_mhz()
        rows.append(row)
        print(json.dumps({k: (round(v, 1) if isinstance(v, float) else [round(x, 1) for x in v]
                              if isinstance(v, list) else v) for k, v in row.items()}), flush=True)
    Path(args.out).write_text(json.dumps({"provenance": provenance(cp, gpu, ["protocol_probe", *argv_tail()]),
                                          "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
