"""One comparison, end to end: scenarios -> probes in every branch -> verdicts -> evidence.

`run`, `gate` and `verify` all go through here, so they measure and judge the
same way. The data only flows forward: the workspace (environments) feeds the
runner (probe processes), whose runs feed the oracle, the invariants and the
verdicts, which feed the evidence that every report is rendered from.
"""

from __future__ import annotations

import platform
import sys
from dataclasses import dataclass
from pathlib import Path

from difftest import paths
from difftest.config import Config
from difftest.evidence import BaseEvidence, BranchEvidence, Evidence, ScenarioEvidence
from difftest.invariants import check_invariants
from difftest.oracle import expected_totals
from difftest.results import ProbeRun, Reading, Result, Tier
from difftest.runner import BranchRun, Progress, run_branches
from difftest.scenarios import Scenario, load_scenarios, probe_job
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
    chosen: dict[str, list[Scenario]] = {}
    for name in tiers:
        if not (config.scenarios_dir / name).is_dir():
            continue
        scenarios = load_scenarios(config.scenarios_dir, name)
        if select:
            scenarios = [s for s in scenarios if select in s.name]
        if scenarios:
            chosen[name] = scenarios
    return chosen


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
    return run_branches(
        targets,
        probe_job(scenarios, paths.models_dir(), tier),
        work_dir,
        workspace.config.timeouts.probe_s,
        sum(len(s.runs()) for s in scenarios),
        jobs or len(targets) or 1,
        progress,
    )


def judge_all(workspace: Workspace, measurement: Measurement, reading: Reading) -> list[Result]:
    results: list[Result] = []
    for tier, tier_scenarios in measurement.scenarios.items():
        for branch in workspace.branches:
            delivered = measurement.runs.get(tier, {}).get(branch.name)
            for scenario in tier_scenarios:
                results += _judge_scenario(branch, scenario, delivered, reading)
    return results


def _judge_scenario(
    branch: PreparedBranch, scenario: Scenario, delivered: BranchRun | None, reading: Reading
) -> list[Result]:
    planned = scenario.runs()
    labels = [p["label"] for p in planned]
    if delivered is None:
        why = branch.error or "no probe was run for this branch"
        return unmeasured(branch.name, scenario.name, scenario.tier, scenario.statement, labels, why, reading)
    runs = [r for r in delivered.runs if r.scenario == scenario.name]
    got = {r.label for r in runs}
    missing = [label for label in labels if label not in got]
    results: list[Result] = []
    if runs:
        expected = {p["label"]: expected_totals(scenario, p["order"], reading) for p in planned}
        violations = check_invariants(scenario, runs)
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
    runs: dict[str, list[ProbeRun]] = {}
    for per_branch in measurement.runs.values():
        for name, delivered in per_branch.items():
            runs.setdefault(name, []).extend(delivered.runs)
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
