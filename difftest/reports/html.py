"""The HTML report: one self-contained file (inline CSS and SVG, no scripts, no external assets).

Rendered by Jinja2 with autoescape forced on for every template and string,
because branch names, error text and violation details come from code under
test and must never become markup. Tables scroll inside their own box, so the
page itself never scrolls sideways, down to a 420 px wide screen.

Per scenario: the counter table of its most severe run (named) with the
per-position acceptance rates as a bar chart (each branch beside the oracle),
the other runs one click away, and for every result that is not a pass its
violations, its differences and - when the step records were at hand - its
step trace with the first step that disagrees with the oracle marked. Links
point at the evidence and the raw probe records next to the report.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup

from difftest.core.evidence import Evidence
from difftest.core.records import ProbeRun, Result
from difftest.core.values import format_value
from difftest.core.verdicts import SUMMARY_ORDER, summarize
from difftest.reports.chart import Chart, acceptance_chart
from difftest.reports.conclusion import RunKey, conclude
from difftest.reports.format import printable
from difftest.reports.tests_matrix import LEGEND, cross_matrix, tests_matrices
from difftest.reports.trace import FIELDS, Elided, StatsRow, Trace, TraceStep
from difftest.reports.views import (
    VERDICT_WORDS,
    Cell,
    Row,
    ScenarioView,
    branch_names,
    branch_origin,
    counter_rows,
    protection_doubted,
    protection_note,
    scenario_views,
    timestamp,
)
from difftest.tiers.common.accounting import READINGS
from difftest.tiers.common.scenario import ScenarioBase

TEMPLATE = "report.html.j2"
#: Steps of one trace shown in the report (around the first disagreement); the raw records hold all.
TRACE_STEPS = 8
TraceKey = tuple[str, str, str]


@dataclass(frozen=True)
class OtherRun:
    label: str
    rows: list[Row]
    verdicts: list[Cell]


@dataclass(frozen=True)
class Failing:
    result: Result
    trace: Trace | None
    records: str | None


@dataclass(frozen=True)
class Section:
    view: ScenarioView
    anchor: str
    chart: Chart | None
    others: list[OtherRun] = field(default_factory=list)
    failing: list[Failing] = field(default_factory=list)


def _safe(value: object) -> object:
    """Every value a template prints, cleaned before it is escaped: no NUL, ESC or lone surrogate
    from a branch reaches the file raw.

    `Markup` (a macro's output, such as a counter table) was escaped piece by piece when it was
    built; it stays `Markup` after cleaning, or autoescape would print its tags as text.
    """
    if isinstance(value, Markup):
        return Markup(printable(value))
    return printable(value) if isinstance(value, str) else value


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
    env.globals.update(stats_cells=stats_cells, is_elided=lambda item: isinstance(item, Elided))
    return env


def render_html(
    evidence: Evidence,
    traces: dict[TraceKey, Trace] | None = None,
    scenarios: Mapping[str, ScenarioBase] | None = None,
    recorded: Mapping[RunKey, ProbeRun] | None = None,
) -> str:
    """The report; `scenarios` and `recorded` (runs with steps) let the conclusion name the oracle's
    reading as a row count's reason (`conclusion.conclude`)."""
    traces = traces or {}
    views = scenario_views(evidence)
    summary = summarize(evidence.results)
    branches = branch_names(evidence)
    records = {(p.branch, p.tier): p.records for p in evidence.probes}
    sections = [
        Section(
            view=view,
            anchor=f"scenario-{i}",
            chart=acceptance_chart(view),
            others=_other_runs(view),
            failing=[
                Failing(
                    r, traces.get((r.branch, r.scenario, r.label)), records.get((r.branch, r.tier))
                )
                for b in view.branches
                for r in view.results.get(b, [])
                if r.verdict != "pass"
            ],
        )
        for i, view in enumerate(views, 1)
        if not view.skipped
    ]
    matrices = tests_matrices(evidence)
    return (
        _environment()
        .get_template(TEMPLATE)
        .render(
            evidence=evidence,
            created=timestamp(evidence),
            reading_rule=READINGS.get(evidence.reading, ""),
            protection=protection_note(evidence),
            unconfined=protection_doubted(evidence),
            conclusion=conclude(evidence, scenarios, recorded),
            sections=sections,
            skipped=[v for v in views if v.skipped],
            branches=branches,
            summary={b: summary.get(b) for b in branches},
            origins={b: branch_origin(evidence.branches.get(b)) for b in branches},
            verdicts=SUMMARY_ORDER,
            words={**VERDICT_WORDS, "unverified": "pass, not verified"},
            fields=FIELDS,
            trace_steps=TRACE_STEPS,
            test_matrices=matrices,
            cross=cross_matrix(matrices),
            tests_legend=LEGEND,
        )
    )


def _other_runs(view: ScenarioView) -> list[OtherRun]:
    """Every run but the shown one, as its own counter table (collapsed in the page); none for a
    tier without counters (tests), whose runs the tests matrix shows."""
    if not view.rows:
        return []
    out = []
    for label in view.labels:
        if label == view.shown:
            continue
        chosen = [
            next((r for r in view.results.get(b, []) if r.label == label), None)
            for b in view.branches
        ]
        verdicts = [
            Cell(VERDICT_WORDS[r.verdict], None if r.verdict == "pass" else r.verdict)
            if r
            else Cell("not run", "error")
            for r in chosen
        ]
        out.append(OtherRun(label, counter_rows(view.tier, chosen), verdicts))
    return out


def stats_cells(step: TraceStep, row: StatsRow | None) -> list[tuple[str, str, bool]]:
    """(field label, value, differs) for one side of a step; a step without spec stats says so."""
    if row is None:
        return [("oracle", "not known for this tier", False)]
    if not row.reported:
        return [("", "no spec stats reported", bool(step.differs))]
    return [
        (label, format_value(row.value(name)), name in step.differs)
        for name, label in FIELDS.items()
    ]
