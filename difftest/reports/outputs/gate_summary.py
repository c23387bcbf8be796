"""The gate's summary in Markdown: gate.md in `--out`, and on stdout (`gate --format md`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from difftest.reports.sources import GateReport


def render(report: GateReport) -> str:
    from difftest.reports.gate_markdown import render_gate_markdown

    return render_gate_markdown(report.outcome, report.base, report.head)


def show(report: GateReport) -> None:
    print(render(report))
