"""The Markdown report: a PR comment and a GitHub step summary.

Order is what a reviewer needs: how to reproduce it, the conclusion (which
branch is right, and why), each branch's commit and verdict counts, the
verdict grid (scenarios x branches), then the details of what does not pass,
most severe first (broken, could not measure, diverge). A difference seen on
several runs or branches is written once, at its first (most severe)
occurrence, with the others counted and named; counter tables (the most
severe run of each failing scenario) come last, collapsed.

Everything that comes from a branch, a probe or a scenario file goes through
`md_escape` (table cells) or `fenced` (multi-line error text), so a branch
cannot break the table or inject HTML. The text stays under GitHub's comment
limit: what does not fit is dropped from the least severe end and counted,
never silently.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from difftest.core.evidence import Evidence
from difftest.core.records import ProbeRun, Result, Violation
from difftest.core.values import format_value
from difftest.core.verdicts import SUMMARY_ORDER, summarize, worst
from difftest.reports.conclusion import Conclusion, RunKey, conclude
from difftest.reports.format import fenced, md_code, md_escape
from difftest.reports.tests_matrix import markdown_lines
from difftest.reports.views import (
    VERDICT_WORDS,
    ScenarioView,
    branch_names,
    branch_origin,
    launch_note,
    protection_note,
    reference_note,
    reuse_note,
    scenario_names,
    scenario_views,
    severity,
    shard_note,
    timestamp,
)
from difftest.tiers.common.accounting import READINGS
from difftest.tiers.common.scenario import ScenarioBase

ICONS: dict[str, str] = {
    "pass": "✅",
    "diverge": "⚠️",
    "broken": "❌",
    "error": "⛔",
    "unverified": "❔",
}
#: GitHub rejects comments over 65536 characters; leave room for a wrapper.
MAX_CHARS = 60_000
#: Room kept for the closing notes when deciding whether one more block fits.
RESERVE = 400
#: How many run labels of one branch a "same on" line names.
NAMED_RUNS = 4


def render_markdown(
    evidence: Evidence,
    scenarios: Mapping[str, ScenarioBase] | None = None,
    recorded: Mapping[RunKey, ProbeRun] | None = None,
) -> str:
    """The report; `scenarios` and `recorded` (runs with steps) let the conclusion name the oracle's
    reading as a row count's reason (`conclusion.conclude`)."""
    views = scenario_views(evidence)
    blocks = _details(evidence)
    # Every broken run must be in the comment: where the rest would crowd one out, the
    # conclusion keeps each branch's headline and leaves its further differences to report.html.
    mandatory = sum(len(b.render()) + 1 for b in blocks if b.first.verdict == "broken")
    conclusion = conclude(evidence, scenarios, recorded)
    header = _header(evidence)
    rest = [*_branches(evidence), *_grid(views), *markdown_lines(evidence)]
    text = ""
    for also in (True, False):
        text = "\n".join([*header, *_conclusion(conclusion, also=also), *rest])
        if len(text) + mandatory + RESERVE <= MAX_CHARS:
            break
    left_out: list[_Block] = []
    for i, block in enumerate(blocks):
        rendered = ("### Details\n\n" if i == 0 else "") + block.render()
        if len(text) + len(rendered) + RESERVE > MAX_CHARS:
            left_out = blocks[i:]
            break
        text += "\n" + rendered
    if left_out:
        runs = sum(1 + len(b.others) for b in left_out)
        kinds = ", ".join(f"{n} {VERDICT_WORDS[v]}" for v, n in _count(left_out).items())
        text += (
            f"\n_{len(left_out)} more distinct finding(s) ({runs} run(s): {kinds}) "
            "left out to fit a comment; "
            "see report.html or evidence.json._\n"
        )
    else:
        counters = _counter_tables(views)
        if counters and len(text) + len(counters) + RESERVE <= MAX_CHARS:
            text += "\n" + counters
    return text.rstrip("\n") + "\n"


def _count(blocks: list[_Block]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for block in blocks:
        counts[block.first.verdict] = counts.get(block.first.verdict, 0) + 1 + len(block.others)
    return counts


def _header(evidence: Evidence) -> list[str]:
    code = worst(r.verdict for r in evidence.results) if evidence.results else "error"
    return [
        f"## {ICONS[code]} difftest: speculative-decoding stats",
        "",
        (
            f"Oracle reading: **{md_escape(evidence.reading)}** "
            f"({md_escape(READINGS.get(evidence.reading, ''))}) · "
            f"base {md_escape(evidence.base.requirement)} · "
            f"difftest {md_escape(evidence.difftest_version)} · "
            f"{timestamp(evidence)}"
        ),
        "",
        (
            "Reproduce: `difftest verify evidence.json` (with the branches.yaml that produced it; "
            "it rebuilds the same commits and re-runs every scenario)."
        ),
        "",
        *([md_escape(note), ""] if (note := protection_note(evidence)) else []),
        *([md_escape(note), ""] if (note := reuse_note(evidence)) else []),
        *([md_escape(note), ""] if (note := launch_note(evidence)) else []),
        *([md_escape(shard), ""] if (shard := shard_note(evidence)) else []),
        *([md_escape(ref), ""] if (ref := reference_note(evidence)) else []),
    ]


def _conclusion(conclusion: Conclusion, also: bool = True) -> list[str]:
    """Each branch's standing; with `also`, its further differences too (else counted)."""
    lines = ["### Conclusion", ""]
    for standing in conclusion.standings:
        lines.append(
            f"- {ICONS[standing.mark]} **{md_escape(standing.branch)}** "
            f"{md_escape(standing.headline)}"
        )
        if standing.coverage:
            lines.append(f"  - changed code: {md_escape(standing.coverage)}")
        if also:
            lines += [f"  - {md_escape(line)}" for line in standing.also]
        elif standing.also:
            lines.append(f"  - {len(standing.also)} more difference(s): see report.html")
    lines += [f"- = **{md_escape(s.who)}**: {md_escape(s.text)}" for s in conclusion.shared]
    lines += ["", f"**→ {md_escape(conclusion.verdict)}**", ""]
    if conclusion.blame:
        lines += [
            "Which hunks make it: " + ", ".join(md_code(command) for command in conclusion.blame),
            "",
        ]
    return lines


def _branches(evidence: Evidence) -> list[str]:
    order = SUMMARY_ORDER
    lines = [
        "### Branches",
        "",
        "| branch | built from | commit | "
        + " | ".join(f"{ICONS[v]} {VERDICT_WORDS[v]}" for v in order)
        + " |",
        "|---|---|---|" + "---:|" * len(order),
    ]
    summary = summarize(evidence.results)
    for branch in branch_names(evidence):
        counts = summary.get(branch)
        info = evidence.branches.get(branch)
        ref = md_escape(branch_origin(info))
        sha = f"`{md_escape(info.sha[:12])}`" if info and info.sha else ""
        cells = [str(counts[v]) if counts else "0" for v in order]
        lines.append(f"| {md_escape(branch)} | {ref} | {sha} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def _grid(views: list[ScenarioView]) -> list[str]:
    measured = [v for v in views if not v.skipped]
    branches = measured[0].branches if measured else []
    lines = [
        "### Verdicts",
        "",
        "| scenario | tier | " + " | ".join(md_escape(b) for b in branches) + " |",
        "|---|---|" + "---|" * len(branches),
    ]
    passing = [v for v in measured if all((c.verdict or "pass") == "pass" for c in v.verdicts)]
    for view in measured:
        if view in passing:
            continue
        cells = [f"{ICONS[c.verdict or 'pass']} {md_escape(c.text)}" for c in view.verdicts]
        lines.append(
            f"| {md_escape(view.name)} | {md_escape(view.tier)} | " + " | ".join(cells) + " |"
        )
    lines.append("")
    if passing:
        names = ", ".join(md_escape(v.name) for v in passing)
        lines += [f"{ICONS['pass']} Every branch passes {len(passing)} scenario(s): {names}.", ""]
    for view in views:
        if view.skipped:
            lines.append(
                f"- not run on this base: {md_escape(view.name)} ({md_escape(view.skipped)})"
            )
    if any(v.skipped for v in views):
        lines.append("")
    return lines


@dataclass
class _Block:
    """One distinct finding: its first (most severe) occurrence,
    and the other runs that show the same."""

    first: Result
    others: list[Result] = field(default_factory=list)
    #: The serving conditions of its scenario, in words (empty: the plain case).
    conditions: list[str] = field(default_factory=list)

    def render(self) -> str:
        r = self.first
        lines = [
            (
                f"#### {ICONS[r.verdict]} {md_escape(r.scenario)} · {md_escape(r.branch)} · "
                f"run {md_escape(r.label)}: {VERDICT_WORDS[r.verdict]}"
            ),
            "",
        ]
        if r.statement:
            lines += [f"> {md_escape(r.statement)}", ""]
        if self.conditions:
            lines += [f"Under: {md_escape(', '.join(self.conditions))}.", ""]
        if self.others:
            lines += [f"The same on {len(self.others)} more run(s): {_named(self.others)}.", ""]
        if r.verdict == "error":
            lines += [fenced(r.error or "no detail"), ""]
            return "\n".join(lines)
        if r.violations:
            lines += [
                "| invariant | counter | measured | expected | detail |",
                "|---|---|---|---|---|",
            ]
            for group in _grouped(r.violations):
                first = group[0]
                more = f" (and {len(group) - 1} more counter(s) alike)" if len(group) > 1 else ""
                lines.append(
                    f"| {md_escape(first.invariant)} | "
                    f"{md_escape(', '.join(v.counter or '' for v in group))} | "
                    f"{md_escape('; '.join(format_value(v.measured) for v in group))} | "
                    f"{md_escape('; '.join(format_value(v.expected) for v in group))} | "
                    f"{md_escape(first.detail)}{more} |"
                )
            lines.append("")
        if r.differences:
            lines += ["| counter | measured | oracle | why |", "|---|---:|---:|---|"]
            for d in r.differences:
                lines.append(
                    f"| {md_escape(d.counter)} | {md_escape(format_value(d.measured))} | "
                    f"{md_escape(format_value(d.expected))} | {md_escape(d.explanation)} |"
                )
            lines.append("")
        return "\n".join(lines)


def _grouped(violations: list[Violation]) -> list[list[Violation]]:
    """Consecutive violations of one invariant on different counters (one order that changes six
    counters) as one row; a violation repeated on the same counter (a step lost, then another)
    starts a row of its own, since its detail is what differs."""
    groups: list[list[Violation]] = []
    for v in violations:
        last = groups[-1] if groups else []
        if (
            v.counter
            and last
            and last[0].invariant == v.invariant
            and v.counter not in {g.counter for g in last}
        ):
            last.append(v)
        else:
            groups.append([v])
    return groups


def _named(results: list[Result]) -> str:
    """`main: order:a,b, alone:a; pr-x: 7 runs` (a branch's labels named up to `NAMED_RUNS`)."""
    per_branch: dict[str, list[str]] = {}
    for r in results:
        per_branch.setdefault(r.branch, []).append(r.label)
    parts = []
    for branch, labels in per_branch.items():
        named = ", ".join(md_escape(label) for label in labels[:NAMED_RUNS])
        more = f" and {len(labels) - NAMED_RUNS} more" if len(labels) > NAMED_RUNS else ""
        parts.append(f"{md_escape(branch)} ({named}{more})")
    return "; ".join(parts)


def _signature(result: Result) -> tuple:
    """What makes two findings the same: verdict, counters, values and violation details,
    not the branch."""
    return (
        result.scenario,
        result.verdict,
        result.error if result.verdict == "error" else None,
        tuple((d.counter, repr(d.measured), repr(d.expected)) for d in result.differences),
        tuple(
            (v.invariant, v.counter, repr(v.measured), repr(v.expected), v.detail)
            for v in result.violations
        ),
    )


def _details(evidence: Evidence) -> list[_Block]:
    """Every non-pass result, most severe first (then scenario and branch order),
    distinct findings once."""
    scenarios = scenario_names(evidence)
    branches = branch_names(evidence)
    failing = [r for r in evidence.results if r.verdict != "pass"]
    failing.sort(
        key=lambda r: (
            severity(r.verdict),
            scenarios.index(r.scenario) if r.scenario in scenarios else len(scenarios),
            branches.index(r.branch) if r.branch in branches else len(branches),
        )
    )
    blocks: dict[tuple, _Block] = {}
    for result in failing:
        key = _signature(result)
        if key in blocks:
            blocks[key].others.append(result)
        else:
            info = evidence.scenarios.get(result.scenario)
            blocks[key] = _Block(result, conditions=list(info.conditions) if info else [])
    return list(blocks.values())


def _counter_tables(views: list[ScenarioView]) -> str:
    failing = [v for v in views if not v.skipped and not v.passes]
    if not failing:
        return ""
    lines = [
        (
            "<details><summary>Counter tables: the most severe run of each scenario "
            "that does not pass</summary>"
        ),
        "",
    ]
    for view in failing:
        why = f" ({md_escape(view.shown_why)})" if view.shown_why else ""
        lines += [
            f"#### {md_escape(view.name)}: run {md_escape(view.shown)}{why}",
            "",
            "| counter | " + " | ".join(md_escape(b) for b in view.branches) + " | oracle |",
            "|---|" + "---:|" * (len(view.branches) + 1),
        ]
        for row in view.rows:
            cells = [
                (
                    f"**{md_escape(c.text)}** {ICONS[c.verdict]}"
                    if c.verdict in ("broken", "diverge")
                    else md_escape(c.text)
                )
                for c in row.cells
            ]
            lines.append(
                f"| {md_escape(row.label.strip())} | "
                + " | ".join(cells)
                + f" | {md_escape(row.oracle)} |"
            )
        lines.append("")
    lines += ["</details>", ""]
    return "\n".join(lines)
