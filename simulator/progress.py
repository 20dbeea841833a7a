"""A progress bar with an ETA for one long simulate run, on stderr.

It appears only once a run has taken SHOW_AFTER_S and only on a terminal, so short runs, pipes and --json
print nothing extra. It is driven by the fraction of the run's thread blocks done (blocks a periodic skip
leaves out count as done), which is what the simulated time grows with.
"""

from __future__ import annotations

import sys
import time

SHOW_AFTER_S = 2.0
# Redraws at most this often: each update costs far more than a block's bookkeeping.
UPDATE_EVERY_S = 0.1


class RunProgress:
    """Callable with the fraction done; use as a context manager around the run."""

    def __init__(self, label: str, enabled: bool = True):
        self.label = label
        self.enabled = enabled and sys.stderr.isatty()
        self.start = time.monotonic()
        self.next_update = self.start + SHOW_AFTER_S
        self.bar = None
        self.task = None

    def __call__(self, fraction: float) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if now < self.next_update:
            return
        self.next_update = now + UPDATE_EVERY_S
        if self.bar is None:
            self._show()
        self.bar.update(self.task, completed=fraction)

    def _show(self) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            Progress,
            TaskProgressColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.bar = Progress(
            TextColumn(self.label),
            BarColumn(),
            TaskProgressColumn(),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            transient=True,
        )
        self.bar.start()
        self.task = self.bar.add_task("", total=1.0)

    def __enter__(self) -> RunProgress:
        return self

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.stop()
            sys.stderr.write(f"{self.label}: simulated in {time.monotonic() - self.start:.1f} s\n")
