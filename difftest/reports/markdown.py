"""The Markdown report: a PR comment and a GitHub step summary.

Order is what a reviewer needs: counts per branch, then the verdict grid
(scenarios x branches), then the detail of every non-pass. Everything that
comes from a branch, a probe or a scenario file goes through `md_escape`
(table cells) or `fenced` (multi-line error text), so a branch cannot break
the table or inject HTML. The text is kept under GitHub's comment limit; what
does not fit is named, not silently dropped.
"""

from __future__ import annotations

import re

from difftest.evidence import Evidence
from difftest.reports import VERDICT_WORDS, branch_names, results_for, scenario_views, timestamp
from difftest.results import Result
from difftest.verdicts import SUMMARY_ORDER, format_value, summarize, worst

ICONS: dict[str, str] = {"pass": "✅", "diverge": "⚠️", "broken": "❌", "error": "⛔"}
#: GitHub rejects comments over 65536 characters; leave room for a wrapper.
MAX_CHARS = 60_000
_MD_SPECIAL = re.compile(r"([\\`*_\[\]|~])")
_NEWLINES = re.compile(r"\r\n|\r|\n")
#: Control characters other than tab and line breaks (ANSI colour codes in tracebacks, NUL, ...).
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def md_escape(text: object) -> str:
    """Make any string safe inside a Markdown table cell: one line, no markup, no HTML."""
    s = _MD_SPECIAL.sub(r"\\\1", _printable(str(text)))
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _NEWLINES.sub("<br>", s)


def fenced(text: str) -> str:
    """A code block whose fence is longer than any backtick run inside, so it cannot be closed early."""
    text = _printable(text)
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{text.rstrip()}\n{fence}"


def _printable(text: str) -> str:
    return _CONTROL.sub("\ufffd", text)


def render_markdown(evidence: Evidence) -> str:
    head = [*_header(evidence), *_summary(evidence), *_grid(evidence)]
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
    """One block per non-pass (branch, scenario, order)."""
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
        f"order {md_escape(result.order)}: {VERDICT_WORDS[result.verdict]}",
        "",
    ]
    if result.explanation:
        lines += [f"> {md_escape(result.explanation)}", ""]
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
