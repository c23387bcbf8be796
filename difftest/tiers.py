"""What differs between tiers: where expected totals and invariants come from.

The scheduler tier's oracle works from the scenario alone (the model is
scripted); the engine tier's works from each run's outputs (the model is real),
and adds a check across branches: every branch must generate the same tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from difftest.results import ProbeRun, Reading, Totals, Violation

ByLabel = dict[str, list[Violation]]


@dataclass(frozen=True)
class TierRules:
    expected: Callable[[Any, ProbeRun, Reading], Totals]
    invariants: Callable[[Any, list[ProbeRun]], ByLabel]
    #: (scenario, runs per branch, baseline branch) -> violations per branch and label.
    across_branches: Callable[[Any, dict[str, list[ProbeRun]], str], dict[str, ByLabel]] | None = None


def rules_for(tier: str) -> TierRules:
    if tier == "engine":
        from difftest.engine.invariants import check_engine_invariants, cross_branch_violations
        from difftest.engine.oracle import expected_engine_totals

        return TierRules(expected_engine_totals, check_engine_invariants, cross_branch_violations)
    from difftest.invariants import check_invariants
    from difftest.oracle import expected_totals

    return TierRules(lambda scenario, run, reading: expected_totals(scenario, run.order, reading), check_invariants)
