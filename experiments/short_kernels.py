"""Short one-wave kernels against the model, from session 32's measurements (development shapes only).

Reads experiments/results/h200/session32/short-cycles/ (experiments/h200_short_cycles.sh) and prints, per
implementation and shape:
- the GPU busy time after validate's write flush, a read flush and warm, with the SM clock probed around them;
- the simulator's busy time from the flushed L2 and from an empty one (the profile's fixed clocks);
- Nsight Compute's elapsed and active SM cycles (caches flushed, clock free) and the clock it saw, beside the
  simulator's kernel cycles and, for our v2, its longest block;
and, from the per-instruction stall sampling, the share of warp time spent waiting for instructions
(no_inst), for the constant cache (imc), for the first loads (long_sb) and on fixed-latency dependencies (wait).

    python3 -m flashsim.experiments.short_kernels [--out FILE.md]
"""

from __future__ import annotations

import argparse
import csv
import gzip
import io
import json
import re
import statistics
import sys
from collections import Counter
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results" / "h200"
HERE = RESULTS / "session32" / "short-cycles"
IMPL_ALGO = {"v2": "v2", "v3": "v3", "sdpa-flash": "v2", "sdpa-cudnn": "v3"}
STALLS = ("stall_no_inst", "stall_imc", "stall_long_sb", "stall_wait", "stall_selected")


def busy_table(path: Path) -> dict:
    """(impl, config id, protocol) -> (median busy us, mean probed clock GHz)."""
    rows = json.loads(path.read_text())["rows"]
    return {(r["impl"], r["config_id"], r["protocol"]): (statistics.median(r["busy_us"]),
                                                         statistics.fmean(r["sm_clock_ghz"]))
            for r in rows if "busy_us" in r}


def ncu_metrics(path: Path) -> dict:
    """Elapsed and active SM cycles (max over SMs) and the clock from one ncu text report."""
    out = {}
    for line in path.read_text().splitlines():
        m = re.match(r"\s*(sm__cycles_elapsed\.max|sm__cycles_active\.max|sm__cycles_elapsed\.avg\.per_second|"
                     r"gpu__time_duration\.sum)\s+\S+\s+([\d,.]+)", line)
        if m:
            out.setdefault(m.group(1), float(m.group(2).replace(",", "")))
    if not out:  # the csv form (the first run's cuDNN reports): "...","metric","unit","value"
        for row in csv.reader(io.StringIO(path.read_text())):
            if len(row) > 3 and row[-3] in ("sm__cycles_elapsed.max", "sm__cycles_active.max",
                                            "sm__cycles_elapsed.avg.per_second", "gpu__time_duration.sum"):
                value = float(row[-1].replace(",", ""))
                out.setdefault(row[-3], value / 1e9 if row[-3].endswith("per_second") else value)
    return out


def stall_shares(path: Path) -> dict:
    """Share of all warp stall samples by reason (STALLS) in one per-SASS sampling export."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    header = rows[1]
    col = {h: i for i, h in enumerate(header)}
    total, by = 0, Counter()
    for row in rows[2:]:
        if len(row) < len(header):
            continue
        total += int(row[col["# Samples"]] or 0)
        for s in STALLS:
            by[s] += int(row[col[s]] or 0)
    return {s: by[s] / total for s in STALLS} | {"samples": total}


def dev_tiling(impl: str, headdim: int) -> tuple[dict | None, int | None]:
    """The tiles and simulated head dim a development row of `impl` at `headdim` ran with (cuDNN's come from
    its kernel's name in the validation records; our v3 stores O from its fragments), else (None, None): the
    model's default."""
    from .prediction_inputs import FRAGMENT_STORES

    if impl in FRAGMENT_STORES:
        return {"o_store": "fragments"}, None  # as validate predicts our v3: O stored from its fragments
    if impl != "sdpa-cudnn":
        return ({"launch": "fa2"} if impl == "sdpa-flash" else None), None
    for name in ("devset-llm.json", "validation.json", "devset-tiles.json"):
        for row in json.loads((RESULTS / name).read_text())["rows"]:
            if row["impl"] == impl and row["config"]["headdim"] == headdim and row.get("tiling"):
                return row["tiling"], row.get("sim_headdim")
    return None, None


def predictions(impl: str, config_id: str) -> dict:
    """The simulator's busy time (us) from the flushed and the empty L2, and its kernel cycles (flushed)."""
    from dataclasses import asdict

    from flashsim.algorithms.problem import Problem
    from flashsim.algorithms.tiling import Tiling, resolve_tiling
    from flashsim.hw_profiles import load_profile
    from flashsim.simulator import simulate
    from flashsim.simulator.sdpa import fa2_tiling

    from .busy_protocol import parse_id
    from .prediction_inputs import problem_args

    cfg = asdict(parse_id(config_id))
    tiling, sim_d = dev_tiling(impl, cfg["headdim"])
    problem = problem_args(cfg | ({"causal_align": "top-left"} if impl.startswith("sdpa") and cfg["causal"] else {}),
                           sim_d)
    prob = Problem(**problem)
    profile = load_profile("h200")
    if tiling and tiling.get("launch") == "fa2":
        tiling = {**fa2_tiling(prob, profile), "exp2": "exp2f"}
    elif tiling and "block_m" not in tiling:  # only the form given: the schedule's own tiles in it
        tiling = {**resolve_tiling(IMPL_ALGO[impl], prob, profile).as_dict(), **tiling}
    out = {}
    for flushed in (True, False):
        r = simulate(IMPL_ALGO[impl], prob, profile, Tiling(**tiling) if tiling else None, flushed_l2=flushed)
        out["flushed" if flushed else "empty"] = r.kernel_time_s * 1e6
        if flushed:
            out["cycles"] = r.cycles
    return out


def v2_block_cycles(config_id: str) -> int | None:
    """Our v2's longest block in the simulator (whole chip, event by event, from an empty L2)."""
    from dataclasses import asdict

    from flashsim.algorithms.problem import Problem
    from flashsim.hw_profiles import load_profile

    from .block_lifetimes import lifetimes
    from .busy_protocol import parse_id
    from .prediction_inputs import problem_args

    life = lifetimes("v2", Problem(**problem_args(asdict(parse_id(config_id)))), load_profile("h200"))
    return life.get("max_cycles")


# implementations whose simulated blocks the table shows (our v2's; v3's persistent blocks run on across tiles)
BLOCK_LIFETIMES = {"v2": v2_block_cycles}


def report(here: Path = HERE) -> str:
    busy = busy_table(here / "busy-clock.json")
    lines = ["# Short one-wave kernels against the model (session 32, development shapes)", "",
             "Busy times in us (median of 11 profiled calls; the SM clock probed around them), the simulator's "
             "busy time from the flushed and the empty L2, Nsight Compute's elapsed and active SM cycles (max "
             "over SMs, caches flushed, clock free) and the clock it saw, and the simulator's kernel cycles and "
             "(our v2) its longest block. `python3 -m flashsim.experiments.short_kernels`.", "",
             "| impl | shape | write | read | warm | probe GHz | model flushed | model empty | ncu elapsed | "
             "ncu active | ncu GHz | model cycles | model block |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    shapes = sorted({c for _, c, _ in busy})
    for impl in IMPL_ALGO:
        for shape in shapes:
            if (impl, shape, "write") not in busy:
                continue
            pred = predictions(impl, shape)
            ncu_path = here / "ncu" / f"ncu-{impl}-{shape}.txt"
            ncu = ncu_metrics(ncu_path) if ncu_path.is_file() else {}
            lifetime = BLOCK_LIFETIMES.get(impl)
            block = lifetime(shape) if lifetime else None
            lines.append(
                f"| {impl} | {shape} | {busy[impl, shape, 'write'][0]:.2f} | {busy[impl, shape, 'read'][0]:.2f} | "
                f"{busy[impl, shape, 'warm'][0]:.2f} | {busy[impl, shape, 'write'][1]:.3f} | {pred['flushed']:.2f} | "
                f"{pred['empty']:.2f} | {ncu.get('sm__cycles_elapsed.max', float('nan')):,.0f} | "
                f"{ncu.get('sm__cycles_active.max', float('nan')):,.0f} | "
                f"{ncu.get('sm__cycles_elapsed.avg.per_second', float('nan')):.2f} | {pred['cycles']:,} | "
                f"{block if block else ''} |")
    lines += ["", "Warp stall samples by reason (share of all samples; per-SASS sampling every 32 cycles):", "",
              "| kernel | samples | " + " | ".join(s.removeprefix("stall_") for s in STALLS) + " |",
              "|---|---:|" + "---:|" * len(STALLS)]
    for path in sorted((here / "sass").glob("*-sass.csv.gz")):
        share = stall_shares(path)
        lines.append(f"| {path.name.removesuffix('-sass.csv.gz')} | {share['samples']:,} | "
                     + " | ".join(f"{100 * share[s]:.1f}%" for s in STALLS) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m flashsim.experiments.short_kernels", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="also write the tables to this markdown file")
    args = ap.parse_args(argv)
    text = report()
    print(text, end="")
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
