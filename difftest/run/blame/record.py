"""What `difftest blame` keeps of its search: the evidence (the base, the branch and every set of
hunks it reports, judged on the findings' scenarios, with the search itself as its `blame`), and the
config and patch files that measure those sets again (`reproduce.py`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from difftest.build.envs.branch import overlaid
from difftest.build.envs.fingerprint import canonical_hash
from difftest.build.refs.hunks import Step
from difftest.build.workspace import PreparedBranch, Workspace
from difftest.core.blame import BlameEvidence, BlameFinding, BlameHunk, BlameStep, SubsetTry
from difftest.core.config import Config
from difftest.core.evidence import Evidence
from difftest.core.records import Reading, Result
from difftest.run.blame.reproduce import reproduce_config
from difftest.run.blame.subsets import PATCH_PREFIX, Measured, SubsetProber
from difftest.run.pipeline import TierScenarios, make_evidence
from difftest.run.probes.environ import passed_environ
from difftest.run.probes.runner import BranchRun
from difftest.run.probes.sandbox import protection_evidence
from difftest.tiers.base import TierOutcome

#: The config `blame` writes beside its reports, pinning every set of hunks it reports.
CONFIG_FILE = "blame.yaml"


@dataclass
class BlameOutcome:
    """The search's evidence (with its `blame`), and what the reports and the config are made
    from."""

    evidence: Evidence
    #: Scenarios by name, and every run of the branches the evidence names, with its steps.
    scenarios: dict[str, Any]
    recorded: dict[tuple[str, str, str], Any]
    #: Files written beside the reports: the config and the patch series it names.
    files: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Before:
    """What the search measured before its first set: the change, and the base and the branch."""

    workspace: Workspace
    selected: list[TierScenarios]
    steps: list[Step]
    base: PreparedBranch
    head: PreparedBranch
    base_runs: dict[str, BranchRun]
    head_runs: dict[str, BranchRun]
    judged: list[Result]


def assemble(
    config: Config,
    reading: Reading,
    out: Path,
    both: Before,
    findings: list[BlameFinding],
    prober: SubsetProber | None,
    scenarios_dir: Path,
    wall_s: float,
) -> BlameOutcome:
    """The evidence of the search: the base, the branch and every set reported (each finding's
    minimal set and the rest without it) on the findings' scenarios, judged through the door."""
    assert prober is not None
    workspace, selected, steps, judged = both.workspace, both.selected, both.steps, both.judged
    base, head, base_runs, head_runs = both.base, both.head, both.base_runs, both.head_runs
    reported = {
        number
        for f in findings
        for number in (f.culprit, f.rest)
        if number is not None and number > 0
    }
    chosen = [m for m in prober.measured if m.number in reported and m.branch is not None]
    names = {f.scenario for f in findings}
    branches = [base, head, *[m.branch for m in chosen if m.branch is not None]]
    probes: dict[str, dict[str, BranchRun]] = {}
    results = [r for r in judged if r.scenario in names]
    for tier in {f.tier for f in findings}:
        probes[tier] = {base.name: base_runs[tier], head.name: head_runs[tier]}
    for m in chosen:
        assert m.branch is not None
        if m.run is not None:
            probes[m.tier][m.branch.name] = m.run
        results += m.results
    kept = [
        TierScenarios(t.tier, [s for s in t.scenarios if s.name in names])
        for t in selected
        if any(s.name in names for s in t.scenarios)
    ]
    evidence_workspace = Workspace(workspace.config, workspace.base, workspace.repo, branches)
    evidence = make_evidence(
        evidence_workspace,
        kept,
        {tier: TierOutcome(probes=runs) for tier, runs in probes.items()},
        results,
        reading,
        out,
    )
    tries = [_try(m, findings) for m in prober.measured]
    record = BlameEvidence(
        branch=head.name,
        against=base.name,
        steps=[
            BlameStep(number=s.index + 1, label=s.label, parent=s.parent, commit=s.commit)
            for s in steps
        ],
        hunks=[
            BlameHunk(
                number=h.number,
                step=h.step + 1,
                file=h.path,
                lines=h.lines,
                added=h.added,
                removed=h.removed,
                text=h.text,
                carried=overlaid(h.path),
            )
            for s in steps
            for h in s.hunks
        ],
        findings=findings,
        tries=tries,
        config=CONFIG_FILE,
        probes=prober.probes,
        wall_s=round(wall_s, 2),
    )
    evidence = evidence.model_copy(
        update={
            "baseline": base.name,
            "probe_environ_sha256": canonical_hash(passed_environ()),
            "protection": protection_evidence(),
            "blame": record,
        }
    )
    series = {m.number: prober.patches(m.hunks) for m in chosen}
    steps_of = [(m, [index for index, _text in series[m.number]]) for m in chosen]
    files = {CONFIG_FILE: reproduce_config(config, base, head, steps_of, scenarios_dir, findings)}
    for m in chosen:
        for index, text in series[m.number]:
            files[f"{PATCH_PREFIX}{m.digest[:12]}-{index + 1}.patch"] = text
    scenarios = {s.name: s for t in kept for s in t.scenarios}
    recorded = {
        (name, run.scenario, run.label): run
        for per_tier in probes.values()
        for name, delivered in per_tier.items()
        for run in delivered.runs
        if run.scenario in names
    }
    return BlameOutcome(evidence, scenarios, recorded, files)


def _try(measured: Measured, findings: list[BlameFinding]) -> SubsetTry:
    mine = [f for f in findings if f.tier == measured.tier]
    outcomes = {f.scenario: measured.outcome(f) for f in mine}
    return SubsetTry(
        number=measured.number,
        hunks=list(measured.hunks),
        phase=measured.phase,
        digest=measured.digest,
        branch=measured.branch.name if measured.branch is not None else None,
        outcomes={name: what for name, (what, _text) in outcomes.items()},
        details={name: text for name, (_what, text) in outcomes.items()},
        probed=measured.probed,
        reused=measured.run is not None and measured.run.reused is not None,
        seconds=round(measured.seconds, 2),
    )
