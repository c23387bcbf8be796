"""One comparison, end to end: scenarios -> probes in every branch -> verdicts -> evidence.

`run`, `gate` and `verify` all go through here, so they measure and judge the
same way. The data only flows forward: the workspace (environments) feeds the
runner (probe processes), whose runs feed the oracle, the invariants and the
verdicts, which feed the evidence that every report is rendered from.
"""

from __future__ import annotations

import os
import platform
import sys
from dataclasses import dataclass
from pathlib import Path

from difftest import paths
from difftest.config import Config
from difftest.errors import ConfigError
from difftest.evidence import BaseEvidence, BranchEvidence, Evidence, ScenarioEvidence
from difftest.results import ProbeRun, Reading, Result, Tier, Violation
from difftest.runner import BranchRun, Progress, run_branches
from difftest.scenarios import Scenario, load_scenarios, probe_job
from difftest.selection import compile_selection
from difftest.tiers import TierRules, rules_for
from difftest.verdicts import judge, unmeasured
from difftest.workspace import PreparedBranch, Workspace

TIERS: tuple[Tier, ...] = ("scheduler", "engine")


@dataclass
class Measurement:
    """Every branch's probe output for every selected tier."""

    scenarios: dict[str, list[Scenario]]
    runs: dict[str, dict[str, BranchRun]]  # tier -> branch -> what its probe delivered


def select_scenarios(config: Config, tier: str, select: str | None) -> dict[str, list[Scenario]]:
    """Load and validate the scenarios first: a bad file stops the run before anything is built."""
    tiers = TIERS if tier == "all" else (tier,)
    selected = compile_selection(select) if select else None
    chosen: dict[str, list[Scenario]] = {}
    for name in tiers:
        if not (config.scenarios_dir / name).is_dir():
            continue
        scenarios = load_scenarios(config.scenarios_dir, name)
        if selected:
            scenarios = [s for s in scenarios if selected(s.name)]
        if scenarios:
            chosen[name] = scenarios
    _check_unique_names(chosen)
    return chosen


def _check_unique_names(chosen: dict[str, list[Scenario]]) -> None:
    """Results, evidence and the gate key scenarios by name alone, so names must not repeat across tiers."""
    seen: dict[str, str] = {}
    for tier, scenarios in chosen.items():
        for scenario in scenarios:
            if scenario.name in seen:
                raise ConfigError(
                    f"scenario name {scenario.name!r} is used in both the {seen[scenario.name]} and the {tier} tier",
                    f"rename one of them (e.g. prefix the file name with `{tier}-`)",
                )
            seen[scenario.name] = tier


def measure_tier(
    workspace: Workspace,
    tier: str,
    scenarios: list[Scenario],
    work_dir: Path,
    jobs: int | None = None,
    progress: Progress | None = None,
) -> dict[str, BranchRun]:
    """Run one tier's probe in every branch that has an environment, concurrently."""
    targets = [(b.name, b.env.python) for b in workspace.branches if b.env is not None]
    job = {**probe_job(scenarios, paths.models_dir(), tier), "run_timeout_s": workspace.config.timeouts.run_s}
    return run_branches(
        targets,
        job,
        work_dir,
        workspace.config.timeouts.probe_s,
        sum(len(s.runs()) for s in scenarios),
        jobs or default_jobs(tier, len(targets)),
        progress,
    )


def default_jobs(tier: str, branches: int) -> int:
    """Scheduler probes are single-threaded: all branches at once. Engine probes each want
    several cores (side by side on 2 cores, every engine step ran ~10x slower), so they
    get about 4 cores each."""
    if tier == "scheduler":
        return max(1, branches)
    return max(1, min(branches, (os.cpu_count() or 1) // 4))


def judge_all(workspace: Workspace, measurement: Measurement, reading: Reading) -> list[Result]:
    results: list[Result] = []
    names = [b.name for b in workspace.branches]
    baseline = workspace.config.baseline if workspace.config.baseline in names else names[0]
    for tier, tier_scenarios in measurement.scenarios.items():
        rules = rules_for(tier)
        delivered = measurement.runs.get(tier, {})
        for scenario in tier_scenarios:
            runs = {
                name: [r for r in delivered[name].runs if r.scenario == scenario.name]
                for name in names
                if name in delivered
            }
            across = rules.across_branches(scenario, runs, baseline) if rules.across_branches else {}
            for branch in workspace.branches:
                results += _judge_scenario(
                    branch, scenario, delivered.get(branch.name), runs.get(branch.name, []),
                    across.get(branch.name, {}), rules, reading,
                )
    return results


def _judge_scenario(
    branch: PreparedBranch,
    scenario: Scenario,
    delivered: BranchRun | None,
    runs: list[ProbeRun],
    across: dict[str, list[Violation]],
    rules: TierRules,
    reading: Reading,
) -> list[Result]:
    # Reference runs only choose where a later run is cut: recorded and compared across
    # branches, but not judged themselves.
    labels = [p["label"] for p in scenario.runs() if p.get("role") != "reference"]
    runs = [r for r in runs if r.notes.get("role") != "reference"]
    if delivered is None:
        why = branch.error or "no probe was run for this branch"
        return unmeasured(branch.name, scenario.name, scenario.tier, scenario.statement, labels, why, reading)
    got = {r.label for r in runs}
    missing = [label for label in labels if label not in got]
    results: list[Result] = []
    measured = [r for r in runs if r.status == "ok"]
    if runs:
        expected = {r.label: rules.expected(scenario, r, reading) for r in measured}
        violations = rules.invariants(scenario, measured) if measured else {}
        for label, extra in across.items():
            violations.setdefault(label, []).extend(extra)
        results += judge(branch.name, scenario.name, scenario.tier, scenario.statement, runs, expected, violations, reading)
    if missing:
        why = delivered.error or "the probe did not report this run"
        results += unmeasured(branch.name, scenario.name, scenario.tier, scenario.statement, missing, why, reading)
    return results


def make_evidence(
    workspace: Workspace, measurement: Measurement, results: list[Result], reading: Reading
) -> Evidence:
    base_fp = workspace.base.fingerprint
    branches = {}
    for b in workspace.branches:
        r = b.resolved
        branches[b.name] = BranchEvidence(
            ref=r.ref,
            sha=r.sha,
            ref_sha=r.ref_sha,
            patches={str(p.path.name): p.sha256 for p in r.patches},
            fingerprint=b.env.fingerprint if b.env else {"error": b.error},
        )
    scenarios = {
        s.name: ScenarioEvidence(file=f"{tier}/{s.file}", sha256=s.sha256, seed=s.seed, tier=s.tier, statement=s.statement)
        for tier, tier_scenarios in measurement.scenarios.items()
        for s in tier_scenarios
    }
    # Per-step records stay in the probe's JSONL next to the reports; the evidence keeps each
    # run's totals, outputs and notes, which is what re-checking a verdict needs.
    runs: dict[str, list[ProbeRun]] = {}
    for per_branch in measurement.runs.values():
        for name, delivered in per_branch.items():
            runs.setdefault(name, []).extend(r.model_copy(update={"steps": []}) for r in delivered.runs)
    return Evidence(
        command=sys.argv[:],
        reading=reading,
        base=BaseEvidence(
            requirement=base_fp["requirement"],
            python=base_fp.get("python"),
            platform=base_fp.get("platform") or f"{sys.platform}-{platform.machine()}",
            fingerprint=base_fp,
        ),
        branches=branches,
        scenarios=scenarios,
        results=results,
        runs=runs,
    )
