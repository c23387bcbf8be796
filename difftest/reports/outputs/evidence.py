"""The evidence: evidence.json in `--out`, and the results as JSON on stdout (`--format json`).

The file is the evidence itself (what `verify`, `show` and `merge` read); the
stdout JSON holds the results with the exit code and what the command adds
(`RunReport.json_fields`: the gate's findings, verify's differences).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from difftest.reports.sources import RunReport


def render(report: RunReport) -> str:
    from difftest.core.evidence import evidence_json

    return evidence_json(report.evidence)


def show(report: RunReport) -> None:
    from difftest.reports.json_report import render_json

    print(render_json(report.evidence, report.exit_code, **report.json_fields()))
