"""The gate's outcome for a person at a terminal: the same sections as the Markdown
summary, as lines.

One line per finding (scenario, run, counter, base -> head, oracle, why), so
nothing is cut at any width; every string from a branch goes in as `Text`.
"""

from __future__ import annotations

from rich.console import Console
from rich.text import Text

from difftest.core.gate import GateOutcome
from difftest.core.values import format_value
from difftest.reports.gate_view import coverage_line, headline, nothing_found, sections

TITLES = {
    "worse": ("✗", "bold red"),
    "unmeasured": ("?", "bold magenta"),
    "not-verified": ("~", "bold yellow"),
    "not-worse": ("✓", "bold green"),
}


def render_gate_terminal(
    outcome: GateOutcome, base_name: str, head_name: str, console: Console
) -> None:
    standing, text = headline(outcome, base_name, head_name)
    mark, style = TITLES[standing]
    console.print(Text(f"{mark} difftest gate: {text}", style=style))
    console.print(
        Text(
            f"oracle reading {outcome.reading or 'unknown'} · {outcome.compared} (scenario, run) "
            "pair(s) measured on both sides",
            style="dim",
        )
    )
    said = coverage_line(outcome)
    if said is not None:
        console.print(Text(said, style="yellow" if outcome.not_verified else "dim"))
    for heading, found in sections(outcome):
        if not found:
            continue
        console.print()
        console.print(Text(f"{heading} ({len(found)})", style="bold"))
        for f in found:
            line = Text("  ")
            line.append(f.scenario, style="bold")
            line.append(f" [{f.label}]")
            if f.counter:
                line.append(
                    f" {f.counter}: {base_name} {format_value(f.base)} -> "
                    f"{head_name} {format_value(f.head)}, "
                    f"oracle {format_value(f.expected)}"
                )
            line.append(f" - {f.text}", style="dim")
            console.print(line)
    if not outcome.findings:
        console.print(nothing_found(outcome))
