"""The gate's summary for a person and for `$GITHUB_STEP_SUMMARY`: is the head worse, and exactly why."""

from __future__ import annotations

from difftest.core.gate import WORSE_KINDS, GateOutcome
from difftest.core.values import format_value
from difftest.reports.format import md_escape


def render_gate_markdown(outcome: GateOutcome, base_name: str, head_name: str) -> str:
    """Say whether the head is worse and exactly why (scenario, order, counter, values)."""
    base, head = md_escape(base_name), md_escape(head_name)
    lines = [
        _title(outcome, base, head),
        "",
        f"Oracle reading: **{md_escape(outcome.reading or 'unknown')}** · "
        f"{outcome.compared} (scenario, run) pair(s) measured on both sides",
        "",
    ]
    sections = [
        ("Why it is worse", [f for f in outcome.findings if f.kind in WORSE_KINDS]),
        ("Could not measure the base", outcome.base_unmeasured),
        ("Could not measure", outcome.unmeasured),
        ("Still differs from the oracle, as on the base", outcome.unchanged),
        ("Better than the base", outcome.improved),
    ]
    for heading, found in sections:
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
                f"| {md_escape(f.scenario)} | {md_escape(f.label)} | {md_escape(f.counter or '')} | "
                f"{md_escape(format_value(f.base)) if f.counter else ''} | "
                f"{md_escape(format_value(f.head)) if f.counter else ''} | "
                f"{md_escape(format_value(f.expected)) if f.counter else ''} | {md_escape(f.text)} |"
            )
        lines.append("")
    if not outcome.findings:
        lines += [_nothing_found(outcome), ""]
    return "\n".join(lines)


def _title(outcome: GateOutcome, base: str, head: str) -> str:
    """Worse wins; then what could not be measured; "not worse" only when something was compared."""
    if outcome.worse:
        return f"## ❌ difftest gate: {head} is worse than {base}"
    if outcome.base_unmeasured:
        return f"## ⛔ difftest gate: could not measure the base ({base})"
    if outcome.unmeasured:
        return f"## ⛔ difftest gate: could not measure everything on {head}"
    if outcome.compared == 0:
        return f"## ⛔ difftest gate: nothing was compared between {base} and {head}"
    return f"## ✅ difftest gate: {head} is not worse than {base}"


def _nothing_found(outcome: GateOutcome) -> str:
    if outcome.compared == 0:
        return "No (scenario, run) was measured on both sides, so nothing can be said about the head."
    return "Every (scenario, run) matches the oracle on the head as on the base."


