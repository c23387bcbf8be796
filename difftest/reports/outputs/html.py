"""report.html: the HTML report, with the step trace of each result that does not pass."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from difftest.reports.sources import RunReport


def render(report: RunReport) -> str:
    from difftest.reports.html import render_html

    return render_html(
        report.evidence, dict(report.traces or {}), report.scenarios, report.recorded
    )
