"""`difftest list`: each scenario's name, tier and statement, and the runs it plays (one block each,
so nothing is cut at any width)."""

from __future__ import annotations

from rich.console import Console
from rich.text import Text

from difftest.tiers.common.scenario import ScenarioBase


def render_listing(scenarios: list[tuple[str, ScenarioBase]], console: Console) -> None:
    for tier, scenario in scenarios:
        head = Text(scenario.name, style="bold")
        head.append(f"  [{tier}]", style="dim")
        console.print(head)
        console.print(Text("  " + scenario.statement))
        if scenario.conditions:
            console.print(Text("  under: " + ", ".join(scenario.conditions), style="dim"))
        runs = scenario.runs()
        labels = ", ".join(r["label"] for r in runs)
        console.print(Text(f"  {len(runs)} run(s): {labels}", style="dim"))
    console.print(Text(f"{len(scenarios)} scenario(s)", style="bold"))
