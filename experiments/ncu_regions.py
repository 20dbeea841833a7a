"""Where a forward kernel's K/V-loop time goes, region by region, from Nsight Compute's per-instruction data.

    python3 -m flashsim.experiments.ncu_regions DETAILS.txt SASS.csv[.gz] [...]   (pairs of files)
    python3 -m flashsim.experiments.ncu_regions --sections DETAILS.txt SASS.csv[.gz] [...]

--sections splits the whole kernel instead (prologue, masked and unmasked iterations, epilogue: runs of
instructions that execute equally often) and gives each run's cycles per warp, for kernels whose blocks are
short enough that the time outside the steady loop counts.

    python3 -m flashsim.experiments.ncu_regions --steps PRODUCTS SASS.csv[.gz] [...]

--steps cuts the code a warp runs once before its loop (FA2's peeled or masked K/V steps) into K/V steps, each
ending with its PRODUCTS-th product (S's and P V's HMMAs: 256 at FA2's d128 tiles), the first holding the
prologue, and sets each beside one pass of the loop: a warp's instructions by kind, and the stall samples of
all warps for one run of the piece.

SASS is the source page exported as CSV (`ncu --page source --csv`: executed counts and warp-stall samples per
SASS instruction), DETAILS the same run's details page (read for its grid, block, SM-sub-partition active cycles
and active warps per scheduler). The loop body is the instructions executed once per warp per K/V block; it
is cut where the code changes kind: before the first HMMA (copies issued, addresses, the barrier), S = Q K^T
(to the first FMNMX), the softmax up to the first HMMA after it, and P V with the softmax's tail the compiler
interleaves with it (exponentials, packing, row sums). Warp-stall samples are spread over a warp's whole life,
so a region's share of the loop's samples times the cycles a warp spends per K/V block is the region's time:

    cycles per warp and K/V block = SM-sub-partition active cycles x active warps per scheduler x
                                    sub-partitions / (warps x K/V blocks per warp)
"""

from __future__ import annotations

import csv
import gzip
import io
import re
import sys
from collections import Counter
from pathlib import Path

SUB_PARTITIONS = 132 * 4  # H200: 132 SMs of 4


def read_text(path: str) -> str:
    """A committed Nsight Compute page, gzipped or not."""
    data = Path(path).read_bytes()
    return gzip.decompress(data).decode() if path.endswith(".gz") else data.decode()


def _details(text: str) -> tuple[int, float, float]:
    """(warps launched, SM-sub-partition active cycles, active warps per scheduler) of the run."""
    grid, block = re.search(r"\((\d+), (\d+), (\d+)\)x\((\d+), (\d+), (\d+)\)", text).group(0).split("x")
    count = 1
    for part in (grid, block):
        for v in re.findall(r"\d+", part):
            count *= int(v)
    active = float(re.search(r"smsp__cycles_active\.avg\s+cycle\s+([\d,.]+)", text).group(1).replace(",", ""))
    warps = float(re.search(r"^\s*Active Warps Per Scheduler\s+warp\s+([\d.]+)", text, re.M).group(1))
    return count // 32, active, warps


def _body(text: str) -> tuple[list[tuple[str, int, Counter]], int]:
    """(opcode, samples, stall samples by reason) of each loop-body instruction, in code order, and the
    body's executed count (warps x K/V blocks per warp)."""
    rows = list(csv.reader(io.StringIO(text)))
    head = next(i for i, r in enumerate(rows) if r and r[0] == "Address")
    hdr = rows[head]
    ix = {h: i for i, h in enumerate(hdr)}
    stalls = [h for h in hdr if h.startswith("stall_") and "(Not" not in h]
    lines = [r for r in rows[head + 1:] if len(r) == len(hdr)]
    counts = [int(r[ix["Instructions Executed"]] or 0) for r in lines]
    # the loop body's count is its products': a reconvergence point can run more often (a branch that
    # diverges in one warp, as d96's copies by 120 of 128 threads, runs its BSYNC once per path)
    most = max(n for r, n in zip(lines, counts, strict=True) if " HMMA" in r[ix["Source"]])
    body = []
    for r, n in zip(lines, counts, strict=True):
        if n < 0.9 * most:  # executed once per warp and K/V block (the next K's copy: all blocks but one)
            continue
        toks = r[ix["Source"]].split()
        op = (toks[1] if toks[0].startswith("@") else toks[0]).split(".")[0]
        body.append((op, int(r[ix["Warp Stall Sampling (All Samples)"]] or 0),
                     Counter({h[6:]: int(r[ix[h]] or 0) for h in stalls})))
    return body, most


def regions(details: str, sass: str) -> dict:
    warps, active, per_scheduler = _details(read_text(details))
    body, most = _body(read_text(sass))
    step = active * per_scheduler * SUB_PARTITIONS / most  # cycles per warp and K/V block
    total = sum(s for _, s, _ in body)
    ops = [op for op, _, _ in body]
    s_gemm = ops.index("HMMA")
    softmax = ops.index("FMNMX")
    pv = ops.index("HMMA", softmax)
    cuts = {"before S (copies, addresses, barrier)": (0, s_gemm), "S = Q K^T": (s_gemm, softmax),
            "softmax": (softmax, pv), "P V and the softmax's tail": (pv, len(body))}
    out = {"warps": warps, "kv_blocks_per_warp": most / warps, "cycles_per_warp_step": step, "regions": {}}
    for name, (a, b) in cuts.items():
        part = body[a:b]
        why: Counter = Counter()
        for _, _, c in part:
            why.update(c)
        kinds = Counter(op for op, _, _ in part)
        out["regions"][name] = {
            "instructions": b - a, "hmma": kinds["HMMA"], "ldsm": kinds["LDSM"], "mufu": kinds["MUFU"],
            "cycles": step * sum(s for _, s, _ in part) / total,
            "stalls": {k: step * v / total for k, v in why.most_common() if v},
        }
    return out


def _instructions(text: str) -> list[tuple[str, int, int, Counter]]:
    """(opcode, executed count, samples, stall samples by reason) of every instruction, in code order."""
    rows = list(csv.reader(io.StringIO(text)))
    head = next(i for i, r in enumerate(rows) if r and r[0] == "Address")
    hdr = rows[head]
    ix = {h: i for i, h in enumerate(hdr)}
    stalls = [h for h in hdr if h.startswith("stall_") and "(Not" not in h]
    out = []
    for r in rows[head + 1:]:
        if len(r) != len(hdr):
            continue
        toks = r[ix["Source"]].split()
        op = (toks[1] if toks and toks[0].startswith("@") else (toks[0] if toks else "?")).split(".")[0]
        out.append((op, int(r[ix["Instructions Executed"]] or 0), int(r[ix["Warp Stall Sampling (All Samples)"]] or 0),
                    Counter({h[6:]: int(r[ix[h]] or 0) for h in stalls})))
    return out


def sections(details: str, sass: str, least: float = 0.01) -> dict:
    """Runs of consecutive instructions executed equally often (within 2%), each with its instructions, how
    often a warp runs it, HMMA / MUFU / LDSM counts and its cycles per warp (its share of the stall samples
    times a warp's life); runs under `least` of the samples are folded into the next."""
    warps, active, per_scheduler = _details(read_text(details))
    life = active * per_scheduler * SUB_PARTITIONS / warps  # cycles a warp lives, on average
    instrs = [i for i in _instructions(read_text(sass)) if i[1]]
    total = sum(i[2] for i in instrs) or 1
    runs: list[list] = []
    for ins in instrs:
        if runs and abs(ins[1] - runs[-1][0][1]) <= 0.02 * runs[-1][0][1]:
            runs[-1].append(ins)
        else:
            runs.append([ins])
    merged: list[list] = []
    for run in runs:
        if merged and sum(i[2] for i in merged[-1]) < least * total:
            merged[-1].extend(run)
        else:
            merged.append(run)
    every: Counter = Counter()
    for i in instrs:
        every.update(i[3])
    out = {"warps": warps, "cycles_per_warp": life, "sections": [],
           "stalls": {k: life * v / total for k, v in every.most_common() if v}}
    for run in merged:
        why: Counter = Counter()
        for i in run:
            why.update(i[3])
        samples = sum(i[2] for i in run)
        kinds = Counter(i[0] for i in run)
        out["sections"].append({
            "first": run[0][0], "instructions": len(run), "per_warp": run[0][1] / warps, "hmma": kinds["HMMA"],
            "mufu": kinds["MUFU"], "ldsm": kinds["LDSM"], "cycles": life * samples / total,
            "stalls": {k: life * v / total for k, v in why.most_common(6) if v}})
    return out


STEP_KINDS = ("HMMA", "LDSM", "MUFU", "MOV", "ISETP", "FSEL", "LDL", "STL")


def steps(sass: str, products: int) -> list[dict]:
    """The once-per-warp code before the loop cut into K/V steps of `products` HMMAs (the first with the
    prologue), then one pass of the loop (the instructions executed most often, with those of it a block's
    last pass skips): per piece its instructions and counts of STEP_KINDS (one warp's), and its warp-stall
    samples over all warps for one run of it (the loop's divided by its passes), in all and on its products."""
    instrs = [i for i in _instructions(read_text(sass)) if i[1]]
    most = max(i[1] for i in instrs if i[0] == "HMMA")
    once = instrs[0][1]  # the kernel's first instruction: every warp runs it once
    first_loop = next(k for k, i in enumerate(instrs) if i[1] > 1.5 * once)
    pieces: list[tuple[str, list]] = []
    current: list = []
    hmma = 0
    for i in instrs[:first_loop]:
        current.append(i)
        hmma += i[0] == "HMMA"
        if hmma and hmma % products == 0 and i[0] == "HMMA":
            pieces.append((f"step {len(pieces) + 1}" + (" with the prologue" if not pieces else ""), current))
            current = []
    loop = [i for i in instrs if i[1] >= 0.9 * most]
    out = []
    for name, part, runs in [*((n, p, 1) for n, p in pieces), ("loop pass", loop, most / once)]:
        kinds = Counter(i[0] for i in part)
        out.append({"piece": name, "instructions": len(part), **{k: kinds[k] for k in STEP_KINDS},
                    "samples": sum(i[2] for i in part) / runs,
                    "hmma_samples": sum(i[2] for i in part if i[0] == "HMMA") / runs})
    return out


def steps_markdown(name: str, rows: list[dict]) -> str:
    lines = [f"### {name}", "", "| piece | instructions | " + " | ".join(STEP_KINDS) + " | stall samples | on HMMA |",
             "|---|---:|" + "---:|" * len(STEP_KINDS) + "---:|---:|"]
    for r in rows:
        lines.append(f"| {r['piece']} | {r['instructions']} | " + " | ".join(str(r[k]) for k in STEP_KINDS)
                     + f" | {r['samples']:.0f} | {r['hmma_samples']:.0f} |")
    return "\n".join(lines) + "\n"


def sections_markdown(name: str, r: dict) -> str:
    why = ", ".join(f"{k} {c:.0f}" for k, c in list(r["stalls"].items())[:6])
    lines = [f"### {name}", "", f"{r['warps']} warps, {r['cycles_per_warp']:.0f} cycles each ({why})", "",
             "| from | instructions | runs per warp | HMMA | MUFU | LDSM | cycles per warp | top stall reasons |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for v in r["sections"]:
        why = ", ".join(f"{k} {c:.0f}" for k, c in v["stalls"].items())
        lines.append(f"| {v['first']} | {v['instructions']} | {v['per_warp']:.2f} | {v['hmma']} | {v['mufu']} | "
                     f"{v['ldsm']} | {v['cycles']:.0f} | {why} |")
    return "\n".join(lines) + "\n"


def markdown(name: str, r: dict) -> str:
    lines = [f"### {name}", "", f"{r['warps']} warps, {r['kv_blocks_per_warp']:.0f} K/V blocks each: "
             f"{r['cycles_per_warp_step']:.0f} cycles per warp and K/V block", "",
             "| region | instructions | HMMA | LDSM | MUFU | cycles | top stall reasons (cycles) |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for reg, v in r["regions"].items():
        why = ", ".join(f"{k} {c:.0f}" for k, c in list(v["stalls"].items())[:6])
        lines.append(f"| {reg} | {v['instructions']} | {v['hmma']} | {v['ldsm']} | {v['mufu']} | "
                     f"{v['cycles']:.0f} | {why} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--steps":
        if len(argv) < 3 or not argv[1].isdigit():
            sys.stderr.write("usage: ncu_regions --steps PRODUCTS SASS.csv[.gz] [...]\n")
            return 2
        for sass in argv[2:]:
            print(steps_markdown(Path(sass).name.split("-sass")[0], steps(sass, int(argv[1]))))
        return 0
    whole = bool(argv) and argv[0] == "--sections"
    argv = argv[1:] if whole else argv
    if not argv or len(argv) % 2:
        sys.stderr.write("usage: ncu_regions [--sections] DETAILS.txt SASS.csv[.gz] [DETAILS SASS ...]\n")
        return 2
    for details, sass in zip(argv[::2], argv[1::2], strict=True):
        name = Path(sass).name.split("-sass")[0]
        print(sections_markdown(name, sections(details, sass)) if whole else markdown(name, regions(details, sass)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
