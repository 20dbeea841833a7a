"""The 128-byte lines of SASS a forward kernel's warps run in each stretch, from Nsight Compute's executed
counts per instruction (the source page exported as CSV, `ncu --page source --csv --print-source sass`).

    python3 -m flashsim.experiments.code_lines SASS.csv[.gz] [...]
    python3 -m flashsim.experiments.code_lines --mask CAUSAL.csv[.gz] PLAIN.csv[.gz]
    python3 -m flashsim.experiments.code_lines --mask-sass SASS-COUNTS.json

The loop is the K/V loop: the stretch a backward branch closes that runs the most tensor-core products
(HMMA, executed); the prologue is what runs before it (for FA2 the peeled first iteration, and the masked
loop of kernels whose blocks mask two steps), the epilogue what runs after. A stretch's lines are the
distinct lines holding an instruction that ran: the code a block fetches through the SM's instruction cache
(ir.Code, simulator/icache.py), and the shapes of the fetch microbenchmark's attention-like kernels
(kernels/microbench/ifetch.cu, ifetch_p).

--mask: of one kernel run causal and not (the same binary), the lines of the causal run's loop that the other
never ran, and the instructions they hold: the mask's own code.
--mask-sass: the same from the static SASS (`experiments.sass_counts`' JSON) of our v2 kernels: of the K/V
loop's skipped regions the one that selects -inf (FSEL), its instructions and the lines only it occupies
(experiments/results/h200/session39/README.md).
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import re
import sys
from pathlib import Path

LINE = 128


def _rows(path: str) -> list[tuple[int, int, str]]:
    """(address, executed count, SASS text) of every instruction, in code order."""
    data = Path(path).read_bytes()
    text = gzip.decompress(data).decode() if path.endswith(".gz") else data.decode()
    rows = list(csv.reader(io.StringIO(text)))
    head = next(i for i, r in enumerate(rows) if r and r[0] == "Address")
    ix = {h: i for i, h in enumerate(rows[head])}
    return [(int(r[ix["Address"]], 16), int(r[ix["Instructions Executed"]] or 0), r[ix["Source"]].strip())
            for r in rows[head + 1:] if len(r) == len(rows[head])]


def _loop(rows: list) -> tuple[int, int]:
    """(first, last) index of the K/V loop: of the stretches a backward branch closes, the one whose
    executed HMMA count is largest."""
    at = {a: i for i, (a, _, _) in enumerate(rows)}
    best, span = -1, (len(rows), len(rows) - 1)
    for i, (a, n, text) in enumerate(rows):
        m = re.search(r"\bBRA\b.*?(0x[0-9a-f]+)", text)
        if not n or not m or int(m.group(1), 16) >= a or int(m.group(1), 16) not in at:
            continue
        first = at[int(m.group(1), 16)]
        products = sum(c for _, c, t in rows[first:i + 1] if " HMMA" in f" {t}")
        if products > best:
            best, span = products, (first, i)
    return span


def stretches(path: str) -> dict[str, int]:
    """{'prologue', 'loop', 'epilogue': distinct 128-byte lines run there} of one kernel's run."""
    rows = _rows(path)
    base = rows[0][0]
    first, last = _loop(rows)
    parts = {"prologue": rows[:first], "loop": rows[first:last + 1], "epilogue": rows[last + 1:]}
    return {name: len({(a - base) // LINE for a, n, _ in part if n}) for name, part in parts.items()}


def mask(causal: str, plain: str) -> tuple[int, int]:
    """(lines, instructions) of the causal run's K/V loop that the non-causal run of the same kernel never ran."""
    rows, other = _rows(causal), _rows(plain)
    base, other_base = rows[0][0], other[0][0]
    ran = {(a - other_base) // LINE for a, n, _ in other if n}
    first, last = _loop(rows)
    lines = {(a - base) // LINE for a, n, _ in rows[first:last + 1] if n} - ran
    return len(lines), sum(1 for a, _, _ in rows[first:last + 1] if (a - base) // LINE in lines)


_V2_NAME = re.compile(r"flashsim_v2_d(\d+)_bf16_(\d+)x(\d+)w(\d+)s\d+_fwd$")


def sass_masks(counts: dict) -> dict[tuple, tuple[int, int]]:
    """{("flashsim", d, block_m, block_n, warps): (lines, instructions)} of each bf16 v2 kernel's mask, from
    experiments.sass_counts' JSON ({cubin: {kernel: {..., "loops": [{"skips": [...]}]}}})."""
    out = {}
    for kernels in counts.values():
        for name, kernel in kernels.items():
            m = _V2_NAME.match(name)
            if not m:
                continue
            for loop in kernel.get("loops", []):
                for skip in loop.get("skips", []):
                    if "select" in skip["classes"]:
                        start, end = int(skip["start"], 16), int(skip["end"], 16)
                        lines = end // LINE - -(-start // LINE)  # lines wholly in [start, end)
                        out["flashsim", *map(int, m.groups())] = (lines, sum(skip["classes"].values()))
    return out


def _run(argv: list[str]) -> int:
    if argv[:1] == ["--mask-sass"]:
        if len(argv) != 2:
            raise ValueError("usage: code_lines --mask-sass SASS-COUNTS.json")
        for key, (lines, instructions) in sorted(sass_masks(json.loads(Path(argv[1]).read_text())).items()):
            print(f"{key}: {lines} lines, {instructions} instructions")
        return 0
    if argv[:1] == ["--mask"]:
        if len(argv) != 3:
            raise ValueError("usage: code_lines --mask CAUSAL.csv[.gz] PLAIN.csv[.gz]")
        lines, instructions = mask(argv[1], argv[2])
        print(f"mask: {lines} lines, {instructions} instructions")
        return 0
    if not argv:
        raise ValueError("usage: code_lines SASS.csv[.gz] [...]")
    for path in argv:
        s = stretches(path)
        print(f"{Path(path).name.split('-sass')[0]}: " + ", ".join(f"{k} {v}" for k, v in s.items())
              + f" ({sum(s.values()) * LINE / 1024:.1f} KiB)")
    return 0


def main(argv: list[str]) -> int:
    try:
        return _run(argv)
    except (OSError, ValueError, KeyError, StopIteration) as exc:  # bad input: one line, status 2
        sys.stderr.write(f"code_lines: {exc or type(exc).__name__}\n")
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
