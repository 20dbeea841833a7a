"""What every lab experiment returns, and the small helpers they share (figures, errors, a profile)."""

from __future__ import annotations

from dataclasses import dataclass, field

# Plots stay small enough to commit: modest size and resolution.
FIG_DPI = 90


@dataclass
class Outcome:
    """The result of one experiment: whether its claim held, one line saying so with the numbers, and
    every number measured (JSON-able)."""

    holds: bool
    verdict: str
    numbers: dict = field(default_factory=dict)


def figure(ncols: int = 1, width: float = 6.0, height: float = 4.0):
    """A matplotlib figure without a display (Agg), ncols panels side by side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, ncols, figsize=(width * ncols, height))
    return fig, axes


def save(fig, path: str, title: str) -> None:
    import matplotlib.pyplot as plt

    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=FIG_DPI)
    plt.close(fig)


def max_rel_error(out, ref) -> float:
    """max |out - ref| / max |ref|: one number per output, insensitive to entries near zero."""
    return float((out.double() - ref.double()).abs().max() / ref.double().abs().max())


def profile(name: str, overrides: dict | None = None):
    from flashsim.hw_profiles import load_profile

    p = load_profile(name)
    return p.with_overrides(overrides) if overrides else p
