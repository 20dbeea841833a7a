"""SDPA flash (FA2) on a few K/V steps a block, causal and not, under each instruction-fetch model, against the
durations Nsight Compute measured on an H100 (experiments/results/h100/session45/fa2-masks/, B8 H132): the
causal runs' extra time there is warps waiting for instructions.

    python3 -m flashsim.experiments.fetch_front_check [--jobs N]
"""

from __future__ import annotations

import argparse
from concurrent.futures import ProcessPoolExecutor

# (head dim, N, causal) -> the kernel's duration in us (Nsight Compute, run 232)
MEASURED_US = {(64, 256, True): 84.1, (64, 256, False): 84.7, (64, 512, True): 236.1, (64, 512, False): 268.4,
               (128, 256, True): 149.2, (128, 256, False): 143.2}  # fmt: skip
MODELS = ([], ["fetch_model=1"], ["fetch_model=2"])


def job(key: tuple, overrides: list[str]) -> tuple:
    d, n, causal = key
    problem = {"batch": 8, "heads": 132, "kv_heads": 132, "seqlen_q": n, "seqlen_k": n, "headdim": d,
               "causal": causal, "dtype": "bf16"}  # fmt: skip
    return ("v2", problem, {"launch": "fa2", "exp2": "exp2f"}, "h100", overrides, {}, True)


def main(argv=None) -> None:
    from .prediction_inputs import simulate_job

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args(argv)
    keys = [(k, m) for k in MEASURED_US for m in MODELS]
    with ProcessPoolExecutor(args.jobs) as pool:
        results = list(pool.map(simulate_job, [job(k, m) for k, m in keys]))
    print("| shape | measured us | " + " | ".join(" ".join(m) or "fetch_model=0" for m in MODELS) + " |")
    print("|---|---|" + "---|" * len(MODELS))
    for key, us in MEASURED_US.items():
        cells = []
        for (k, _), r in zip(keys, results, strict=True):
            if k == key:
                t = r["predicted"]["kernel_time_s"] * 1e6
                cells.append(f"{t:.1f} ({100 * (t / us - 1):+.1f}%)")
        d, n, causal = key
        print(f"| d{d} N{n} {'causal' if causal else 'not causal'} | {us} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
