"""The Markdown report: a PR comment and a GitHub step summary.

Order is what a reviewer needs: counts per branch, then the verdict grid
(scenarios x branches), then the detail of every non-pass. Everything that
comes from a branch, a probe or a scenario file goes through `md_escape`
(table cells) or `fenced` (multi-line error text), so a branch cannot break
the table or inject HTML. The text is kept under GitHub's comment limit; what
does not fit is named, not silently dropped.
"""

from __future__ import annotations

from difftest.core.evidence import Evidence
from difftest.core.records import Result
from difftest.core.values import format_value
from difftest.core.verdicts import SUMMARY_ORDER, summarize, worst
from difftest.reports.format import fenced, md_escape
from difftest.reports.views import (
    VERDICT_WORDS,
    branch_names,
    branch_origin,
    results_for,
    scenario_views,
    timestamp,
)

ICONS: dict[str, str] = {"pass": "✅", "diverge": "⚠️", "broken": "❌", "error": "⛔"}
#: GitHub rejects comments over 65536 characters; leave room for a wrapper.
MAX_CHARS = 60_000


def render_markdown(evidence: Evidence) -> str:
    head = [*_header(evidence), *_summary(evidence), *_grid(evidence), *_branches(evidence)]
    details = _details(evidence)
    text = "\n".join(head)
    for i, block in enumerate(details):
        if len(text) + len(block) + 200 > MAX_CHARS:
            text += (
                f"\n\n_{len(details) - i} more non-pass result(s) left out to fit a comment; "
                "see report.html or evidence.json._"
            )
            break
        text += "\n" + block
    return text + "\n"


def _header(evidence: Evidence) -> list[str]:
    code = worst(r.verdict for r in evidence.results) if evidence.results else "error"
    return [
        f"## {ICONS[code]} difftest: speculative-decoding stats",
        "",
        f"Oracle reading: **{md_escape(evidence.reading)}** · base {md_escape(evidence.base.requirement)} · "
        f"difftest {md_escape(evidence.difftest_version)} · {timestamp(evidence)}",
        "",
    ]


def _summary(evidence: Evidence) -> list[str]:
    order = SUMMARY_ORDER
    lines = [
        "### Summary",
        "",
        "| branch | " + " | ".join(f"{ICONS[v]} {VERDICT_WORDS[v]}" for v in order) + " |",
        "|---|" + "---:|" * len(order),
    ]
    summary = summarize(evidence.results)
    for branch in branch_names(evidence):
        counts = summary.get(branch)
        cells = [str(counts[v]) if counts else "0" for v in order]
        lines.append(f"| {md_escape(branch)} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def _branches(evidence: Evidence) -> list[str]:
    """What each branch was built from (only when some branch is more than a plain ref)."""
    infos = evidence.branches
    if not any(i.transplants or i.stack or i.patches for i in infos.values()):
        return []
    lines = ["### Branches", "", "| branch | commit | built from |", "|---|---|---|"]
    for name, info in infos.items():
        lines.append(f"| {md_escape(name)} | {md_escape((info.sha or '')[:12])} | {md_escape(branch_origin(info))} |")
    return [*lines, ""]


def _grid(evidence: Evidence) -> list[str]:
    branches = branch_names(evidence)
    lines = [
        "### Verdicts",
        "",
        "| scenario | tier | " + " | ".join(md_escape(b) for b in branches) + " |",
        "|---|---|" + "---|" * len(branches),
    ]
    for view in scenario_views(evidence):
        cells = [f"{ICONS[c.verdict or 'pass']} {md_escape(c.text)}" for c in view.verdicts]
        lines.append(f"| {md_escape(view.name)} | {md_escape(view.tier)} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def _details(evidence: Evidence) -> list[str]:
    """One block per non-pass (branch, scenario, run)."""
    blocks = []
    for view in scenario_views(evidence):
        for branch in view.branches:
            for result in results_for(evidence, view.name, branch):
                if result.verdict != "pass":
                    blocks.append(_detail(result, header=not blocks))
    return blocks


def _detail(result: Result, header: bool) -> str:
    lines = ["### Details", ""] if header else []
    lines += [
        f"#### {ICONS[result.verdict]} {md_escape(result.scenario)} · {md_escape(result.branch)} · "
        f"run {md_escape(result.label)}: {VERDICT_WORDS[result.verdict]}",
        "",
    ]
    if result.statement:
        lines += [f"> {md_escape(result.statement)}", ""]
    if result.verdict == "error":
        lines += [fenced(result.error or "no detail"), ""]
        return "\n".join(lines)
    if result.violations:
        lines += ["| invariant | counter | measured | expected | detail |", "|---|---|---|---|---|"]
        for v in result.violations:
            lines.append(
                f"| {md_escape(v.invariant)} | {md_escape(v.counter or '')} | {md_escape(format_value(v.measured))} | "
                f"{md_escape(format_value(v.expected))} | {md_escape(v.detail)} |"
            )
        lines.append("")
    if result.differences:
        lines += ["| counter | measured | oracle | why |", "|---|---:|---:|---|"]
        for d in result.differences:
            lines.append(
                f"| {md_escape(d.counter)} | {md_escape(format_value(d.measured))} | "
                f"{md_escape(format_value(d.expected))} | {md_escape(d.explanation)} |"
            )
        lines.append("")
    return "\n".join(lines)
