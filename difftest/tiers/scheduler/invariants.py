"""The scheduler tier's invariants: the generic ones, plus "the script was played as written".

The model is scripted, so the tokens each request emits are known in advance
(`oracle.expected_outputs`): a run whose outputs differ was not played as the
scenario says (a branch that emits past a stop, drops tokens, or finishes a
request early), whatever its counters read.
"""

from __future__ import annotations

from difftest.core.records import ProbeRun, Violation
from difftest.probe.scheduler import script
from difftest.tiers.common import invariants as common
from difftest.tiers.common.schedule import shapes
from difftest.tiers.scheduler.oracle import expected_outputs
from difftest.tiers.scheduler.scenario import Scenario


def check(scenario: Scenario, runs: list[ProbeRun]) -> common.ByLabel:
    """Violations per run label (every measured run gets a key, possibly with an empty list)."""
    found = common.per_run_checks(runs)
    for run in common.measured(runs):
        found[run.label] += outputs_follow_script(scenario, run)
    budget = scenario.max_num_batched_tokens
    common.across_orders(
        found, *common.batches_and_alone(runs), shapes=lambda run: shapes(run, budget)
    )
    return found


def outputs_follow_script(scenario: Scenario, run: ProbeRun) -> list[Violation]:
    """Each request emitted exactly the tokens the script gives it."""
    out = []
    for rid, want in expected_outputs(scenario, run).items():
        got = run.outputs.get(rid, [])
        if got != want:
            out.append(
                Violation(
                    invariant="outputs-follow-script",
                    label=run.label,
                    detail=f"request {rid} emitted {script.text(got)!r}; "
                    f"the script gives {script.text(want)!r}",
                    counter="outputs",
                    measured=got,
                    expected=want,
                )
            )
    return out
