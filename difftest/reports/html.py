"""The HTML report: one self-contained file (inline CSS, no scripts, no external assets).

Rendered by Jinja2 with autoescape forced on for every template and string,
because branch names, error text and violation details come from code under
test and must never become markup.
"""

from __future__ import annotations

from jinja2 import Environment, PackageLoader, StrictUndefined

from difftest.core.evidence import Evidence
from difftest.core.values import format_value
from difftest.core.verdicts import SUMMARY_ORDER, summarize
from difftest.reports.format import printable
from difftest.reports.views import VERDICT_WORDS, branch_names, results_for, scenario_views, timestamp

TEMPLATE = "report.html.j2"


def _environment() -> Environment:
    env = Environment(
        loader=PackageLoader("difftest.reports", "templates"),
        autoescape=True,  # not select_autoescape: the template's name ends in .j2
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=_safe,
    )
    env.filters["value"] = format_value
    return env


def _safe(value: object) -> object:
    """Every value a template prints, cleaned before it is escaped: no NUL, ESC or lone surrogate
    from a branch reaches the file raw."""
    return printable(value) if isinstance(value, str) else value


def render_html(evidence: Evidence) -> str:
    views = scenario_views(evidence)
    summary = summarize(evidence.results)
    branches = branch_names(evidence)
    nonpass = {
        (view.name, branch): [r for r in results_for(evidence, view.name, branch) if r.verdict != "pass"]
        for view in views
        for branch in branches
    }
    return _environment().get_template(TEMPLATE).render(
        evidence=evidence,
        created=timestamp(evidence),
        views=views,
        branches=branches,
        summary={b: summary.get(b) for b in branches},
        verdicts=SUMMARY_ORDER,
        words=VERDICT_WORDS,
        nonpass=nonpass,
    )
