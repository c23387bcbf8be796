"""report.md: the Markdown report, sized to fit a pull-request comment."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from difftest.reports.sources import RunReport


def render(report: RunReport) -> str:
    from difftest.reports.markdown import render_markdown

    return render_markdown(report.evidence, report.scenarios, report.recorded)
