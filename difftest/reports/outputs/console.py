"""The consoles reports print to on stdout."""

from __future__ import annotations

import sys

from rich.console import Console


def stdout_console() -> Console:
    """The report's console: the terminal's width, or $COLUMNS (default 80) when piped; no colour
    then."""
    return Console(highlight=False)


def wide_console() -> Console:
    """The terminal's width on a terminal, 160 columns when piped (the fuzz summary's long rows)."""
    return Console(width=None if sys.stdout.isatty() else 160)
