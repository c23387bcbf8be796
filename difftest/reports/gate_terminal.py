"""The gate's outcome for a person at a terminal: the same sections as the Markdown summary, as lines.

One line per finding (scenario, run, counter, base -> head, oracle, why), so
nothing is cut at any width; every string from a branch goes in as `Text`.
"""

from __future__ import annotations

from rich.console import Console
from rich.text import Text

from difftest.core.gate import WORSE_KINDS, GateFinding, GateOutcome
from difftest.core.values import format_value


def sections(outcome: GateOutcome) -> list[tuple[str, list[GateFinding]]]:
    """(heading, findings) in the order a reader needs them; empty sections included."""
    return [
        ("Why it is worse", [f for f in outcome.findings if f.kind in WORSE_KINDS]),
        ("Could not measure", outcome.unmeasured),
        ("Still differs from the oracle, as on the base", outcome.unchanged),
        ("Better than the base", outcome.improved),
    ]


def render_gate_terminal(outcome: GateOutcome, base_name: str, head_name: str, console: Console) -> None:
    if outcome.worse:
        title = Text(f"✗ difftest gate: {head_name} is worse than {base_name}", style="bold red")
    elif outcome.unmeasured:
        title = Text(f"? difftest gate: could not measure everything on {head_name}", style="bold magenta")
    else:
        title = Text(f"✓ difftest gate: {head_name} is not worse than {base_name}", style="bold green")
    console.print(title)
    console.print(
        Text(f"oracle reading {outcome.reading or 'unknown'} · {outcome.compared} (scenario, run) pair(s) "
             "measured on both sides", style="dim")
    )
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
                    f" {f.counter}: {base_name} {format_value(f.base)} -> {head_name} {format_value(f.head)}, "
                    f"oracle {format_value(f.expected)}"
                )
            line.append(f" - {f.text}", style="dim")
            console.print(line)
    if not outcome.findings:
        console.print("Every (scenario, run) matches the oracle on the head as on the base.")
