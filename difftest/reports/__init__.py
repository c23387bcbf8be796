"""Reports rendered from an `Evidence`: terminal, Markdown, HTML, JUnit and the evidence file.

Renderers are imported lazily by `write_reports`, which keeps this package
importable without rich or jinja2 loaded.
"""

from __future__ import annotations

from pathlib import Path

from typing import TYPE_CHECKING

from difftest.core.evidence import Evidence, atomic_write_text, write_evidence

if TYPE_CHECKING:
    from difftest.reports.trace import Trace


def write_reports(
    evidence: Evidence, out_dir: str | Path, traces: "dict[tuple[str, str, str], Trace] | None" = None
) -> dict[str, Path]:
    """Write report.md, report.html, junit.xml and evidence.json into `out_dir`; the HTML report
    carries the step traces given, keyed by (branch, scenario, run label)."""
    from difftest.reports.html import render_html
    from difftest.reports.junit import render_junit
    from difftest.reports.markdown import render_markdown

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    return {
        "markdown": atomic_write_text(out / "report.md", render_markdown(evidence)),
        "html": atomic_write_text(out / "report.html", render_html(evidence, traces or {})),
        "junit": atomic_write_text(out / "junit.xml", render_junit(evidence)),
        "evidence": write_evidence(evidence, out / "evidence.json"),
    }
