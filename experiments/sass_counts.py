"""Static SASS instruction counts per kernel, by instruction class, from `cuobjdump -sass` of our cubins.

The per-class counts are what an instruction-issue model lowers tile ops to (FFMA/FMUL/FADD, MUFU.EX2, FMNMX,
conversions and packing, shuffles, shared-memory loads, HMMA / HGMMA issue, barriers): this records what the
compiler emitted for each kernel, so the model's lowering can be checked against it.

Whole-kernel counts mix the prologue, the epilogue and the loop. Each kernel's `loops` isolate the loop bodies:
a conditional backward branch closes a loop (its target opens it; an unconditional one returns from
out-of-line code, such as the retry of a failed barrier wait, into the middle of the function). A body's
counts are those of one iteration, and each forward branch inside it that skips a region (a uniform `if`,
such as the mask of blocks that cross the diagonal) is listed under `skips` with the counts of what it
skips. One iteration without any skipped region is `classes` minus every outermost skip's classes.

    python3 -m flashsim.experiments.sass_counts build/kernels --out sass-counts.json   (where cuobjdump is)
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

# opcode (before the first '.') -> class; anything else is 'other'
CLASSES = {
    "FFMA": "fp32", "FMUL": "fp32", "FADD": "fp32", "FMNMX": "fmnmx", "FSETP": "fp32_compare", "FSEL": "select",
    "MUFU": "mufu", "F2F": "convert", "F2FP": "convert", "I2F": "convert", "F2I": "convert", "PRMT": "pack",
    "SHFL": "shuffle", "LDS": "lds", "LDSM": "ldsm", "STS": "sts", "LDG": "global", "STG": "global",
    "LDGSTS": "cp_async", "LDGDEPBAR": "cp_async", "DEPBAR": "cp_async", "UTMALDG": "tma", "UTMASTG": "tma",
    "HMMA": "hmma", "HGMMA": "hgmma", "QGMMA": "hgmma", "WARPGROUP": "hgmma_sync", "BAR": "barrier",
    "SYNCS": "barrier", "BRA": "branch", "IMAD": "int", "IADD3": "int", "LEA": "int", "LOP3": "int",
    "SHF": "int", "ISETP": "int", "MOV": "move", "S2R": "special", "S2UR": "special", "R2UR": "move",
    "UMOV": "uniform", "UIADD3": "uniform", "ULDC": "uniform", "USHF": "uniform", "ULOP3": "uniform",
}
_FUNCTION = re.compile(r"^\s*Function\s*:\s*(\S+)")
_INSTR = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)(?:\.[\w.]+)?\b(.*)")
_TARGET = re.compile(r"(0x[0-9a-f]+)\s*;")
INSTR_BYTES = 16  # every SASS instruction since Volta


def _classes(instrs: list[tuple[int, str, int | None]], lo: int, hi: int) -> dict[str, int]:
    return dict(Counter(CLASSES.get(op, "other") for addr, op, _ in instrs if lo <= addr < hi))


def loops(instrs: list[tuple[int, str, int | None]]) -> list[dict]:
    """The loops of one function, from its (address, opcode, branch target) list, where only conditional
    branches have a target: each backward one closes a body [target, branch]; forward branches inside the
    body skip [the next instruction, target)."""
    found = []
    for addr, op, target in instrs:
        if op != "BRA" or target is None or target >= addr:
            continue
        end = addr + INSTR_BYTES
        skips = [{"start": hex(a + INSTR_BYTES), "end": hex(t), "classes": _classes(instrs, a + INSTR_BYTES, t)}
                 for a, o, t in instrs if o == "BRA" and t is not None and target <= a < addr and a < t <= addr]
        found.append({"start": hex(target), "end": hex(end), "classes": _classes(instrs, target, end),
                      "skips": skips})
    return found


def parse(sass: str) -> dict[str, dict]:
    """kernel name -> {class: static count}, the raw opcodes under 'opcodes' and its loop bodies under 'loops'."""
    listing: dict[str, list[tuple[int, str, int | None]]] = {}
    name = None
    for line in sass.splitlines():
        m = _FUNCTION.match(line)
        if m:
            name = m.group(1)
            listing[name] = []
            continue
        m = _INSTR.match(line)
        if name and m and m.group(3) != "NOP":
            target = _TARGET.search(m.group(4)) if m.group(3) == "BRA" and m.group(2) else None
            listing[name].append((int(m.group(1), 16), m.group(3), int(target.group(1), 16) if target else None))
    out = {}
    for kernel, instrs in listing.items():
        opcodes = Counter(op for _, op, _ in instrs)
        classes = Counter(CLASSES.get(op, "other") for _, op, _ in instrs)
        out[kernel] = {"classes": dict(classes), "opcodes": dict(opcodes), "loops": loops(instrs)}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cubin_dir")
    ap.add_argument("--out", default="sass-counts.json")
    args = ap.parse_args(argv)
    tool = shutil.which("cuobjdump")
    if tool is None:
        sys.stderr.write("sass_counts: cuobjdump not found\n")
        return 2
    result = {}
    for cubin in sorted(Path(args.cubin_dir).rglob("*.cubin")):
        sass = subprocess.run([tool, "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
        result[cubin.name] = parse(sass)
    Path(args.out).write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    print(f"{sum(len(v) for v in result.values())} kernels in {len(result)} cubins -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
