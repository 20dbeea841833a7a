"""`flashsim kernels ...`: build the CUDA kernels and show what was built."""

from __future__ import annotations

import json

from flashsim.console import make_console

from .registry import ARCHS


def register(subparsers) -> None:
    parser = subparsers.add_parser("kernels", help="build and list the reference CUDA kernels")
    sub = parser.add_subparsers(dest="kernels_command", metavar="COMMAND", parser_class=type(parser))
    b = sub.add_parser("build", help="compile every kernel with nvcc and print its resources (registers, spills)")
    b.add_argument("--out", help="build directory (default: $FLASHSIM_KERNEL_DIR or ~/.cache/flashsim/kernels)")
    b.add_argument("--algo", action="append", help="only this algorithm (repeatable)")
    b.add_argument("--arch", action="append", choices=ARCHS, help="only this target (repeatable)")
    b.add_argument("--jobs", type=int, help="parallel nvcc processes (default: CPU count)")
    b.add_argument("--force", action="store_true", help="rebuild even if up to date")
    b.add_argument("--json", action="store_true", help="print the resource rows as JSON")
    b.add_argument("--no-microbench", action="store_true",
                   help="skip the calibration microbenchmarks (built by default when no --algo is given)")  # fmt: skip
    b.set_defaults(func=_build)
    ls = sub.add_parser("list", help="the variants (head dim, dtype, tiling) each algorithm is built with")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=_list)
    parser.set_defaults(func=lambda args: parser.print_help() or 2)


def _build(args) -> int:
    from .build import build_all, build_dir, resource_rows

    manifests = build_all(args.algo, args.arch, args.out, args.jobs, args.force)
    rows = resource_rows(manifests)
    if not args.algo and not args.no_microbench:
        from .build import build_microbenchmarks

        build_microbenchmarks(args.arch, args.out, args.force)
    if args.json:
        print(json.dumps({"build_dir": str(build_dir(args.out)), "kernels": rows}, indent=1))
        return 0
    from rich.table import Table

    table = Table(title=f"flashsim kernels ({build_dir(args.out)})")
    numeric = ("d", "regs", "smem", "dyn smem", "stack")
    for col in ("algo", "entry", "d", "dtype", "tiling", "arch", "regs", "smem", "dyn smem", "stack", "spill st/ld"):
        table.add_column(col, justify="right" if col in numeric else "left", no_wrap=True)
    for r in rows:
        spill = f"{r['spill_store_bytes']}/{r['spill_load_bytes']}"
        t = r["tiling"]
        tiling = f"{t['block_m']}x{t['block_n']} w{t['warps']} s{t['stages']}"
        table.add_row(r["algo"], r["entry"], str(r["headdim"]), r["dtype"], tiling, r["arch"], str(r["registers"]),
                      str(r["smem_static_bytes"]), str(r["smem_dynamic_bytes"]), str(r["stack_bytes"]),
                      spill if spill != "0/0" else "-")  # fmt: skip
    make_console().print(table)
    return 0


def _list(args) -> int:
    from .registry import families

    data = {
        algo: {
            "source": fam.source,
            "archs": list(fam.archs),
            "summary": fam.summary,
            "variants": [v.describe() for v in fam.variants],
        }  # fmt: skip
        for algo, fam in sorted(families().items())
    }
    if args.json:
        print(json.dumps(data, indent=1))
        return 0
    for algo, info in data.items():
        print(f"{algo} ({info['source']}, {', '.join(info['archs'])}): {info['summary']}")
        for v in info["variants"]:
            print(f"  {v}")
    return 0


def main(argv=None) -> int:
    """`python3 -m flashsim.kernels.commands build ...`: the same commands without the rest of the CLI's imports."""
    import argparse
    import sys

    from flashsim.errors import FlashsimError

    parser = argparse.ArgumentParser(prog="python3 -m flashsim.kernels.commands")
    register(parser.add_subparsers(dest="command", metavar="COMMAND"))
    args = parser.parse_args(["kernels", *(sys.argv[1:] if argv is None else argv)])
    try:
        return int(args.func(args) or 0)
    except FlashsimError as exc:
        sys.stderr.write(f"flashsim: error: {exc}\n")
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
