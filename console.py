"""The rich Console every command prints through: full width when the output is piped."""

from __future__ import annotations

import os
from typing import Any

# Piped output (a file, `less`, `grep`) has no terminal width; rich would assume 80 columns and wrap or cut
# tables. COLUMNS, when set, still wins.
PIPED_WIDTH = 200


def make_console(stderr: bool = False) -> Any:
    from rich.console import Console

    console = Console(stderr=stderr)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(stderr=stderr, width=PIPED_WIDTH)
    return console
