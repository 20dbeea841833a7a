"""flashsim command line: each command group lives in its own module and registers itself here.

Bad input (a FlashsimError) prints one line and exits with status 2; nothing is half-written.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# Modules that expose register(subparsers); each command sets `func(args) -> int`.
COMMAND_MODULES = (
    "flashsim.hw_profiles.commands",
    "flashsim.algorithms.commands",
    "flashsim.simulator.commands",
    "flashsim.simulator.guide_commands",
    "flashsim.kernels.commands",
    "flashsim.experiments.commands",
    "flashsim.experiments.lab.commands",
)


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors as one line with exit status 2 (argparse's own status)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"flashsim: error: {message}\n")
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="flashsim",
        description="Cycle-level GPU memory-hierarchy simulator for attention (standard, FlashAttention V1-V3).",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            continue
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    from flashsim.errors import FlashsimError

    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except FlashsimError as exc:
        sys.stderr.write(f"flashsim: error: {exc}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("flashsim: interrupted\n")
        return 130


if __name__ == "__main__":
    sys.exit(main())
