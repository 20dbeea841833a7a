"""How flashsim writes quantities: the one convention every command's output follows.

Sizes in bytes use binary prefixes (KiB, MiB, GiB, TiB: memories come in powers of two, and a profile's
141 GB of HBM reads as 131 GiB). Rates and frequencies use decimal SI prefixes (TB/s, GHz: vendors quote
bandwidth that way, and 1 TB/s is 10^12 bytes per second).
"""

from __future__ import annotations

_BINARY = ((1 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB"))
_SI = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, ""), (1e-3, "m"), (1e-6, "µ"), (1e-9, "n"))


def format_bytes(n: float) -> str:
    """A size in bytes with a binary prefix and three significant digits: 512 B, 16 KiB, 1.56 MiB, 131 GiB.
    A prefix is used from 1000 of the one below, so the number never needs four digits."""
    for size, name in _BINARY:
        if abs(n) >= size * 1000 / 1024:
            return f"{n / size:.3g} {name}"
    return f"{n:.0f} B"


def format_si(value: float, unit: str, digits: int = 4) -> str:
    """A rate, frequency or time with a decimal SI prefix: 4.55 TB/s, 1.83 GHz, 3 µs."""
    scale, prefix = next(((s, p) for s, p in _SI if abs(value) >= s), _SI[-1])
    return f"{value / scale:.{digits}g} {prefix}{unit}"


def format_rate(bytes_per_s: float) -> str:
    """Bandwidth in decimal units: 3.35 TB/s."""
    return format_si(bytes_per_s, "B/s", 3)


def format_time(s: float) -> str:
    """A duration in s, ms or us with three significant digits."""
    if s >= 1:
        return f"{s:.3g} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3g} ms"
    return f"{s * 1e6:.3g} us"
