"""The one door to a verdict: validated records plus the process outcome, judged by one function.

Every path that gets runs — a fresh or forked probe, an entry of the result
cache, the shards `merge` joins, a warm fuzz probe — hands this module the
same two things per branch: the runs its records hold (each checked by
`run.probes.read_records`) and how its process ended (`core.outcome.ProcessOutcome`).
Nothing stores or trusts a verdict: they are computed here, every time, by
the tier's oracle and invariants (`judge_runs`) and then by the baseline rule
for crashes, hangs and unclean ends (`core.breakage.judge_against_baseline`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from difftest.core.breakage import Measured, judge_against_baseline
from difftest.core.gate import worse_beyond_totals
from difftest.core.records import Difference, ProbeRun, Reading, Result, Totals, Violation
from difftest.core.verdicts import judge, unmeasured
from difftest.tiers.common.scenario import ScenarioIdentity

if TYPE_CHECKING:  # `ProbeTier.measure` calls this module
    from difftest.tiers.probe_tier import ProbeTier

#: Run roles that get a verdict; `reference` runs only choose where later runs are cut.
JUDGED_ROLES = ("batch", "alone")


def judge_tier(
    tier: ProbeTier[Any],
    scenarios: Sequence[ScenarioIdentity],
    skipped: Mapping[str, str],
    branches: Mapping[str, str | None],
    measured: Mapping[str, Measured],
    reading: Reading,
    baseline: str,
) -> list[Result]:
    """Verdicts of one tier's scenarios on every branch (skipped scenarios get none).

    `branches` maps each branch to its setup error (None: it has an environment);
    `measured` holds the probes that ran (or were reused), by branch.
    """
    results: list[Result] = []
    for scenario in scenarios:
        if scenario.name in skipped:
            continue
        runs = {
            name: [r for r in m.runs if r.scenario == scenario.name] for name, m in measured.items()
        }
        across = tier.across_branches(scenario, runs, baseline)
        for branch, setup_error in branches.items():
            if branch not in measured:
                labels = [p["label"] for p in scenario.runs() if p["role"] in JUDGED_ROLES]
                why = setup_error or "no probe was run for this branch"
                results += unmeasured(
                    branch, scenario.name, tier.name, scenario.statement, labels, why, reading
                )
                continue
            results += judge_runs(
                tier, scenario, branch, runs[branch], reading, across.get(branch, {})
            )
    return judge_against_baseline(results, measured, baseline)


def judge_scenario(
    tier: ProbeTier[Any],
    scenario: ScenarioIdentity,
    measured: Mapping[str, Measured],
    reading: Reading,
    baseline: str,
) -> dict[str, list[Result]]:
    """One scenario's verdicts on every measured branch (what `fuzz` judges each example with)."""
    results = judge_tier(
        tier, [scenario], {}, {name: None for name in measured}, measured, reading, baseline
    )
    by_branch: dict[str, list[Result]] = {name: [] for name in measured}
    for result in results:
        by_branch[result.branch].append(result)
    return by_branch


def judge_runs(
    tier: ProbeTier[Any],
    scenario: ScenarioIdentity,
    branch: str,
    runs: list[ProbeRun],
    reading: Reading,
    across: dict[str, list[Violation]] | None = None,
    expected: dict[str, Totals] | None = None,
    baseline_violations: dict[str, list[Violation]] | None = None,
    baseline_differences: dict[str, list[Difference]] | None = None,
) -> list[Result]:
    """The verdicts of one branch's runs of one scenario by the oracle and invariants alone.

    `expected` replaces the oracle's totals (per run label) when a branch is
    compared with another branch instead; violations that `baseline_violations`
    holds too (same run, invariant and counter) are then not this branch's doing;
    likewise the differences beyond the totals (`ProbeTier.response_differences`,
    always against the oracle) that `baseline_differences` holds with the same
    values.
    """
    judged = [r for r in runs if r.role in JUDGED_ROLES]
    if expected is None:
        expected = {r.label: tier.expected(scenario, r, reading) for r in judged if r.measured}
    beyond = {
        r.label: tier.response_differences(scenario, r, reading) for r in judged if r.measured
    }
    if baseline_differences is not None:
        beyond = {
            label: worse_beyond_totals(found, baseline_differences.get(label, []))
            for label, found in beyond.items()
        }
    violations = tier.invariants(scenario, judged)
    for label, extra in (across or {}).items():
        violations.setdefault(label, []).extend(extra)
    if baseline_violations is not None:
        violations = {
            label: _not_in(found, baseline_violations.get(label, []))
            for label, found in violations.items()
        }
    return judge(
        branch,
        scenario.name,
        tier.name,
        scenario.statement,
        judged,
        expected,
        violations,
        reading,
        beyond,
    )


def _not_in(found: list[Violation], baseline: list[Violation]) -> list[Violation]:
    shared = {(v.invariant, v.counter) for v in baseline}
    return [v for v in found if (v.invariant, v.counter) not in shared]
