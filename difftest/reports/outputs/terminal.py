"""The terminal report on stdout (`run --format text`, `merge`): tables, grid, conclusion."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from difftest.reports.sources import RunReport


def show(report: RunReport) -> None:
    from difftest.reports.outputs.console import stdout_console
    from difftest.reports.terminal import render_terminal

    render_terminal(
        report.evidence, stdout_console(), report.verbose, report.scenarios, report.recorded
    )
