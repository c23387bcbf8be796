"""Reports rendered from an `Evidence`: terminal, Markdown, HTML, JUnit and the evidence file.

Renderers are imported lazily by `write_reports`, which keeps this package
importable without rich or jinja2 loaded.
"""

from __future__ import annotations

from pathlib import Path

from typing import TYPE_CHECKING

from difftest.core.errors import ConfigError
from difftest.core.evidence import Evidence, atomic_write_text, write_evidence

if TYPE_CHECKING:
    from difftest.reports.trace import Trace

#: What a command writes into `--out`; removed when the next command starts.
REPORT_FILES = ("report.md", "report.html", "junit.xml", "evidence.json", "gate.md")
#: What the runner writes into `--out/probe/` per branch and tier.
PROBE_FILES = ("*-job.json", "*-runs.jsonl", "*-probe.log")


def prepare_out(out_dir: str | Path) -> Path:
    """Make `out_dir` usable and clear what an earlier command wrote there, before anything runs.

    Reports are only ever written whole (atomically) at the end of a command;
    clearing the old ones first means that a command that crashes or is
    interrupted leaves no report at all, never an older one that looks current.
    Raises ConfigError (exit 2) naming the folder when it cannot be written.
    """
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / "probe"
        stale = [out / name for name in REPORT_FILES]
        stale += [p for pattern in PROBE_FILES for p in probe.glob(pattern)] if probe.is_dir() else []
        for path in stale:
            path.unlink(missing_ok=True)
        atomic_write_text(out / ".difftest-write-test", "").unlink()
    except OSError as exc:
        raise ConfigError(
            f"--out {str(out)!r} cannot be used for reports: {exc.strerror or exc}",
            "pass --out a folder you can write to (it is created if missing)",
        ) from None
    return out


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
