"""The 128-byte lines of SASS a forward kernel's warps run in each stretch, from Nsight Compute's executed
counts per instruction (the source page exported as CSV, `ncu --page source --csv --print-source sass`).

    python3 -m flashsim.experiments.code_lines SASS.csv[.gz] [...]

The loop is the K/V loop: the stretch a backward branch closes that runs the most tensor-core products
(HMMA, executed); the prologue is what runs before it (for FA2 the peeled first iteration, and the masked
loop of kernels whose blocks mask two steps), the epilogue what runs after. A stretch's lines are the
distinct lines holding an instruction that ran: the code a block fetches through the SM's instruction cache
(ir.Code, simulator/icache.py), and the shapes of the fetch microbenchmark's attention-like kernels
(kernels/microbench/ifetch.cu, ifetch_p).
"""

from __future__ import annotations

import csv
import gzip
import io
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


def main(argv: list[str]) -> int:
    if not argv:
        sys.stderr.write("usage: code_lines SASS.csv[.gz] [...]\n")
        return 2
    for path in argv:
        s = stretches(path)
        print(f"{Path(path).name.split('-sass')[0]}: " + ", ".join(f"{k} {v}" for k, v in s.items())
              + f" ({sum(s.values()) * LINE / 1024:.1f} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
