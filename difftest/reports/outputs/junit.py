"""junit.xml: one test case per result, for CI test views."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from difftest.reports.sources import RunReport


def render(report: RunReport) -> str:
    from difftest.reports.junit import render_junit

    return render_junit(report.evidence)
