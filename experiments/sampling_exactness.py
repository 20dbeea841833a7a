"""Sampled default runs against --full on the FA2 grid (h100, h200: v2 and v3; a100: v2).

    python -m flashsim.experiments.sampling_exactness measure DIR [--jobs N] [--sms 16 ...] [--probe chip-ratio]
        [--limit S] [--profiles a100:v1 ...]
    python -m flashsim.experiments.sampling_exactness full.jsonl default.jsonl [before.jsonl] > sampling-exactness.json
    python -m flashsim.experiments.sampling_exactness scan OUT.json POINT... (experiments/sampling_scan.py)

`measure` runs every point on the whole chip (DIR/full.jsonl) and with the default sample (DIR/default.jsonl),
and with each --sms asked of the sample beside (DIR/sms<N>.jsonl: the smallest representative sample from N
SMs up) and with each --probe's change to the default sample (DIR/probe-<name>.jsonl), in a pool of N
processes, the longest runs first; each line is written as its run finishes, so a run cut off at --limit
seconds keeps what it did and a second call resumes it. Then DIR/table.json (and DIR/table-<name>.json for
the others, the default beside) pair the points run so far.

Each input holds one JSON object a line, {"key", "cycles", "tflops", "sms_simulated", "cpu_s"} (and the
default runs' "sample": simulator/sampling.py's choice and check), written by `measure` (one process, so the
imports are paid once); the output pairs them by key with their difference, and sums them up per kind of
sample (representative or not) and per profile. `before`: default runs of an earlier sample selection, whose
differences from the same --full runs are listed beside.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from flashsim.algorithms.problem import Problem

SEQLENS = (512, 1024, 2048, 4096, 8192, 16384)
PROFILES = (("h100", ("v2", "v3")), ("h200", ("v2", "v3")), ("a100", ("v2",)))


def grid(profiles=PROFILES) -> list[tuple[str, str, Problem]]:
    return [(hw, algo, Problem(16384 // n, 2048 // d, n, d, causal=causal))
            for hw, algos in profiles for algo in algos for d in (64, 128) for causal in (False, True)
            for n in SEQLENS]


def parse_profiles(specs: list[str]) -> tuple:
    """--profiles a100:v1 h100:v2,v3 -> (("a100", ("v1",)), ("h100", ("v2", "v3")))."""
    out = []
    for spec in specs:
        hw, _, algos = spec.partition(":")
        if not hw or not algos:
            raise SystemExit(f"sampling_exactness: --profiles takes PROFILE:ALGO[,ALGO], not {spec!r}")
        out.append((hw, tuple(algos.split(","))))
    return tuple(out)


def command(hw: str, algo: str, p: Problem, full: bool) -> str:
    return (f"flashsim simulate --hw {hw} --algo {algo} -b {p.batch} --heads {p.heads} -n {p.seqlen_q} "
            f"-d {p.headdim}{' --causal' if p.causal else ''}{' --full' if full else ''} --json")


@contextmanager
def _probe(name: str | None):
    """A sampled machine changed for a probe: "chip-ratio" makes each sampled SM and line stand for the chip's
    SMs per simulated SM (S/n) at the ports and in the L2, not for the chip's heads per sampled head (G/g)."""
    if name is None:
        yield
        return
    if name != "chip-ratio":
        raise ValueError(f"no probe {name}")
    from flashsim.simulator import api

    gpu = api.Gpu
    api.Gpu = lambda *a, copies=None, **k: gpu(*a, **k)
    try:
        yield
    finally:
        api.Gpu = gpu


def run_point(hw: str, algo: str, p: Problem, sms: int | None, probe: str | None = None) -> dict:
    """One grid point: the whole chip (sms None) or the sample chosen from `sms` SMs up (with a probe's change)."""
    from flashsim.hw_profiles import load_profile
    from flashsim.simulator import simulate

    t0 = time.process_time()
    with _probe(probe):
        r = simulate(algo, p, load_profile(hw), sms=sms)
    return {"key": f"{hw} {algo} {p.describe()}", "cycles": r.cycles, "tflops": r.tflops,
            "sms_simulated": r.sim["sms_simulated"], "cpu_s": time.process_time() - t0,
            **({"sample": r.sim["sample"]} if "sample" in r.sim else {})}


def measure(out_path: str, full: bool) -> None:
    """Run every grid point (the default sample, or the whole chip) and append one line per point."""
    from flashsim.simulator.api import DEFAULT_SAMPLE_SMS

    with open(out_path, "a") as out:
        for hw, algo, p in grid():
            out.write(json.dumps(run_point(hw, algo, p, None if full else DEFAULT_SAMPLE_SMS)) + "\n")
            out.flush()


def _run_task(task: tuple) -> tuple[str, dict]:
    name, sms, hw, algo, p = task
    return name, run_point(hw, algo, p, sms, name.removeprefix("probe-") if name.startswith("probe-") else None)


def _cost(row: dict | None, full: bool, sms: int) -> float:
    """Expected CPU seconds of a run, from the committed table (the longest are started first)."""
    if row is None:
        return 0.0
    return row["full"]["cpu_s"] if full else row["default"]["cpu_s"] * sms / 8


def measure_pool(out_dir: str, jobs: int, extra_sms: tuple[int, ...] = (), limit: float | None = None,
                 probes: tuple[str, ...] = (), profiles: tuple = PROFILES) -> dict:
    """Every grid point on the whole chip, with the default sample, with each of `extra_sms` and with the
    default sample changed by each of `probes` (_probe; DIR/probe-<name>.jsonl), in `jobs`
    processes; appends to DIR/<name>.jsonl as runs finish (points already there are not run again). At
    `limit` seconds it stops, the runs still going killed. Returns {name: points done}."""
    from flashsim.simulator.api import DEFAULT_SAMPLE_SMS

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    committed = Path(__file__).parent / "results" / "sampling-exactness.json"
    before = {r["key"]: r for r in json.loads(committed.read_text())["rows"]} if committed.exists() else {}
    modes = ([("full", None), ("default", DEFAULT_SAMPLE_SMS)] + [(f"sms{n}", n) for n in extra_sms]
             + [(f"probe-{name}", DEFAULT_SAMPLE_SMS) for name in probes])
    for name, _ in modes:
        (out / f"{name}.jsonl").touch()
    done = {name: set(load(out / f"{name}.jsonl")) for name, _ in modes}
    todo = [(name, sms, hw, algo, p) for name, sms in modes for hw, algo, p in grid(profiles)
            if f"{hw} {algo} {p.describe()}" not in done[name]]
    todo.sort(key=lambda t: -_cost(before.get(f"{t[2]} {t[3]} {t[4].describe()}"), t[1] is None, t[1] or 0))
    deadline = time.monotonic() + limit if limit is not None else None
    with multiprocessing.Pool(jobs) as pool:  # leaving the block terminates the runs still going
        results = pool.imap_unordered(_run_task, todo)
        for _ in todo:
            try:
                name, row = results.next(timeout=None if deadline is None else max(0.0, deadline - time.monotonic()))
            except multiprocessing.TimeoutError:
                print(f"stopped at the limit of {limit:.0f} s: runs not finished were left out", file=sys.stderr)
                break
            with open(out / f"{name}.jsonl", "a") as f:
                f.write(json.dumps(row) + "\n")
    return {name: len(load(out / f"{name}.jsonl")) for name, _ in modes}


def load(path: str) -> dict:
    with open(path) as f:
        return {r["key"]: r for r in map(json.loads, f)}


def _worst(rows: list, name) -> dict:
    worst: dict = {}
    for r in rows:
        k = name(r)
        if k not in worst or abs(r["difference"]) > abs(worst[k]["difference"]):
            worst[k] = {"key": r["key"], "difference": r["difference"]}
    return worst


def _kind(row: dict) -> str:
    sample = row["default"].get("sample")
    if sample is None:
        return "whole chip"
    return sample.get("kind") or ("representative" if sample["representative"] else "not representative")


def table(full_path: str, default_path: str, before_path: str | None = None) -> dict:
    """The points both files hold (all 120 for a committed table), in grid order."""
    full, default = load(full_path), load(default_path)
    before = load(before_path) if before_path else {}
    rows = []
    for hw, algo, p in grid():
        k = f"{hw} {algo} {p.describe()}"
        if k not in full or k not in default:
            continue
        row = {"key": k, "full": full[k], "default": default[k],
               "difference": default[k]["cycles"] / full[k]["cycles"] - 1,
               "commands": [command(hw, algo, p, False), command(hw, algo, p, True)]}
        if k in before:
            row["before"] = {**before[k], "difference": before[k]["cycles"] / full[k]["cycles"] - 1}
        rows.append(row)
    kinds = {}
    for kind in sorted({_kind(r) for r in rows}):
        of = [r for r in rows if _kind(r) == kind]
        kinds[kind] = {"points": len(of), "within_2pct": sum(abs(r["difference"]) <= 0.02 for r in of),
                       "worst": max((abs(r["difference"]) for r in of), default=0.0)}
    summary = {"points": len(rows), "within_2pct": sum(abs(r["difference"]) <= 0.02 for r in rows),
               "default_cpu_s": sum(r["default"]["cpu_s"] for r in rows),
               "full_cpu_s": sum(r["full"]["cpu_s"] for r in rows),
               "worst": _worst(rows, lambda r: " ".join(r["key"].split()[:2])), "by_sample": kinds}
    if before:
        was = [{"key": r["key"], "difference": r["before"]["difference"]} for r in rows if "before" in r]
        summary["before"] = {"points": len(was), "within_2pct": sum(abs(r["difference"]) <= 0.02 for r in was),
                             "default_cpu_s": sum(r["before"]["cpu_s"] for r in rows if "before" in r),
                             "worst": _worst(was, lambda r: " ".join(r["key"].split()[:2]))}
    return {"summary": summary, "rows": rows}


def main(argv: list[str]) -> None:
    if argv and argv[0] == "scan":
        from flashsim.experiments.sampling_scan import main as scan

        scan(argv[1:])
        return
    if not argv or argv[0] != "measure":
        ap = argparse.ArgumentParser(prog="sampling_exactness", epilog="or: sampling_exactness measure DIR ...; "
                                     "sampling_exactness scan ...")
        ap.add_argument("full", help="the whole-chip runs (full.jsonl)")
        ap.add_argument("default", help="the default runs (default.jsonl)")
        ap.add_argument("before", nargs="?", help="an earlier default.jsonl to set beside")
        args = ap.parse_args(argv)
        for path in filter(None, (args.full, args.default, args.before)):
            if not Path(path).is_file():
                ap.error(f"no such file: {path}")
        json.dump(table(args.full, args.default, args.before), sys.stdout, indent=1)
        sys.stdout.write("\n")
        return
    ap = argparse.ArgumentParser(prog="sampling_exactness measure")
    ap.add_argument("dir")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--sms", type=int, nargs="*", default=[], help="samples asked from these SMs up, beside")
    ap.add_argument("--probe", nargs="*", default=[], choices=["chip-ratio"], help="default samples changed so")
    ap.add_argument("--limit", type=float, default=None, help="seconds after which the runs still going stop")
    ap.add_argument("--profiles", nargs="*", default=[], metavar="PROFILE:ALGOS",
                    help="the grid's profiles and algorithms (default: h100:v2,v3 h200:v2,v3 a100:v2)")
    args = ap.parse_args(argv[1:])
    profiles = parse_profiles(args.profiles) if args.profiles else PROFILES
    counts = measure_pool(args.dir, args.jobs, tuple(args.sms), args.limit, tuple(args.probe), profiles)
    out = Path(args.dir)
    for name in counts:
        if name == "full" or not counts["full"] or not counts[name]:
            continue
        doc = table(str(out / "full.jsonl"), str(out / f"{name}.jsonl"),
                    str(out / "default.jsonl") if name != "default" else None)
        (out / ("table.json" if name == "default" else f"table-{name}.json")).write_text(json.dumps(doc, indent=1))
        s = doc["summary"]
        print(f"{name}: {s['within_2pct']} of {s['points']} within 2%, worst "
              + ", ".join(f"{k} {100 * v['difference']:+.1f}%" for k, v in s["worst"].items())
              + f"; CPU {s['default_cpu_s']:.0f} s (full {s['full_cpu_s']:.0f} s)")
    print(json.dumps(counts))


if __name__ == "__main__":
    main(sys.argv[1:])
