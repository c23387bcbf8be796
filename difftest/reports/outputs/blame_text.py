"""`difftest blame`'s report for a person at a terminal (`blame --format text`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from difftest.reports.sources import BlameReport


def show(report: BlameReport) -> None:
    from difftest.reports.blame_terminal import render_blame_terminal
    from difftest.reports.outputs.console import stdout_console

    render_blame_terminal(report, stdout_console())
