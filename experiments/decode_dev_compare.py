"""Decode predictions against the decode benchmark (the development set of the decode model).

Simulates every row of experiments/results/h200/decode-bench.json with the decode record: our kernel with the
tiles and split count it ran (kernels/decode.py's tile table, the row's `splits`), SDPA's flash backend with
the record's own tiles and split heuristic (FA2's split-KV kernel, which packs a one-query GQA group the same
way), and cuDNN the same (no record of its own: the decode record stands in). Compares the simulated kernel
time with the GPU busy time and writes decode-dev-compare.json and .md (MAPE, bias and worst error per
implementation). Each run starts from the L2 the benchmark's flush leaves (simulate(flushed_l2=True)), as
every call was measured; `--empty-l2` starts from an empty one.

    python3 -m flashsim.experiments.decode_dev_compare [--bench FILE] [--out DIR] [--jobs N] [--impls ours,...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from flashsim.errors import FlashsimError

RESULTS = Path(__file__).resolve().parent / "results" / "h200"
IMPLS = ("ours", "sdpa-flash", "sdpa-cudnn")
HEADS = 32  # bench_decode.HEADS


def our_tiling(row: dict) -> dict:
    """The tiles our kernel ran (its tile table for the head dim) with the row's launched split count."""
    from flashsim.kernels.decode import default

    return {**default(row["headdim"]).as_dict(), "splits": row["splits"]}


def problem_args(row: dict) -> dict:
    return {"batch": row["batch"], "heads": HEADS, "kv_heads": row["kv_heads"], "seqlen_q": row["seqlen_q"],
            "seqlen_k": row["seqlen_k"], "headdim": row["headdim"], "page_size": row["page_size"] or 0}


def predict(job: tuple) -> dict:
    problem, tiling, hw, flushed, *rest = job
    overrides = rest[0] if rest else []
    from flashsim.algorithms.problem import Problem
    from flashsim.algorithms.tiling import Tiling
    from flashsim.hw_profiles import load_profile
    from flashsim.simulator import simulate

    t0 = time.perf_counter()
    try:
        res = simulate("decode", Problem(**problem), load_profile(hw, overrides), Tiling(**tiling) if tiling else None,
                       flushed_l2=flushed)
    except FlashsimError as exc:
        return {"predict_error": str(exc)}
    return {"predicted_us": res.kernel_time_s * 1e6, "bound_by": res.bound_by, "tiling": res.tiling.as_dict(),
            "hbm_read": res.bytes["hbm_read"], "wall_s": round(time.perf_counter() - t0, 2)}


def summary(rows: list[dict]) -> dict:
    errs = [r["err"] for r in rows if "err" in r]
    if not errs:
        return {"n": 0}
    return {"n": len(errs), "mape": 100 * statistics.fmean(abs(e) for e in errs),
            "bias": 100 * statistics.fmean(errs), "max": 100 * max(errs, key=abs)}


def markdown(report: dict) -> str:
    lines = [f"Decode development comparison: `{report['command']}` (profile {report['hw']}; measured "
             f"{report['bench']}, GPU busy time with an L2 flush before each call; simulated from "
             f"{'an empty L2' if report.get('l2_start') == 'empty' else 'the L2 the flush leaves'}; error = "
             "predicted / measured - 1)", "", "| impl | n | MAPE % | bias % | worst % |", "|---|---|---|---|---|"]
    for impl, s in report["summary"].items():
        if s["n"]:
            lines.append(f"| {impl} | {s['n']} | {s['mape']:.1f} | {s['bias']:+.1f} | {s['max']:+.1f} |")
    lines += ["", "| case | impl | page | splits | measured us | predicted us | error % | bound |",
              "|---|---|---|---|---|---|---|---|"]
    for r in report["rows"]:
        pred = f"{r['predicted_us']:.1f}" if "predicted_us" in r else r.get("predict_error", "-")
        err = f"{100 * r['err']:+.1f}" if "err" in r else "-"
        splits = r["tiling"]["splits"] if "tiling" in r else "-"
        lines.append(f"| {r['case']} | {r['impl']} | {r['page_size'] or '-'} | {splits} | {r['gpu_us']:.1f} | {pred} "
                     f"| {err} | {r.get('bound_by', '-')} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", type=Path, default=RESULTS / "decode-bench.json")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--hw", default="h200")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--impls", default=",".join(IMPLS))
    ap.add_argument("--empty-l2", action="store_true",
                    help="start each run from an empty L2, not the full, partly dirty one the benchmark's flush leaves")
    ap.add_argument("--stem", default="decode-dev-compare")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a profile override for every prediction (repeatable), as simulate --set")
    args = ap.parse_args(argv)
    impls = args.impls.split(",")
    bench = json.loads(args.bench.read_text())
    rows = [dict(r) for r in bench["rows"] if r["impl"] in impls and r.get("gpu_us")]
    jobs = [(problem_args(r), our_tiling(r) if r["impl"] == "ours" else None, args.hw, not args.empty_l2, args.set)
            for r in rows]
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for row, res in zip(rows, pool.map(predict, jobs), strict=True):
            row.pop("kernels", None)
            row.update(res)
            if "predicted_us" in res:
                row["err"] = res["predicted_us"] / row["gpu_us"] - 1
            print(f"{row['case']:28s} {row['impl']:10s} p{row['page_size']:<3d} meas {row['gpu_us']:8.1f} "
                  f"pred {row.get('predicted_us', float('nan')):8.1f} err {100 * row.get('err', float('nan')):+6.1f}% "
                  f"{res.get('wall_s', '')}s", flush=True)
    command = ("python3 -m flashsim.experiments.decode_dev_compare"
               + (f" --impls {args.impls}" if args.impls != ",".join(IMPLS) else "")
               + (" --empty-l2" if args.empty_l2 else "")
               + (f" --stem {args.stem}" if args.stem != ap.get_default("stem") else "")
               + "".join(f" --set {o}" for o in args.set))
    report = {"command": command, "hw": args.hw, "bench": args.bench.name,
              "l2_start": "empty" if args.empty_l2 else "flushed", "overrides": args.set,
              "summary": {i: summary([r for r in rows if r["impl"] == i]) for i in impls}, "rows": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.stem}.json").write_text(json.dumps(report, indent=1) + "\n")
    (args.out / f"{args.stem}.md").write_text(markdown(report))
    for impl, s in report["summary"].items():
        if s["n"]:
            print(f"{impl}: n {s['n']} MAPE {s['mape']:.1f}% bias {s['bias']:+.1f}% worst {s['max']:+.1f}%")


if __name__ == "__main__":
    main()
