"""Static SASS instruction counts per kernel, by instruction class, from `cuobjdump -sass` of our cubins.

The per-class counts are what an instruction-issue model lowers tile ops to (FFMA/FMUL/FADD, MUFU.EX2, FMNMX,
conversions and packing, shuffles, shared-memory loads, HMMA / HGMMA issue, barriers): this records what the
compiler emitted for each kernel, so the model's lowering can be checked against it.

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
_INSTR = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)(?:\.[\w.]+)?\b")


def parse(sass: str) -> dict[str, dict[str, int]]:
    """kernel name -> {class: static count} (and the raw opcodes under 'opcodes')."""
    out: dict[str, dict] = {}
    name = None
    for line in sass.splitlines():
        m = _FUNCTION.match(line)
        if m:
            name = m.group(1)
            out[name] = {"classes": Counter(), "opcodes": Counter()}
            continue
        m = _INSTR.match(line)
        if name and m and m.group(1) != "NOP":
            op = m.group(1)
            out[name]["opcodes"][op] += 1
            out[name]["classes"][CLASSES.get(op, "other")] += 1
    return {k: {"classes": dict(v["classes"]), "opcodes": dict(v["opcodes"])} for k, v in out.items()}


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
