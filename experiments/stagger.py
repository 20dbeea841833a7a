"""Does the phase between the two thread blocks of an SM change what they cost? Measured on our v2 kernel, and
in the model.

    python3 -m flashsim.experiments.stagger measure OUT.json [--reps 15]        (on a GPU; experiments/h200_stagger.sh)
    python3 -m flashsim.experiments.stagger compare MEASURED.json [--json OUT] [--jobs 2]

Each problem is one wave of two blocks per SM (batch 2, N = 4224, non-causal, bf16; 4 heads, 2 at d256, whose
64-row tiles fill the SMs with half as many). With `start_stagger_cycles` = D (kernels/include/common.cuh) the
second block to start on each SM spins D SM cycles before its first load, so the two blocks run D cycles apart
in phase; the first block of each pair runs alone for about D cycles at the start and the second alone at the
end. A kernel whose two blocks cost the same whatever their phase takes about D cycles longer plus what the lone
stretches gain; a kernel that gains from overlapping one block's softmax with the other's products runs faster
once they are staggered. `measure` times each D (GPU busy time of the attention kernel from the profiler, L2
flushed before each call; median of --reps calls), and batch 1 (one block per SM) beside. `compare` simulates
the same launches with simulate(start_stagger_cycles=D), by default and with the instruction-issue model
(issue_model = 1, ldsm_model = 1), and with it each resident block taking its share of the SM's units
(block_share_model = 1), and prints them against the measurement, in cycles at the measured clock.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

SEQLEN = 4224
CONFIGS = ((64, 4), (96, 4), (128, 4), (256, 2))  # (head dim, heads): 264 blocks of our v2's tiles at batch 2
STAGGERS = (0, 300, 600, 1200, 1800, 2400, 3600, 4800)  # SM cycles
# ... and a hold longer than a lone block takes (~210k cycles), which must show in the time: the check that the
# hold happens at all
CONTROL = 400_000
VARIANTS = {"default": [], "issue model": ["issue_model=1", "ldsm_model=1"],
            "block shares": ["issue_model=1", "ldsm_model=1", "block_share_model=1"]}
KERNEL = "flashsim_v2"


def measure(out: Path, reps: int) -> dict:
    import torch
    from flashsim.kernels import api
    from flashsim.kernels import launch as kernel_launch

    from .calibrate_gpu import provenance, read_gpu, require_gpu
    from .validate import gpu_calls, make_flush

    cp = require_gpu("stagger measure")
    gpu = read_gpu(cp)
    flush = make_flush(cp, gpu)
    counts = torch.zeros(4096, dtype=torch.int32, device="cuda")  # one per SM id (%smid < %nsmid)
    state = {"stagger": 0}
    plain = kernel_launch.Call.params

    def params(call):
        p = plain(call)
        if state["stagger"]:
            p.start_stagger_cycles = state["stagger"]
            p.s = counts.data_ptr()
        return p

    kernel_launch.Call.params = params
    rows = []
    for d, heads in CONFIGS:
        for batch, staggers in ((1, (0,)), (2, (*STAGGERS, CONTROL))):
            g = torch.Generator(device="cuda").manual_seed(0)
            q, k, v = (torch.randn(batch, heads, SEQLEN, d, device="cuda", dtype=torch.bfloat16, generator=g)
                       for _ in range(3))
            ref = None
            for stagger in staggers:
                state["stagger"] = stagger

                def call(q=q, k=k, v=v):
                    counts.zero_()
                    return api.attention(q, k, v, "v2")

                result = call()
                if ref is None:
                    ref = result.float()
                same = bool(torch.equal(result.float(), ref))  # the spin changes when, not what, a block computes
                times = [sum(e.time_range.elapsed_us() for e in work if KERNEL in e.name)
                         for work in gpu_calls(call, flush, reps)]
                times = [t for t in times if t > 0]
                rows.append({"headdim": d, "heads": heads, "batch": batch, "stagger_cycles": stagger,
                             "kernel_us": statistics.median(times), "kernel_us_all": times, "output_unchanged": same})
                print(f"d{d} b{batch} stagger {stagger}: {rows[-1]['kernel_us']:.2f} us", flush=True)
    kernel_launch.Call.params = plain
    doc = {"provenance": provenance(cp, gpu, ["stagger", "measure", str(out), "--reps", str(reps)]),
           "seqlen": SEQLEN, "rows": rows}
    out.write_text(json.dumps(doc, indent=1) + "\n")
    return doc


def _model(job: tuple) -> tuple:
    variant, d, heads, batch, stagger = job
    from flashsim.algorithms.problem import Problem
    from flashsim.hw_profiles import load_profile
    from flashsim.simulator import simulate

    profile = load_profile("h200", VARIANTS[variant])
    problem = Problem(batch=batch, heads=heads, seqlen_q=SEQLEN, seqlen_k=SEQLEN, headdim=d, causal=False)
    r = simulate("v2", problem, profile, flushed_l2=True, start_stagger_cycles=stagger, sms=None)
    return job, r.kernels[0]["cycles"], r.kernels[0]["clock_hz"]


def compare(measured: Path, jobs: int) -> dict:
    from concurrent.futures import ProcessPoolExecutor

    doc = json.loads(measured.read_text())
    clock = _clock(doc)
    todo = [(v, r["headdim"], r["heads"], r["batch"], r["stagger_cycles"]) for v in VARIANTS for r in doc["rows"]]
    with ProcessPoolExecutor(jobs) as pool:
        model = {job: cycles for job, cycles, _ in pool.map(_model, todo)}
    rows = []
    for r in doc["rows"]:
        key = (r["headdim"], r["heads"], r["batch"])
        row = {"headdim": r["headdim"], "batch": r["batch"], "stagger_cycles": r["stagger_cycles"],
               "measured_cycles": round(r["kernel_us"] * 1e-6 * clock)}
        for v in VARIANTS:
            row[v] = model[(v, *key, r["stagger_cycles"])]
        rows.append(row)
    return {"measured": str(measured), "clock_hz": clock, "rows": rows}


def _clock(doc: dict) -> float:
    """The SM clock the measured cycles are counted at: Nsight Compute's under these kernels (1.76 GHz on the
    H200 for our v2, session22/occupancy/), unless the measurement recorded one."""
    return float(doc.get("clock_hz") or 1.76e9)


def markdown(result: dict) -> str:
    lines = [f"Cycles at {result['clock_hz'] / 1e9:.2f} GHz; each model column: cycles, and the change from its own "
             "unstaggered run beside the measured change.", "",
             "| head dim | batch | stagger | measured | change | "
             + " | ".join(f"{v} | change" for v in VARIANTS) + " |",
             "| --- " * (5 + 2 * len(VARIANTS)) + "|"]
    base = {}
    for r in result["rows"]:
        key = (r["headdim"], r["batch"])
        base.setdefault(key, r)
        b = base[key]

        def change(col: str, r=r, b=b) -> str:
            return f"{r[col] - b[col]:+,}"

        lines.append(f"| d{r['headdim']} | {r['batch']} | {r['stagger_cycles']} | {r['measured_cycles']:,} | "
                     f"{change('measured_cycles')} | "
                     + " | ".join(f"{r[v]:,} | {change(v)}" for v in VARIANTS if v in r) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m flashsim.experiments.stagger", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure")
    m.add_argument("out", type=Path)
    m.add_argument("--reps", type=int, default=15)
    c = sub.add_parser("compare")
    c.add_argument("measured", type=Path)
    c.add_argument("--json", type=Path, default=None)
    c.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args(argv)
    if args.cmd == "measure":
        measure(args.out, args.reps)
        return 0
    if not args.measured.is_file():
        print(f"stagger: no such file {args.measured}", file=sys.stderr)
        return 2
    result = compare(args.measured, args.jobs)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
