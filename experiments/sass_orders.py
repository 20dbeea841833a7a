"""The order in which compiled kernels issue their ldmatrix loads and mma.sync products, read off their SASS.

    python3 -m flashsim.experiments.sass_orders SASS.txt [--loops | --gemms] [--match SUBSTRING] > orders.json

SASS.txt is `cuobjdump -sass` output, or Nsight Compute's source page of one kernel (`ncu --page source --csv
--print-source sass`, gzipped or not), which also holds kernels we do not build (SDPA's flash).

--loops (the ldsm_form microbenchmark): per function, the body of its timed loop, the backward branch whose
body holds the loads and products. --gemms (attention kernels): per function, each stretch between barriers
and branches that holds products, in program order (the forward kernels' S = Q K^T, then P V with the
softmax between its products). Each order is a string of 'L' (an LDSM) and 'm' (an HMMA); everything else
is left out (experiments/gemm_replay.py replays it).
"""

from __future__ import annotations

import argparse
import csv
import gzip
import io
import json
import re
import sys

_INSTR = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_.]+)\s*([^;]*);")


def functions(sass: str) -> dict[str, list[tuple[int, str, str]]]:
    """function name -> [(address, opcode, operands)] of `cuobjdump -sass` text."""
    out = {}
    for part in re.split(r"\n\s*Function : ", sass)[1:]:
        name, _, body = part.partition("\n")
        out[name.strip()] = [(int(m.group(1), 16), m.group(2), m.group(3)) for m in _INSTR.finditer(body)]
    return out


def ncu_function(text: str) -> dict[str, list[tuple[int, str, str]]]:
    """{kernel name: [(address, opcode, operands)]} of an ncu source page (its first line names the kernel)."""
    lines = text.splitlines()
    name = next(csv.reader([lines[0]]))[1]
    instrs = []
    for row in csv.DictReader(io.StringIO("\n".join(lines[1:]))):
        source = re.sub(r"^@!?U?P\w+\s+", "", row["Source"].strip())
        op, _, args = source.partition(" ")
        if op:
            instrs.append((int(row["Address"], 16), op, args.strip().rstrip(";")))
    return {name: instrs}


def read(path: str) -> dict[str, list[tuple[int, str, str]]]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        text = f.read()
    return ncu_function(text) if text.startswith('"Kernel Name"') else functions(text)


def _letters(instrs) -> str:
    return "".join("L" if op.startswith("LDSM") else "m" for _, op, _ in instrs if op.startswith(("LDSM", "HMMA")))


def loop_order(instrs: list[tuple[int, str, str]]) -> str | None:
    """The L / m order of the first loop (a backward branch) whose body holds products."""
    for addr, op, args in instrs:
        if op != "BRA":
            continue
        target = int(args.split()[-1], 16)
        if target < addr:
            order = _letters(i for i in instrs if target <= i[0] <= addr)
            if "m" in order:
                return order
    return None


def gemm_orders(instrs: list[tuple[int, str, str]]) -> list[str]:
    """The L / m order of each stretch between barriers and branches that holds products."""
    out, stretch = [], []
    for instr in instrs + [(0, "BAR", "")]:
        if instr[1].startswith(("BAR", "BRA")):
            order = _letters(stretch)
            if "m" in order:
                out.append(order)
            stretch = []
        else:
            stretch.append(instr)
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="sass_orders", description=__doc__.split("\n")[0])
    parser.add_argument("sass")
    kind = parser.add_mutually_exclusive_group(required=True)
    kind.add_argument("--loops", action="store_true")
    kind.add_argument("--gemms", action="store_true")
    parser.add_argument("--match", default="", help="only functions whose name holds this")
    args = parser.parse_args(argv)
    funcs = read(args.sass)
    out = {}
    for name, instrs in funcs.items():
        if args.match not in name:
            continue
        order = loop_order(instrs) if args.loops else gemm_orders(instrs)
        if order:
            out[name] = order
    json.dump(out, sys.stdout, indent=1, sort_keys=True)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
