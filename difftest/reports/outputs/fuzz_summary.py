"""The fuzz summary: fuzz.md in `--out` (Markdown), and the findings table on stdout."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from difftest.core.fuzz import FuzzReport


def render(report: FuzzReport) -> str:
    from difftest.reports.fuzz import render_fuzz_markdown

    return render_fuzz_markdown(report)


def show(report: FuzzReport) -> None:
    from difftest.reports.fuzz import render_fuzz_terminal
    from difftest.reports.outputs.console import wide_console

    render_fuzz_terminal(report, wide_console())
