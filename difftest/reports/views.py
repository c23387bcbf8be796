"""The view every report shares, computed once from an `Evidence`.

Every renderer shows the same thing - a verdict grid, and per scenario a table
of counters by branch next to the oracle - so the grouping and the cell texts
are computed here (`scenario_views`) and each renderer only decides how they
look. The counter rows of a scenario's table are its tier's (`Tier.report_rows`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import timezone

from difftest import tiers
from difftest.core.evidence import Evidence
from difftest.core.records import Result, Totals, Verdict
from difftest.core.values import format_value
from difftest.core.verdicts import MAL, VERDICTS, first_reason, measured_mal, oracle_mal, worst
from difftest.tiers.base import Tier

#: How each verdict reads in a cell; `error` means the branch could not be measured.
VERDICT_WORDS: dict[str, str] = {
    "pass": "pass",
    "diverge": "diverge",
    "broken": "broken",
    "error": "could not measure",
}
#: Row labels of the counter table, in order.
ROW_LABELS: dict[str, str] = {
    "num_drafts": "num_drafts",
    "num_draft_tokens": "num_draft_tokens",
    "num_accepted_tokens": "num_accepted_tokens",
    "num_accepted_tokens_per_pos": "accepted per pos",
    "num_draft_tokens_per_pos": "draft tokens per pos",
    "num_emitted_tokens": "num_emitted_tokens",
    "emitted_source": "  emitted from",
    MAL: "mean acceptance length",
}
NOT_RUN = "not run"


@dataclass(frozen=True)
class Cell:
    """A table cell; `verdict` is set when the cell must stand out (colour, icon)."""

    text: str
    verdict: Verdict | None = None


@dataclass(frozen=True)
class Row:
    key: str
    label: str
    cells: list[Cell]
    oracle: str


@dataclass(frozen=True)
class Reason:
    """One distinct reason a branch failed a scenario, and the run labels it failed on."""

    verdict: Verdict
    text: str
    labels: list[str]


@dataclass(frozen=True)
class ScenarioView:
    name: str
    tier: str
    statement: str
    #: The run label whose values the counter rows show (the first one run).
    canonical: str
    labels: list[str]
    branches: list[str]
    rows: list[Row]
    #: Per branch, the verdict over all runs, e.g. `broken (4/9 runs)`.
    verdicts: list[Cell]
    reasons: dict[str, list[Reason]] = field(default_factory=dict)


def timestamp(evidence: Evidence) -> str:
    """When the evidence was made, in UTC, to the minute."""
    return evidence.created_at.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def branch_names(evidence: Evidence) -> list[str]:
    """Branches in config order, then any that only appear in results."""
    return list(dict.fromkeys([*evidence.branches, *(r.branch for r in evidence.results)]))


def scenario_names(evidence: Evidence) -> list[str]:
    return list(dict.fromkeys([*evidence.scenarios, *(r.scenario for r in evidence.results)]))


def results_for(evidence: Evidence, scenario: str, branch: str) -> list[Result]:
    return [r for r in evidence.results if r.scenario == scenario and r.branch == branch]


def verdict_cell(results: list[Result]) -> Cell:
    """All runs of one branch on one scenario (batch orders and requests alone), summarised in one cell."""
    if not results:
        return Cell(NOT_RUN, "error")
    top = worst(r.verdict for r in results)
    if len(results) == 1:
        return Cell(VERDICT_WORDS[top], None if top == "pass" else top)
    n = len(results)
    parts = []
    for verdict in VERDICTS:
        count = sum(r.verdict == verdict for r in results)
        if count and verdict != "pass":
            parts.append(f"{VERDICT_WORDS[verdict]} ({count}/{n} runs)")
    if not parts:
        return Cell(f"pass ({n}/{n} runs)")
    return Cell(", ".join(parts), top)


def reasons_for(results: Iterable[Result]) -> list[Reason]:
    """Distinct first reasons of the non-pass results, with the orders that share each."""
    grouped: dict[tuple[Verdict, str], list[str]] = {}
    for r in results:
        if r.verdict != "pass":
            grouped.setdefault((r.verdict, first_reason(r)), []).append(r.label)
    return [Reason(verdict, text, labels) for (verdict, text), labels in grouped.items()]


def scenario_views(evidence: Evidence) -> list[ScenarioView]:
    branches = branch_names(evidence)
    views = []
    for name in scenario_names(evidence):
        per_branch = {b: results_for(evidence, name, b) for b in branches}
        labels = list(dict.fromkeys(r.label for b in branches for r in per_branch[b]))
        canonical = labels[0] if labels else ""
        info = evidence.scenarios.get(name)
        any_result = next((r for b in branches for r in per_branch[b]), None)
        chosen = {b: next((r for r in per_branch[b] if r.label == canonical), None) for b in branches}
        expected = next((r.expected for r in chosen.values() if r is not None and r.expected is not None), None)
        views.append(
            ScenarioView(
                name=name,
                tier=info.tier if info else (any_result.tier if any_result else ""),
                statement=info.statement if info and info.statement else (any_result.statement if any_result else ""),
                canonical=canonical,
                labels=labels,
                branches=branches,
                rows=_rows(_rows_of(info.tier if info else (any_result.tier if any_result else "")), [chosen[b] for b in branches], expected),
                verdicts=[verdict_cell(per_branch[b]) for b in branches],
                reasons={b: reasons_for(per_branch[b]) for b in branches},
            )
        )
    return views


def counter_cell(result: Result | None, key: str) -> Cell:
    """One branch's value of one counter, flagged if it is what made the result fail."""
    if result is None:
        return Cell(NOT_RUN, "error")
    if result.measured is None:
        # No totals: could not measure, or broken by a crash or a hang (`core.breakage`).
        verdict = "error" if result.verdict == "pass" else result.verdict
        return Cell(VERDICT_WORDS[verdict], verdict)
    text = _value(result.measured, key, measured=True)
    flagged = {d.counter for d in result.differences} | {v.counter for v in result.violations if v.counter}
    if key in flagged and result.verdict != "pass":
        return Cell(text, result.verdict)
    return Cell(text)


def _rows_of(tier: str) -> list[str]:
    """The tier's counter rows; evidence from a tier this difftest does not know gets the default rows."""
    return (tiers.REGISTRY.get(tier) or Tier()).report_rows()


def _rows(keys: list[str], chosen: list[Result | None], expected: Totals | None) -> list[Row]:
    return [
        Row(
            key=key,
            label=ROW_LABELS.get(key, key),
            cells=[counter_cell(r, key) for r in chosen],
            oracle="oracle" if key == "emitted_source" else (_value(expected, key, measured=False) if expected else "-"),
        )
        for key in keys
    ]


def _value(totals: Totals, key: str, measured: bool) -> str:
    if key == MAL:
        return format_value(measured_mal(totals) if measured else oracle_mal(totals))
    return format_value(getattr(totals, key))
