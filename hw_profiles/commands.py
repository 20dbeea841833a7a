"""`flashsim profiles list|show|diff`, and the --hw/--set options other commands share.

Kept light at import time (the CLI imports every command module): rich is imported when a table is drawn.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from flashsim.console import make_console
from flashsim.errors import ProfileError
from flashsim.units import format_bytes, format_si

from .loader import list_profiles, load_profile
from .profile import PARAMS, PROVENANCES, Profile, describe_provenance, unit_of

# The profile's SM clocks: the one memory-bound kernels run at and those under each kind of tensor load
CLOCK_KEYS = ("sm_clock_hz", "sm_clock_mma_sync_load_hz", "sm_clock_wgmma_load_hz", "sm_clock_light_tensor_load_hz")


def add_profile_args(parser: argparse.ArgumentParser) -> None:
    """--hw NAME|PATH (default h100), repeatable --set KEY=VALUE and --clock GHZ; read them back with
    profile_from_args."""
    parser.add_argument(
        "--hw",
        default="h100",
        metavar="NAME|PATH",
        help="hardware profile: a shipped name or alias (see `flashsim profiles list`) or a TOML file",
    )
    _add_set_arg(parser)
    parser.add_argument(
        "--clock",
        type=float,
        metavar="GHZ",
        help="run every kernel at this SM clock, whatever its load (the profile's clocks under load otherwise); "
        "e.g. the clock a measured kernel ran at",
    )


def clock_overrides(ghz: float | None) -> list[str]:
    """--clock GHZ as --set overrides of every SM clock key ([] for None)."""
    if ghz is None:
        return []
    if not 0.1 <= ghz <= 5.0:
        raise ProfileError(f"--clock expects an SM clock in GHz between 0.1 and 5, got {ghz:g}")
    return [f"{key}={ghz * 1e9:.6g}" for key in CLOCK_KEYS]


def overridden(profile: Profile) -> dict[str, str]:
    """The parameters --set or --clock changed, each with its value as given ({} for a profile as shipped)."""
    prefix = "override: --set "
    return {key: src[len(prefix):].split("=", 1)[1] for key, src in sorted(profile.sources.items())
            if src.startswith(prefix) and "=" in src}


def profile_from_args(args: argparse.Namespace) -> Profile:
    overrides = list(getattr(args, "hw_set", None) or []) + clock_overrides(getattr(args, "clock", None))
    return load_profile(getattr(args, "hw", "h100"), overrides)


def _add_set_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--set",
        dest="hw_set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a profile parameter (repeatable), e.g. --set hbm_bandwidth_bytes_per_s=6e12; "
        "features=+tma,-wgmma edits the feature set",
    )


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "profiles",
        help="list, show and compare hardware profiles",
        description="Hardware profiles: one TOML per GPU or what-if; every number carries its source.",
    )
    sub = parser.add_subparsers(dest="profiles_command", metavar="ACTION", required=True)

    p = sub.add_parser("list", help="the shipped profiles with their headline numbers")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.set_defaults(func=_cmd_list)

    p = sub.add_parser("show", help="every parameter of a profile with its unit and source")
    p.add_argument("profile", metavar="NAME|PATH")
    _add_set_arg(p)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.set_defaults(func=_cmd_show)

    p = sub.add_parser("diff", help="the parameters in which two profiles differ")
    p.add_argument("a", metavar="A")
    p.add_argument("b", metavar="B")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.set_defaults(func=_cmd_diff)


# -- commands -------------------------------------------------------------------------------------------


def _cmd_list(args: argparse.Namespace) -> int:
    rows = []
    for info in list_profiles():
        p = load_profile(info.path)
        rows.append(
            {
                "alias": info.alias,
                "name": p.name,
                "based_on": p.based_on,
                "provenance": p.provenance,
                "description": p.description,
                "sm_count": p.sm_count,
                "sm_clock_hz": p.sm_clock_hz,
                "smem_per_sm_bytes": p.smem_per_sm_bytes,
                "l2_bytes": p.l2_bytes,
                "hbm_bandwidth_bytes_per_s": p.hbm_bandwidth_bytes_per_s,
                "bf16_tensor_instr": p.best_tensor_instr,
                "bf16_tensor_peak_flops_per_s": p.tensor_peak_flops_per_s("bf16"),
            }
        )
    if args.json:
        return _print_json({"profiles": rows})
    from rich.table import Table
    from rich.text import Text

    table = Table(title="Hardware profiles (--hw NAME, or a path to your own TOML)")
    for col in ("alias", "name", "numbers", "SMs", "clock", "SMEM/SM", "L2", "HBM BW", "bf16 tensor TFLOP/s"):
        table.add_column(col, no_wrap=True, justify="left" if col in ("alias", "name", "numbers") else "right")
    for r in rows:
        table.add_row(
            *_texts(
                r["alias"],
                r["name"],
                r["provenance"],
                str(r["sm_count"]),
                human("sm_clock_hz", r["sm_clock_hz"]),
                human("smem_per_sm_bytes", r["smem_per_sm_bytes"]),
                human("l2_bytes", r["l2_bytes"]),
                human("hbm_bandwidth_bytes_per_s", r["hbm_bandwidth_bytes_per_s"]),
                f"{r['bf16_tensor_peak_flops_per_s'] / 1e12:.0f} ({r['bf16_tensor_instr']})",
            )
        )
    console = _console()
    console.print(table)
    console.print(Text("numbers: " + "; ".join(describe_provenance(k) for k in PROVENANCES)))
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    p = load_profile(args.profile, args.hw_set)
    if args.json:
        return _print_json(p.as_dict())
    from rich.table import Table
    from rich.text import Text

    console = _console()
    console.print(Text(f"{p.name}: {p.description}", style="bold"))
    based = f", based on {p.based_on}" if p.based_on else ""
    console.print(
        Text(
            f"arch {p.arch}, compute capability {p.compute_capability}{based}; "
            f"features: {', '.join(sorted(p.features))}; file: {p.origin}"
        )
    )
    console.print(Text(f"numbers: {describe_provenance(p.provenance)}"))
    table = Table()
    table.add_column("key", no_wrap=True)
    table.add_column("value", no_wrap=True, justify="right")
    table.add_column("source")
    for key, value in p.params.items():
        table.add_row(*_texts(key, human(key, value), p.source(key)))
    console.print(table)
    derived = Table(title="derived")
    derived.add_column("quantity", no_wrap=True)
    derived.add_column("value", no_wrap=True, justify="right")
    for key, value in p.derived().items():
        shown = f"{value:.1f} B/clk" if key == "hbm_bytes_per_clk" else f"{value / 1e12:.1f} TFLOP/s"
        derived.add_row(*_texts(key, shown))
    console.print(derived)
    return 0


def _cmd_diff(args: argparse.Namespace) -> int:
    a, b = load_profile(args.a), load_profile(args.b)
    diffs = differences(a, b)
    if args.json:
        return _print_json(
            {
                "a": {"name": a.name, "path": a.path},
                "b": {"name": b.name, "path": b.path},
                "differences": diffs,
            }
        )
    from rich.table import Table

    console = _console()
    if not diffs:
        console.print(f"{a.name} and {b.name} have the same values")
        return 0
    table = Table(title=f"{a.name} vs {b.name}")
    table.add_column("key", no_wrap=True)
    table.add_column(a.name, no_wrap=True, justify="right")
    table.add_column(b.name, no_wrap=True, justify="right")
    table.add_column("B/A", no_wrap=True, justify="right")
    for key, d in diffs.items():
        va, vb = d["a"], d["b"]
        numeric = isinstance(va, int | float) and isinstance(vb, int | float) and va
        ratio = f"{vb / va:.3g}x" if numeric else ""
        table.add_row(*_texts(key, human(key, va), human(key, vb), ratio))
    console.print(table)
    return 0


def differences(a: Profile, b: Profile) -> dict[str, dict[str, Any]]:
    """Keys whose values differ (metadata first, then parameters in declared order); absent keys are None."""
    out: dict[str, dict[str, Any]] = {}
    for key in ("arch", "compute_capability"):
        if getattr(a, key) != getattr(b, key):
            out[key] = {"a": getattr(a, key), "b": getattr(b, key)}
    if a.features != b.features:
        out["features"] = {"a": sorted(a.features), "b": sorted(b.features)}
    pa, pb = a.params, b.params
    for spec in PARAMS:
        va, vb = pa.get(spec.name), pb.get(spec.name)
        if va != vb:
            out[spec.name] = {
                "a": va,
                "b": vb,
                "unit": spec.unit,
                "a_source": a.sources.get(spec.name),
                "b_source": b.sources.get(spec.name),
            }
    return out


# -- formatting -----------------------------------------------------------------------------------------

def human(key: str, value: Any) -> str:
    """A value with its unit made readable: 228 KiB, 1.83 GHz, 3.015 TB/s, 3 µs, 29 cycles."""
    if value is None:
        return "-"
    if isinstance(value, list):
        return ", ".join(value)
    if isinstance(value, str):
        return value
    unit = unit_of(key)
    if unit == "B":
        return format_bytes(int(value))
    if unit in ("B/s", "Hz", "s"):
        return format_si(value, unit)
    number = f"{value:g}" if isinstance(value, float) else str(value)
    return f"{number} {unit}" if unit else number


def _texts(*cells: str) -> list[Any]:
    """Table cells as plain text, so brackets in a description or source are not read as rich markup."""
    from rich.text import Text

    return [Text(c) for c in cells]


def _console() -> Any:
    return make_console()


def _print_json(obj: dict[str, Any]) -> int:
    sys.stdout.write(json.dumps(obj, indent=2) + "\n")
    return 0
