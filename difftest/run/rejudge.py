"""Judging a finished comparison again from its files alone: what `difftest merge` makes of each
shard.

A shard's evidence holds its verdicts, but they are text anyone can edit, so a
merge never reads them. It reads what the verdicts were made from, each piece
checked: every probe's records and job through `run.reread` (their sha256,
then record by record, with the probe's outcome checked against them), the
scenario objects from the config by name (their file's sha256 must be the one
recorded, and each probe's job must have played exactly those scenarios, as
they are now), which scenarios this base cannot run (recomputed, and compared
with what the shard says). Then the one door (`tiers.door.judge_tier`) judges
each tier, with the evidence's reading and baseline, exactly as the run did.

The tests tier keeps no hashed records (its outcomes live in the evidence
only), so it cannot be judged again: a shard holding it is refused.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from difftest import tiers
from difftest.core.config import Config
from difftest.core.errors import ConfigError, DifftestError
from difftest.core.evidence import Evidence
from difftest.core.records import ProbeRun, Result
from difftest.run.pipeline import select_scenarios
from difftest.run.reread import RecordedProbe, recorded_probe
from difftest.tiers import door
from difftest.tiers.common.scenario import ScenarioBase
from difftest.tiers.probe_tier import ProbeTier

#: (branch, scenario, run label) -> the run with its steps.
RunKey = tuple[str, str, str]


@dataclass
class Rejudged:
    """One evidence judged again: its results, and the runs (with steps) they were judged from."""

    results: list[Result] = field(default_factory=list)
    #: Branch -> its runs, in the order its probes reported them (steps included).
    runs: dict[str, list[ProbeRun]] = field(default_factory=dict)
    #: The scenario objects judged, by name.
    scenarios: dict[str, ScenarioBase] = field(default_factory=dict)

    @property
    def recorded(self) -> dict[RunKey, ProbeRun]:
        """Every run by (branch, scenario, label): what traces and the conclusion read steps
        from."""
        return {
            (branch, run.scenario, run.label): run
            for branch, found in self.runs.items()
            for run in found
        }


def recorded_scenarios(
    config: Config, recorded: Evidence, names: list[str] | None = None
) -> dict[str, ScenarioBase]:
    """The config's scenarios the evidence names (`names`: some of them), each the very file the
    evidence was made from (its sha256), or ConfigError naming the first that is missing or
    changed."""
    wanted = names if names is not None else list(recorded.scenarios)
    tier_names = list(dict.fromkeys(recorded.scenarios[n].tier for n in wanted))
    found = {
        s.name: s
        for group in select_scenarios(config, tier_names or None, None)
        for s in group.scenarios
    }
    for name in wanted:
        then, now = recorded.scenarios[name], found.get(name)
        if now is None or now.sha256 != then.sha256:
            raise ConfigError(
                f"scenario {name!r} ({then.file}) is missing or its file changed "
                f"(recorded sha256 {then.sha256[:12]}, "
                f"now {now.sha256[:12] if now else 'missing'})",
                "use the scenario files (and the branches.yaml, -c) the evidence was produced with",
            )
    return {name: found[name] for name in wanted}


def rejudge(
    config: Config, evidence: Evidence, folder: Path, name: str, order: list[str] | None = None
) -> Rejudged:
    """Every verdict of `evidence` (named `name` in messages; its probe files under `folder`) judged
    again from its records, in `order` (scenario names; default: the evidence's). Reference
    branches' results are left out, as the run left them out; DifftestError/ConfigError when a piece
    does not check."""
    if evidence.baseline is None or evidence.baseline not in evidence.branches:
        raise DifftestError(
            f"{name} names no baseline among its branches ({evidence.baseline!r}): "
            "it cannot be judged again",
            "pass evidence written by `difftest run` with this difftest",
        )
    place = {scenario: i for i, scenario in enumerate(order or list(evidence.scenarios))}
    names = sorted(evidence.scenarios, key=lambda s: place.get(s, len(place)))
    try:
        scenarios = recorded_scenarios(config, evidence, names)
    except ConfigError as exc:
        raise ConfigError(f"{name}: {exc.problem}", exc.hint) from None
    out = Rejudged(scenarios=scenarios)
    for tier_name in dict.fromkeys(evidence.scenarios[s].tier for s in names):
        tier = tiers.get(tier_name)
        if not isinstance(tier, ProbeTier):
            raise DifftestError(
                f"{name} holds the {tier_name} tier, whose outcomes are kept in the evidence only "
                "(no hashed records): its verdicts cannot be judged again",
                f"run the {tier_name} tier without --shard (`difftest run --tier {tier_name}`), "
                "and shard the others",
            )
        mine = [scenarios[s] for s in names if evidence.scenarios[s].tier == tier_name]
        skipped = _skipped(evidence, tier_name, mine, name)
        measured = _measured(
            evidence, folder, tier_name, [s for s in mine if s.name not in skipped], name
        )
        branches = {b: _setup_error(evidence, b, tier_name) for b in _branch_order(evidence)}
        results = door.judge_tier(
            tier, mine, skipped, branches, measured, evidence.reading, evidence.baseline
        )
        out.results += [r for r in results if r.branch not in evidence.reference_branches]
        for branch, probe in measured.items():
            out.runs.setdefault(branch, []).extend(probe.runs)
    return out


def _skipped(
    evidence: Evidence, tier_name: str, scenarios: list[ScenarioBase], name: str
) -> dict[str, str]:
    """The scenarios this base cannot run, as the tier says now; ConfigError where the shard says
    otherwise."""
    tier = tiers.get(tier_name)
    skipped = {}
    for scenario in scenarios:
        now = tier.unavailable(scenario, evidence.base.fingerprint)
        then = evidence.scenarios[scenario.name].skipped
        if (now is None) != (then is None):
            raise DifftestError(
                f"{name} says scenario {scenario.name!r} was "
                f"{'not run: ' + then if then else 'run'}, "
                f"but on its base it {'cannot run: ' + now if now else 'can run'}",
                "use the evidence.json `difftest run` wrote, unedited",
            )
        if now is not None:
            skipped[scenario.name] = now
    return skipped


def _measured(
    evidence: Evidence, folder: Path, tier_name: str, runnable: list[ScenarioBase], name: str
) -> dict[str, RecordedProbe]:
    """Each branch's probe of the tier, read back and checked: one per branch, a branch of the
    comparison, its job the very scenarios that were to run (as the config's files say them now)."""
    expected = {s.name: json.loads(json.dumps(s.job_scenario())) for s in runnable}
    measured: dict[str, RecordedProbe] = {}
    for files in (p for p in evidence.probes if p.tier == tier_name):
        if files.branch not in evidence.branches or files.branch in measured:
            raise DifftestError(
                f"{name} names a {tier_name} probe of {files.branch!r} that is "
                + (
                    "not one of its branches"
                    if files.branch not in evidence.branches
                    else "already named"
                ),
                "use the evidence.json `difftest run` wrote, unedited",
            )
        probe = recorded_probe(files, folder)
        played = {s.get("name"): s for s in probe.job.get("scenarios", [])}
        if played != expected:
            raise DifftestError(
                f"{name}: {files.branch}'s {tier_name} probe ({files.job}) played "
                f"{', '.join(map(str, played)) or 'nothing'}, "
                "not the scenarios the evidence names as run "
                f"({', '.join(expected) or 'none'}) as their files hold them now",
                "use the evidence.json and probe/ folder `difftest run` wrote together, unedited",
            )
        measured[files.branch] = probe
    return measured


def _setup_error(evidence: Evidence, branch: str, tier_name: str) -> str:
    """Why a branch without records of this tier has none (used only for such a branch)."""
    error = evidence.branches[branch].fingerprint.get("error")
    if error:
        return str(error)
    return (
        f"its {tier_name} probe wrote no records (it ended before its first; "
        "the report of the run that measured it says why)"
    )


def _branch_order(evidence: Evidence) -> list[str]:
    """The run's branch order as far as the file keeps it: the probes' order (the evidence's branch
    map is written with sorted keys), then the branches that have no probe."""
    return list(
        dict.fromkeys(
            [
                *(p.branch for p in evidence.probes if p.branch in evidence.branches),
                *evidence.branches,
            ]
        )
    )
