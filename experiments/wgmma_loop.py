"""What a wgmma attention kernel's consumers issue, from Nsight Compute's per-SASS-instruction source page.

    python3 -m flashsim.experiments.wgmma_loop DIR/ncu-IMPL-dD-nN-cC-sass.txt[.gz] ... [--batch B] [--heads H]

For each file (named as experiments/device_steps.sh's ncu_configs names them; batch and heads default to the
FA2 grid's: 4 x 2048 / D), two views:
  - the instruction mix: executed thread instructions per attention score (batch x heads x N x N, half that
    causal), by opcode, so kernels with other tiles compare;
  - the loop's order: each HGMMA group's last instruction (the one that commits it), the WARPGROUP.DEPBAR
    waits (0x0: every group done, 0x1: all but the newest) and the named barriers (ping-pong turns) executed
    at least once per K/V block, in code order, with their stall samples.
FA3's intra-warpgroup pipelining shows as an S GEMM committed before the P V of the block before, then
DEPBAR.LE 0x1; a serial loop waits (0x0) after each GEMM.
With --phases, a third: the loop cut at its synchronisation points (GEMM waits, named barriers, mbarrier waits
and arrivals), each phase's instructions and its share of the loop's stall samples, and from the kernel's
elapsed cycles (its -details file beside it) the cycles a consumer warp spends in each phase per K/V block:
where the elementwise work's real pace shows (instructions per phase over its cycles).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from pathlib import Path

from .fa2_mix import source_page
from .ncu_regions import read_text

NAME = re.compile(r"ncu-(?P<impl>.+)-d(?P<d>\d+)-n(?P<n>\d+)-c(?P<c>[01])-sass")
PREDICATE = re.compile(r"^@!?U?P[T\d]+\s+")


def read_source(path: Path) -> list[tuple[str, int, int]]:
    """(SASS text, warp instructions executed, stall samples) per instruction of the CSV source page."""
    _, header, rows = source_page(path)
    ix = {h: i for i, h in enumerate(header)}
    return [(r[ix["Source"]].strip(), int(r[ix["Instructions Executed"]] or 0),
             int(r[ix["Warp Stall Sampling (All Samples)"]] or 0)) for r in rows]


def opcode(sass: str) -> str:
    text = PREDICATE.sub("", sass)
    return text.split()[0].split(".")[0] if text else ""


def scores(d: int, n: int, causal: bool, batch: int | None, heads: int | None) -> float:
    batch = batch or 4
    heads = heads or 2048 // d
    return batch * heads * n * n / (2 if causal else 1)


def mix(source: list, n_scores: float) -> Counter:
    """Thread instructions per score, by opcode."""
    counts = Counter()
    for sass, executed, _ in source:
        counts[opcode(sass)] += executed * 32 / n_scores
    return counts


def loop_pass(source: list) -> Counter:
    """Warp instructions per consumer warp and K/V block, by opcode: the instructions executed as often as
    the most executed HGMMA (within 10%: the consumers' loop body, once per warp and K/V block; the
    producer's spin waits and the per-tile code run other counts)."""
    top = max((e for s, e, _ in source if opcode(s) == "HGMMA"), default=0)
    counts = Counter()
    for sass, executed, _ in source:
        if top and 0.9 * top <= executed <= 1.1 * top:
            counts[opcode(sass)] += executed / top
    return counts


def loop_order(source: list, per_block: int) -> list[tuple[str, int, int]]:
    """The GEMM commits, GEMM waits and named barriers executed at least `per_block` times, in code order."""
    keep = []
    for sass, executed, samples in source:
        text = PREDICATE.sub("", sass)
        gemm_commit = text.startswith("HGMMA") and "gsb0" in text
        if executed >= per_block and (gemm_commit or text.startswith(("WARPGROUP.DEPBAR", "BAR.SYNC", "BAR.ARV"))):
            keep.append((sass, executed, samples))
    return keep


SYNC_POINTS = ("WARPGROUP.DEPBAR", "BAR.SYNC", "BAR.ARV", "SYNCS.PHASECHK", "SYNCS.ARRIVE")
DETAIL = re.compile(r"^\s*(Elapsed Cycles|Grid Size|Block Size|# SMs|Block Limit [A-Za-z ]+?)\s{2,}"
                    r"(?:[A-Za-z/]+\s+)?([\d,.]+)\s*$")


def loop_phases(source: list) -> list[tuple[int, Counter, int]]:
    """The loop's lines (executed as often as its most executed HGMMA, within 10%) cut before each
    synchronisation point: (instructions, instructions by opcode, stall samples) per phase, in code order."""
    top = max((e for s, e, _ in source if opcode(s) == "HGMMA"), default=0)
    phases: list[list] = []
    for sass, executed, samples in source:
        if not top or not 0.9 * top <= executed <= 1.1 * top:
            continue
        text = PREDICATE.sub("", sass)
        # a barrier's predicated twin (the other consumer's) stays in the phase its first opened
        twin = phases and phases[-1][0] == 1 and text.split()[0] == phases[-1][3]
        if not phases or (text.startswith(SYNC_POINTS) and not twin):
            phases.append([0, Counter(), 0, text.split()[0]])
        phases[-1][0] += 1
        phases[-1][1][opcode(sass)] += 1
        phases[-1][2] += samples
    return [tuple(p[:3]) for p in phases]


def kernel_details(path: Path) -> dict[str, float]:
    """Elapsed cycles, grid and block size, SMs and the tightest block limit from the -details file beside a
    -sass file ({} when there is none)."""
    stem = path.name.replace("-sass.txt.gz", "").replace("-sass.txt", "")
    for name in (f"{stem}-details.txt.gz", f"{stem}-details.txt"):
        found = path.with_name(name)
        if found.is_file():
            out: dict[str, float] = {}
            for line in read_text(str(found)).splitlines():
                m = DETAIL.match(line)
                if m:
                    key = "Block Limit" if m[1].startswith("Block Limit") else m[1]
                    value = float(m[2].replace(",", ""))
                    out[key] = min(out.get(key, value), value)
            return out
    return {}


def phases_report(path: Path, source: list) -> list[str]:
    """The --phases view: a table of the loop's phases with their cycles per K/V block of a consumer warp."""
    phases = loop_phases(source)
    top = max((e for s, e, _ in source if opcode(s) == "HGMMA"), default=0)
    samples = sum(p[2] for p in phases)
    info = kernel_details(path)
    per_block = warp_blocks = None
    if phases and samples and {"Elapsed Cycles", "Grid Size", "Block Size", "# SMs", "Block Limit"} <= info.keys():
        # consumer warps resident at once: the blocks that fit, each with all but its producer warpgroup
        resident = min(info["Grid Size"], info["# SMs"] * info["Block Limit"]) * (info["Block Size"] // 32 - 4)
        warp_blocks = top / resident  # K/V blocks each resident consumer warp runs over the kernel
        per_block = info["Elapsed Cycles"] / warp_blocks
    lines = ["", "The loop's phases, cut at each synchronisation point (per consumer warp and K/V block):", ""]
    if per_block:
        lines += [f"{per_block:,.0f} cycles per K/V block if the loop filled the consumers' time (elapsed cycles "
                  f"{info['Elapsed Cycles']:,.0f}, {warp_blocks:,.1f} K/V blocks per resident consumer warp, the "
                  "producer warpgroup left out); each phase's share of the loop's stall samples:", ""]
    lines += ["| phase | instructions | most frequent | samples | share | cycles | cycles / instruction |",
              "|---:|---:|---|---:|---:|---:|---:|"]
    for i, (n, ops, s) in enumerate(phases):
        share = s / samples if samples else 0.0
        cyc = f"{share * per_block:,.0f}" if per_block else ""
        cpi = f"{share * per_block / n:.1f}" if per_block else ""
        most = ", ".join(f"{op} {k}" for op, k in ops.most_common(4))
        lines.append(f"| {i} | {n} | {most} | {s:,} | {share:.1%} | {cyc} | {cpi} |")
    return lines


def report(path: Path, batch: int | None, heads: int | None, phases: bool = False) -> str:
    m = NAME.search(path.name)
    if not m:
        raise SystemExit(f"wgmma_loop: {path.name} is not named ncu-IMPL-dD-nN-cC-sass.txt")
    d, n, causal = int(m["d"]), int(m["n"]), m["c"] == "1"
    source = read_source(path)
    per_score = mix(source, scores(d, n, causal, batch, heads))
    lines = [f"## {m['impl']} d{d} N {n}{' causal' if causal else ''}", "",
             f"{sum(per_score.values()):.2f} thread instructions per score; the most frequent:", "",
             "| opcode | per score |", "|---|---:|"]
    lines += [f"| {op} | {v:.3f} |" for op, v in per_score.most_common(14)]
    most = max((e for s, e, _ in source if opcode(s) == "HGMMA"), default=0)
    lines += ["", "The loop's GEMM commits, waits and named barriers (executed / stall samples):", "", "```"]
    lines += [f"{e:>10,} {s:>7,}  {sass}" for sass, e, s in loop_order(source, max(1, most // 2))]
    lines.append("```")
    if phases:
        lines += phases_report(path, source)
    return "\n".join(lines + [""])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--batch", type=int, default=None)
    ap.add_argument("--heads", type=int, default=None)
    ap.add_argument("--phases", action="store_true", help="the loop cut at its synchronisation points, with "
                    "each phase's cycles per K/V block (needs the -details file beside each -sass file)")
    args = ap.parse_args(argv)
    for path in args.files:
        if not path.is_file():
            print(f"wgmma_loop: no such file: {path}", file=sys.stderr)
            return 2
        print(report(path, args.batch, args.heads, args.phases))
    return 0


if __name__ == "__main__":
    sys.exit(main())
