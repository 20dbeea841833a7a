"""The SM clock and board power while an attention kernel runs back to back: the check of the power_mix
calibration on development shapes (bf16, N = 4096, batch 4; 32 heads at d64, 16 otherwise).

Each configuration is called back to back for about half a second while nvidia-smi samples the SM clock,
power and clock-event reasons every 20 ms; the second half's samples are kept (the clock has settled).

    python3 -m flashsim.experiments.kernel_clocks --out FILE.json [--seconds 0.6] [--shapes long-kv]

`--shapes long-kv`: the per-tile development set's rows whose blocks stream their own head's K/V from HBM
(batch 8, 132 heads, 128 queries, 2k or 8k keys), where HBM traffic and tensor work load the chip together.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

from .bench_kernels import inputs, make_fn
from .calibrate_power import SMI, _smi_rows, _window

CONFIGS = [  # (implementation, head dim, causal, heads[, batch, queries, keys])
    ("v3", 64, False, 32),
    ("v3", 96, False, 16),
    ("v3", 128, False, 16),
    ("v3", 96, True, 16),
    ("v3", 128, True, 16),
    ("v2", 64, False, 32),
    ("v2", 96, False, 16),
    ("v2", 128, False, 16),
    ("sdpa-flash", 128, False, 16),
    ("sdpa-cudnn", 128, False, 16),
    ("sdpa-cudnn", 64, False, 32),
    ("v3-fp8", 128, False, 16),
]
LONG_KV = [
    (impl, d, False, 132, 8, 128, keys)
    for impl in ("v2", "sdpa-flash", "v3", "sdpa-cudnn") for d in (64, 128) for keys in (2048, 8192)
]


def run(seconds: float, configs: list = CONFIGS) -> list[dict]:
    import datetime as dt

    import torch

    smi = subprocess.Popen(SMI, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    rows, windows = [], []
    for impl, d, causal, heads, *shape in configs:
        batch, queries, keys = shape or (4, 4096, 4096)
        q, k, v = inputs(d, queries, torch.bfloat16, batch, heads)
        if keys != queries:
            k, v = (torch.randn(batch, heads, keys, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        fn = make_fn(impl, q, k, v, causal)
        fn()
        torch.cuda.synchronize()
        calls, t0 = 0, time.perf_counter()
        start = None
        while time.perf_counter() - t0 < seconds:
            for _ in range(8):
                fn()
            torch.cuda.synchronize()
            calls += 8
            if start is None and time.perf_counter() - t0 >= seconds / 2:
                start, mark = dt.datetime.now(), (calls, time.perf_counter())
        ms = (time.perf_counter() - mark[1]) / (calls - mark[0]) * 1e3
        windows.append((start, dt.datetime.now()))
        rows.append(
            {
                "impl": impl,
                "headdim": d,
                "causal": causal,
                "batch": batch,
                "heads": heads,
                "seqlen": queries,
                "seqlen_k": keys,
                "calls": calls,
                "ms_per_call": ms,
            }
        )
        del q, k, v, fn
        torch.cuda.empty_cache()
        time.sleep(0.2)  # idle between configurations: each starts from the same thermal state
    smi.terminate()
    samples = _smi_rows(smi.communicate(timeout=5)[0])
    for row, (start, end) in zip(rows, windows, strict=True):
        row.update(_window(samples, start, end))
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seconds", type=float, default=0.6)
    ap.add_argument("--shapes", choices=("dev", "long-kv"), default="dev")
    args = ap.parse_args(argv)
    rows = run(args.seconds, LONG_KV if args.shapes == "long-kv" else CONFIGS)
    with open(args.out, "w") as f:
        json.dump({"rows": rows, "command": " ".join(["kernel_clocks", *(argv or sys.argv[1:])])}, f, indent=1)
    for r in rows:
        print(
            f"{r['impl']:<11} d{r['headdim']:<4} {'causal' if r['causal'] else '      '} Nk {r['seqlen_k']:<6} "
            f"{r['ms_per_call']:7.3f} ms  {r.get('smi_clock_mhz', float('nan')):6.0f} MHz  "
            f"{r.get('smi_power_w', float('nan')):5.0f} W  {r.get('smi_event_reasons')}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
