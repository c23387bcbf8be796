"""The gate's summary for a person and for `$GITHUB_STEP_SUMMARY`: is the head worse,
and exactly why."""

from __future__ import annotations

from difftest.core.gate import GateOutcome
from difftest.core.values import format_value
from difftest.reports.format import md_escape
from difftest.reports.gate_view import coverage_line, headline, nothing_found, sections

ICONS = {"worse": "❌", "unmeasured": "⛔", "not-verified": "⚠️", "not-worse": "✅"}


def render_gate_markdown(outcome: GateOutcome, base_name: str, head_name: str) -> str:
    """Say whether the head is worse and exactly why (scenario, order, counter, values)."""
    base, head = md_escape(base_name), md_escape(head_name)
    lines = [
        "## {} difftest gate: {}".format(*_title(outcome, base, head)),
        "",
        f"Oracle reading: **{md_escape(outcome.reading or 'unknown')}** · "
        f"{outcome.compared} (scenario, run) pair(s) measured on both sides",
        "",
    ]
    said = coverage_line(outcome)
    if said is not None:
        lines += [md_escape(said), ""]
    for heading, found in sections(outcome):
        if not found:
            continue
        lines += [
            f"### {heading}",
            "",
            f"| scenario | run | counter | {base} | {head} | oracle | why |",
            "|---|---|---|---:|---:|---:|---|",
        ]
        for f in found:
            lines.append(
                f"| {md_escape(f.scenario)} | {md_escape(f.label)} | "
                f"{md_escape(f.counter or '')} | "
                f"{md_escape(format_value(f.base)) if f.counter else ''} | "
                f"{md_escape(format_value(f.head)) if f.counter else ''} | "
                f"{md_escape(format_value(f.expected)) if f.counter else ''} | "
                f"{md_escape(f.text)} |"
            )
        lines.append("")
    if not outcome.findings:
        lines += [nothing_found(outcome), ""]
    return "\n".join(lines)


def _title(outcome: GateOutcome, base: str, head: str) -> tuple[str, str]:
    standing, text = headline(outcome, base, head)
    return ICONS[standing], text
