"""The view every report shares, computed once from an `Evidence`.

Every renderer shows the same thing - a verdict grid, a conclusion, and per
scenario a table of counters by branch next to the oracle - so the grouping
and the cell texts are computed here (`scenario_views`) and each renderer only
decides how they look. The counter rows of a scenario's table are its tier's
(`Tier.report_rows`).

A scenario runs in several batch orders and each request alone; its counter
table shows ONE run, the most severe one (`SEVERITY`: broken > error > diverge
> pass, compared across branches), and names it, so the run that makes a
branch broken is the one on screen.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC

from difftest import tiers
from difftest.core.evidence import BranchEvidence, Evidence, ScenarioEvidence
from difftest.core.records import COUNTER_TABLE, Counter, ProbeRun, Result, Totals, Verdict
from difftest.core.values import format_value
from difftest.core.verdicts import MAL, VERDICTS, first_reason, measured_mal, oracle_mal, worst
from difftest.tiers.base import EMITTED_SOURCE
from difftest.tiers.probe_tier import COUNTER_ROWS

#: How each verdict reads in a cell; `error` means the branch could not be measured.
VERDICT_WORDS: dict[str, str] = {
    "pass": "pass",
    "diverge": "diverge",
    "broken": "broken",
    "error": "could not measure",
}
#: The same, where a grid cell has little room.
SHORT_WORDS: dict[str, str] = {
    "pass": "pass",
    "diverge": "diverge",
    "broken": "broken",
    "error": "unmeasured",
}
#: Which run a counter table shows: the first label whose verdicts, most severe first, rank highest.
SEVERITY: tuple[Verdict, ...] = ("broken", "error", "diverge", "pass")


def row_labels(table: tuple[Counter, ...]) -> dict[str, str]:
    """Row labels of the counter table, in order: each counter's, then the two rows after them."""
    return {c.name: c.label for c in table} | {
        EMITTED_SOURCE: "  emitted from",
        MAL: "mean acceptance length",
    }


#: Row labels of the counter table, in order.
ROW_LABELS: dict[str, str] = row_labels(COUNTER_TABLE)
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
    #: The first run label (the listed batch order).
    canonical: str
    labels: list[str]
    branches: list[str]
    #: The counter rows, for run `shown`.
    rows: list[Row]
    #: Per branch, the verdict over all runs, e.g. `broken (4/9 runs)`.
    verdicts: list[Cell]
    reasons: dict[str, list[Reason]] = field(default_factory=dict)
    #: The run whose values `rows` show: the most severe one across branches.
    shown: str = ""
    #: Why that run is shown, e.g. `broken on pr-56195-style`; empty when every run passes.
    shown_why: str = ""
    #: Per branch, the verdict over all runs in few characters, e.g. `broken 4/9`.
    short: list[Cell] = field(default_factory=list)
    #: Why the scenario was not run on this base, if it was not.
    skipped: str | None = None
    #: The serving conditions it runs under, in words (empty: the plain case).
    conditions: list[str] = field(default_factory=list)
    #: Per branch (same order as `branches`), every result on this scenario.
    results: dict[str, list[Result]] = field(default_factory=dict)

    @property
    def passes(self) -> bool:
        """Every branch ran it and every run passed."""
        return all(rs and all(r.verdict == "pass" for r in rs) for rs in self.results.values())


def timestamp(evidence: Evidence) -> str:
    """When the evidence was made, in UTC, to the minute."""
    return evidence.created_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def reuse_note(evidence: Evidence) -> str | None:
    """Which probes' runs came from the result cache rather than this run, in a sentence
    (None: none did)."""
    reused = [p for p in evidence.probes if p.reused is not None]
    if not reused:
        return None
    named = ", ".join(
        f"{p.branch} ({p.tier}, measured {p.reused.measured_at})" for p in reused if p.reused
    )
    return (
        f"Runs of {len(reused)} of {len(evidence.probes)} probe(s) were reused from the result "
        "cache, measured by an earlier run with the same code, scenarios and settings: "
        f"{named}. Verdicts were judged now; "
        "`--no-cache` measures everything again."
    )


def launch_note(evidence: Evidence) -> str | None:
    """Why probes that were to be forked from a warm interpreter started fresh
    (None: none had to)."""
    fresh = [p for p in evidence.probes if p.launch == "fresh" and p.launch_note]
    if not fresh:
        return None
    reasons = sorted({p.launch_note for p in fresh})
    return (
        f"{len(fresh)} probe(s) started in fresh interpreters instead of forking from a warm one "
        f"(same results, slower): {'; '.join(reasons)}."
    )


def protection_doubted(evidence: Evidence) -> bool:
    """Whether the probes' protection is worth a warning: unconfined, or in a home that ran
    unconfined probes before."""
    guard = evidence.protection
    return guard is not None and (not guard.confined or bool(guard.home_unconfined_since))


def protection_note(evidence: Evidence) -> str | None:
    """How far the branches' code could reach while it ran, in a sentence (None: not recorded)."""
    guard = evidence.protection
    if guard is None:
        return None
    if guard.confined and guard.home_unconfined_since:
        return (
            "Probes ran confined, but this DIFFTEST_HOME ran probes UNCONFINED before (since "
            f"{guard.home_unconfined_since}): what they wrote outside the folders checked by "
            "content is not checked; start from a fresh DIFFTEST_HOME to trust these results."
        )
    if guard.confined:
        return "Probes ran confined: everything read-only to a branch's code but its own scratch."
    return (
        f"Probes ran UNCONFINED ({guard.why_not}): a branch's code could write whatever you can, "
        "so these results are only as trustworthy as the branches."
    )


def reference_note(evidence: Evidence) -> str | None:
    """When the baseline was not named: that it was measured all the same,
    and why its results are absent."""
    if not evidence.reference_branches:
        return None
    names = ", ".join(evidence.reference_branches)
    return (
        f"Judged against {names}, the baseline: measured beside the named branches so that their "
        "crashes and hangs read as they would beside it; its own results are not reported "
        "(name it to see them)."
    )


def shard_note(evidence: Evidence) -> str | None:
    """For a shard's partial evidence: which slice it holds (None for a whole run or a merge)."""
    if evidence.shard is None:
        return None
    return (
        f"Shard {evidence.shard.index} of {evidence.shard.count}: {len(evidence.scenarios)} of "
        f"{len(evidence.shard.order)} scenarios; `difftest merge` joins every shard's evidence "
        "into the whole run."
    )


def branch_names(evidence: Evidence) -> list[str]:
    """Branches in config order, then any that only appear in results; not those measured only as
    the reference the named ones were judged against (`Evidence.reference_branches`)."""
    names = dict.fromkeys([*evidence.branches, *(r.branch for r in evidence.results)])
    return [name for name in names if name not in evidence.reference_branches]


def branch_origin(info: BranchEvidence | None) -> str:
    """What a branch was built from, in one line: its ref and patches, its replayed commits,
    its stack."""
    if info is None:
        return ""
    if info.stack:
        return "stack: " + " + ".join(info.stack)
    parts = [info.ref]
    for moved in info.transplants:
        squashed = ", squashed: the range has merges" if moved.squashed else ""
        parts.append(
            f"{len(moved.replayed)} commit(s) of {moved.ref} ({moved.original_sha[:12]}) "
            "replayed from merge-base "
            f"{moved.merge_base[:12]}{squashed}"
        )
    parts += list(info.patches)
    return " + ".join(parts)


def scenario_names(evidence: Evidence) -> list[str]:
    """Scenarios tier by tier (registry order), each tier's as recorded
    (the evidence file sorts them by name)."""
    return _ordered(evidence.scenarios, evidence.results)


def _ordered(scenarios: dict[str, ScenarioEvidence], results: list[Result]) -> list[str]:
    names = list(dict.fromkeys([*scenarios, *(r.scenario for r in results)]))
    tier_of = {r.scenario: r.tier for r in results} | {n: s.tier for n, s in scenarios.items()}
    known = list(tiers.REGISTRY)

    def key(name: str) -> tuple[int, int]:
        tier = tier_of.get(name, "")
        return (known.index(tier) if tier in known else len(known), names.index(name))

    return sorted(names, key=key)


def severity(verdict: str) -> int:
    """0 for the most severe verdict (`SEVERITY` order)."""
    return SEVERITY.index(verdict) if verdict in SEVERITY else len(SEVERITY)


def most_severe(results: Iterable[Result]) -> Result | None:
    """The first of the most severe results (broken > error > diverge > pass)."""
    found = list(results)
    return min(found, key=lambda r: severity(r.verdict)) if found else None


def verdict_cell(results: list[Result]) -> Cell:
    """All runs of one branch on one scenario (batch orders and requests alone),
    summarised in one cell."""
    return _summary_cell(results, VERDICT_WORDS, "{word} ({count}/{n} runs)")


def short_cell(results: list[Result]) -> Cell:
    """`verdict_cell` in few characters for narrow grids: `pass`, `diverge 7/9`, `broken 4/9`."""
    return _summary_cell(results, SHORT_WORDS, "{word} {count}/{n}", all_pass="pass")


def _summary_cell(
    results: list[Result], words: dict[str, str], pattern: str, all_pass: str | None = None
) -> Cell:
    if not results:
        return Cell(NOT_RUN, "error")
    top = worst(r.verdict for r in results)
    if len(results) == 1:
        return Cell(words[top], None if top == "pass" else top)
    n = len(results)
    parts = []
    for verdict in VERDICTS:
        count = sum(r.verdict == verdict for r in results)
        if count and verdict != "pass":
            parts.append(pattern.format(word=words[verdict], count=count, n=n))
    if not parts:
        return Cell(all_pass or pattern.format(word=words["pass"], count=n, n=n))
    return Cell(", ".join(parts), top)


def reasons_for(results: Iterable[Result]) -> list[Reason]:
    """Distinct first reasons of the non-pass results, with the orders that share each."""
    grouped: dict[tuple[Verdict, str], list[str]] = {}
    for r in results:
        if r.verdict != "pass":
            grouped.setdefault((r.verdict, first_reason(r)), []).append(r.label)
    return [Reason(verdict, text, labels) for (verdict, text), labels in grouped.items()]


def shown_label(per_branch: dict[str, list[Result]], labels: list[str]) -> tuple[str, str]:
    """The run a counter table shows, and why: the label whose verdicts across branches, most severe
    first, rank highest (the first listed label on a tie, so an all-pass scenario shows its
    first run)."""
    if not labels:
        return "", ""
    verdicts: dict[str, list[tuple[int, str]]] = {label: [] for label in labels}
    for branch, results in per_branch.items():
        for r in results:
            verdicts.setdefault(r.label, []).append((severity(r.verdict), branch))
    ranked = {label: sorted(v) for label, v in verdicts.items()}
    best = min(labels, key=lambda label: [s for s, _ in ranked[label]] or [len(SEVERITY)])
    top = ranked[best]
    if not top or SEVERITY[top[0][0]] == "pass":
        return best, ""
    word = SEVERITY[top[0][0]]
    on = [b for s, b in top if s == top[0][0]]
    return best, f"{VERDICT_WORDS[word]} on {', '.join(on)}"


def scenario_views(evidence: Evidence) -> list[ScenarioView]:
    return views_from(evidence.results, branch_names(evidence), evidence.scenarios)


def views_from(
    results: list[Result],
    branches: list[str] | None = None,
    scenarios: dict[str, ScenarioEvidence] | None = None,
) -> list[ScenarioView]:
    """One view per scenario (evidence order, then any only the results name); usable on part of a
    comparison, such as one tier's results as soon as that tier is done."""
    scenarios = scenarios or {}
    branches = branches or list(dict.fromkeys(r.branch for r in results))
    names = _ordered(scenarios, results)
    views = []
    for name in names:
        per_branch = {
            b: [r for r in results if r.scenario == name and r.branch == b] for b in branches
        }
        labels = list(dict.fromkeys(r.label for b in branches for r in per_branch[b]))
        info = scenarios.get(name)
        any_result = next((r for b in branches for r in per_branch[b]), None)
        tier = info.tier if info else (any_result.tier if any_result else "")
        shown, why = shown_label(per_branch, labels)
        chosen = {b: next((r for r in per_branch[b] if r.label == shown), None) for b in branches}
        expected = next(
            (r.expected for r in chosen.values() if r is not None and r.expected is not None), None
        )
        views.append(
            ScenarioView(
                name=name,
                tier=tier,
                statement=info.statement
                if info and info.statement
                else (any_result.statement if any_result else ""),
                canonical=labels[0] if labels else "",
                labels=labels,
                branches=branches,
                rows=_rows(_rows_of(tier), [chosen[b] for b in branches], expected),
                verdicts=[verdict_cell(per_branch[b]) for b in branches],
                reasons={b: reasons_for(per_branch[b]) for b in branches},
                shown=shown,
                shown_why=why,
                short=[short_cell(per_branch[b]) for b in branches],
                skipped=info.skipped if info else None,
                conditions=list(info.conditions) if info else [],
                results=per_branch,
            )
        )
    return views


def run_index(evidence: Evidence) -> dict[tuple[str, str, str], ProbeRun]:
    """(branch, scenario, label) -> the run as the probe recorded it (role, order; no steps)."""
    return {(b, r.scenario, r.label): r for b, runs in (evidence.runs or {}).items() for r in runs}


def run_name(run: ProbeRun | None, label: str) -> str:
    """How a run reads in a sentence: `order plain1,grammar,plain2`, `plain1 alone`,
    else its label."""
    if run is None:
        return label
    if run.role == "batch":
        return "order " + ",".join(run.order)
    if run.role == "alone" and run.order:
        return f"{run.order[0]} alone"
    return label


def counter_cell(result: Result | None, key: str) -> Cell:
    """One branch's value of one counter, flagged if it is what made the result fail."""
    if result is None:
        return Cell(NOT_RUN, "error")
    if result.measured is None:
        # No totals: could not measure, or broken by a crash or a hang (`core.breakage`).
        verdict = "error" if result.verdict == "pass" else result.verdict
        return Cell(VERDICT_WORDS[verdict], verdict)
    text = _value(result.measured, key, measured=True)
    flagged = {d.counter for d in result.differences} | {
        v.counter for v in result.violations if v.counter
    }
    if key in flagged and result.verdict != "pass":
        return Cell(text, result.verdict)
    return Cell(text)


def counter_rows(tier: str, results: list[Result | None]) -> list[Row]:
    """The counter table of one run: the tier's rows, one cell per result, the oracle's value."""
    expected = next((r.expected for r in results if r is not None and r.expected is not None), None)
    return _rows(_rows_of(tier), results, expected)


def emitted_source(result: Result | None) -> str:
    """Where a branch's emitted count comes from, in words (`implied` or its counter's name)."""
    if result is None or result.measured is None:
        return "-"
    source = result.measured.emitted_source
    return source.split(":", 1)[1] if source.startswith("counter:") else source


def _rows_of(tier: str) -> list[str]:
    """The tier's counter rows; evidence from a tier this difftest does not know
    gets the default rows."""
    known = tiers.REGISTRY.get(tier)
    return known.report_rows() if known is not None else list(COUNTER_ROWS)


def _rows(keys: list[str], chosen: list[Result | None], expected: Totals | None) -> list[Row]:
    return [
        Row(
            key=key,
            label=ROW_LABELS.get(key, key),
            cells=[counter_cell(r, key) for r in chosen],
            oracle="oracle"
            if key == EMITTED_SOURCE
            else (_value(expected, key, measured=False) if expected else "-"),
        )
        for key in keys
    ]


def _value(totals: Totals, key: str, measured: bool) -> str:
    if key == MAL:
        return format_value(measured_mal(totals) if measured else oracle_mal(totals))
    return format_value(getattr(totals, key))
