"""The gate's outcome for a person at a terminal (`gate --format text`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from difftest.reports.sources import GateReport


def show(report: GateReport) -> None:
    from difftest.reports.gate_terminal import render_gate_terminal
    from difftest.reports.outputs.console import stdout_console

    render_gate_terminal(report.outcome, report.base, report.head, stdout_console())
