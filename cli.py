"""flashsim command line: each command group lives in its own module and registers itself here.

Bad input (a FlashsimError) prints one line and exits with status 2; nothing is half-written.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# Modules that expose register(subparsers), with the commands each registers; each command sets
# `func(args) -> int`. A run imports only its command's module (importing them all costs more than a short
# simulation); help imports them all.
COMMANDS = {
    "flashsim.hw_profiles.commands": ("profiles",),
    "flashsim.algorithms.commands": ("io", "explain", "memory"),
    "flashsim.simulator.commands": ("simulate", "compare", "sweep", "trace", "tour", "cache"),
    "flashsim.simulator.guide_commands": ("animate", "advise"),
    "flashsim.kernels.commands": ("kernels",),
    "flashsim.experiments.commands": ("calibrate", "validate", "accuracy"),
    "flashsim.experiments.lab.commands": ("lab", "numerics"),
}
COMMAND_MODULES = tuple(COMMANDS)


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors as one line with exit status 2 (argparse's own status)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"flashsim: error: {message}\n")
        raise SystemExit(2)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or only of `command` when a module registers it."""
    parser = _Parser(
        prog="flashsim",
        description="Cycle-level GPU memory-hierarchy simulator for attention (standard, FlashAttention V1-V3).",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    modules = [m for m, names in COMMANDS.items() if command in names] or COMMAND_MODULES
    for name in modules:
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

    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(argv[0] if argv else None)
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
