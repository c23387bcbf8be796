"""`difftest show`: which recorded runs of a scenario to show, and each one step by step.

For each branch shown (the one asked for; else every branch that does not pass
the scenario, else the first) it picks the run asked for (a label, or a batch
order) or the branch's most severe one, and prints its trace beside the
oracle's rows, or says why there are no steps to show. The step records and
the scenario come through `Recorded`, which the command line binds to the
readers that check them against the evidence's hashes (`run.reread`,
`run.rejudge`): this module reads no file itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from rich.console import Console

from difftest import tiers
from difftest.core.errors import ConfigError
from difftest.core.evidence import Evidence, ProbeFiles
from difftest.core.records import ProbeRun, Result
from difftest.reports.trace import build_trace
from difftest.reports.trace_terminal import render_trace
from difftest.reports.views import branch_names, most_severe, run_index
from difftest.tiers.base import Tier
from difftest.tiers.common.scenario import ScenarioBase


class Recorded(Protocol):
    """What a shown evidence recorded beside itself, each piece checked as its reader checks it."""

    def scenario(self, name: str) -> ScenarioBase:
        """The scenario, from the very file the evidence was made from."""
        ...

    def runs(self, branch: str, tier: str) -> list[ProbeRun]:
        """Every run of one branch's probe in one tier, with its steps."""
        ...

    def probe(self, branch: str, tier: str, scenario: str) -> ProbeFiles | None:
        """The probe whose job played `scenario` for `branch`."""
        ...


@dataclass(frozen=True)
class ShowRequest:
    """What `difftest show` was asked: a scenario, and optionally a branch, a run and every step."""

    scenario: str
    branch: str | None = None
    order: str | None = None
    all_steps: bool = False


def show_scenario(
    evidence: Evidence,
    evidence_file: Path,
    wanted: ShowRequest,
    recorded: Recorded,
    console: Console,
) -> None:
    """Print the chosen run of each chosen branch step by step; ConfigError when the scenario,
    branch or run asked for is not in the evidence (`evidence_file`, named in the message)."""
    info = evidence.scenarios.get(wanted.scenario)
    if info is None:
        raise ConfigError(
            f"scenario {wanted.scenario!r} is not in {evidence_file}",
            f"name one of: {', '.join(evidence.scenarios) or '(none)'}",
        )
    if info.skipped:
        console.print(
            f"{wanted.scenario}: not run on this base ({info.skipped})", markup=False, emoji=False
        )
        return
    tier = tiers.get(info.tier)
    scenario = recorded.scenario(wanted.scenario)
    index = run_index(evidence)
    for number, branch in enumerate(shown_branches(evidence, wanted.scenario, wanted.branch)):
        results = [
            r for r in evidence.results if r.scenario == wanted.scenario and r.branch == branch
        ]
        label = chosen_label(results, wanted.order, index, branch)
        if number:
            console.print()
        _show_run(console, evidence, tier, scenario, recorded, branch, results, label, wanted)


def _show_run(
    console: Console,
    evidence: Evidence,
    tier: Tier[Any],
    scenario: ScenarioBase,
    recorded: Recorded,
    branch: str,
    results: list[Result],
    label: str,
    wanted: ShowRequest,
) -> None:
    """One branch's run `label`: its trace, or why there are no steps to show."""
    name = wanted.scenario
    result = next((r for r in results if r.label == label), None)
    probed = any(p.branch == branch and p.tier == tier.name for p in evidence.probes)
    if not probed and result and result.error:
        # No probe output at all (the environment could not be built, vLLM did not import, ...).
        console.print(
            f"{name} · {branch} · run {label}: could not be measured, no steps were recorded "
            f"({result.error})",
            markup=False,
            emoji=False,
        )
        return
    runs = recorded.runs(branch, tier.name)
    run = next((r for r in runs if r.scenario == name and r.label == label), None)
    if run is None or not run.steps:
        why = (
            (run.error if run is not None else None)
            or (result.error if result else None)
            or "no steps recorded"
        )
        console.print(
            f"{name} · {branch} · run {label}: no steps to show ({why})", markup=False, emoji=False
        )
        return
    source = recorded.probe(branch, tier.name, name)
    reused = source.reused if source is not None else None
    if reused is not None:
        console.print(
            f"{branch} · {tier.name}: these steps come from the result cache: measured "
            f"{reused.measured_at} by an earlier run (key {reused.key[:12]}), not by the run that "
            "wrote this evidence; `difftest run --no-cache` measures them again",
            markup=False,
            emoji=False,
            soft_wrap=True,
        )
    # Steps are recorded only by a probe-measured tier.
    trace = build_trace(tiers.probe_tier(tier.name), scenario, run, evidence.reading, branch)
    others = [r for r in results if r.label != label]
    render_trace(console, trace, result, others, all_steps=wanted.all_steps)


def shown_branches(evidence: Evidence, scenario: str, chosen: str | None) -> list[str]:
    """The branch asked for; else every branch that does not pass `scenario`, else the first."""
    names = branch_names(evidence)
    if chosen is not None:
        if chosen not in names:
            raise ConfigError(
                f"branch {chosen!r} is not in the evidence", f"name one of: {', '.join(names)}"
            )
        return [chosen]
    failing = [
        b
        for b in names
        if any(
            r.scenario == scenario and r.branch == b and r.verdict != "pass"
            for r in evidence.results
        )
    ]
    return failing or names[:1]


def chosen_label(
    results: list[Result],
    order: str | None,
    index: dict[tuple[str, str, str], ProbeRun],
    branch: str,
) -> str:
    """The run to show: the label given, the batch run whose order is `a,b,...`, or the most severe
    run."""
    if order is None:
        worst = most_severe(results)
        if worst is None:
            raise ConfigError(f"{branch} has no result for this scenario", "pick another --branch")
        return worst.label
    labels = [r.label for r in results]
    if order in labels:
        return order
    wanted = [part.strip() for part in order.split(",")]
    for label in labels:
        run = index.get((branch, results[0].scenario, label))
        if run is not None and run.role == "batch" and run.order == wanted:
            return label
    raise ConfigError(
        f"no run {order!r} of {branch} on this scenario", f"name one of: {', '.join(labels)}"
    )
