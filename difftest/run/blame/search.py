"""`difftest blame BRANCH`: which hunks of the branch's change make each of its findings.

    base + branch, every selected scenario -> the branch's findings (what it shows that the base
      does not: `core.blame.finding_of`)
    the change base..branch -> steps (patch files, replayed commits) -> hunks (`build.refs.hunks`)
    per finding: ddmin over the steps (a change of several), then over the hunks of the steps kept
      (`core.ddmin`), each set of hunks applied alone on the base and measured (`subsets.py`)
    -> the whole change and the minimal set probed again, 3 times each (`_comes_back`): a finding
       that does not come back every time reads unstable (exit 3) and no set is reported
    -> each finding's minimal set, a try per hunk of it showing the finding goes without it (a
       hunk without which the rest does not run is bound to the set: `core.blame.does_not_run`;
       the others make the finding), and the rest of the change measured without it
    -> the evidence (its `blame`), and a config pinning every set reported as a patch series

Only hunks under `vllm/` are searched: a branch environment carries nothing else
of a branch (`build.envs.branch.overlaid`), so no probe can tell another hunk
from its absence; those hunks are left out and the report says why. Everything
the search measures is kept for the run: a set asked about again, by this
finding or another, costs nothing.
"""

from __future__ import annotations

import os
import shlex
import shutil
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from git.exc import GitCommandError

from difftest import tiers
from difftest.build.envs.branch import overlaid
from difftest.build.refs.hunks import Step, split_change, step_commits
from difftest.build.workspace import PreparedBranch, Workspace, branch_spec, prepare
from difftest.core.blame import (
    MEASURED_AGAIN,
    BlameFinding,
    Phase,
    describe,
    does_not_run,
    finding_of,
    is_a_crash,
    listed,
    own_reason,
)
from difftest.core.config import Config
from difftest.core.ddmin import Parts, ddmin
from difftest.core.errors import ConfigError, NotMeasured
from difftest.core.records import Reading, Result
from difftest.run.blame.record import Before, BlameOutcome, assemble
from difftest.run.blame.subsets import Measured, SubsetProber, judge_beside
from difftest.run.cache.results import open_cache
from difftest.run.context import RunContext
from difftest.run.pipeline import (
    TierScenarios,
    measure_tier,
    probes_at_a_time,
    select_scenarios,
)
from difftest.run.probes.runner import BranchRun, SharedServer, share_key_of, shared_fork_server
from difftest.tiers.common.scenario import read_scenario_file

Log = Callable[[str], None]
#: Where the patch series of the sets tried are written while the search runs.
SCRATCH = ".blame-subsets"
GUIDE = "scenarios/README.md"


@dataclass(frozen=True)
class BlameRequest:
    branch: str
    #: The base the hunks are applied on; None: the config's baseline.
    against: str | None = None
    #: `-k`: the scenarios to look for findings in; None: every probe tier's.
    select: str | None = None
    #: `--finding`: a scenario file (what `difftest fuzz` writes) instead of `-k`.
    finding: Path | None = None
    tiers: list[str] | None = None
    reading: Reading | None = None
    out: Path = Path("out-blame")
    fetch: bool = False
    fork: bool = True
    #: Sets measured side by side; None: one per core (capped by memory).
    jobs: int | None = None
    reuse_cached: bool = True


def blame(config: Config, request: BlameRequest, log: Log = lambda _m: None) -> BlameOutcome:
    """Find each finding of `request.branch` on the selected scenarios, and the hunks that make it;
    ConfigError (exit 2) for what is wrong in the request, NotMeasured (exit 3) when the branch or
    its base cannot be measured."""
    started = time.monotonic()
    head_name, base_name = _names(config, request)
    selected = _scenarios(config, request)
    cache = open_cache(request.reuse_cached, True)
    workspace = prepare(config, [base_name, head_name], do_fetch=request.fetch, log=log)
    base, head = workspace.branch(base_name), workspace.branch(head_name)
    for prepared in (base, head):
        if prepared.env is None:
            raise NotMeasured(
                f"cannot blame: {prepared.name} has no environment: {prepared.error}",
                "fix what keeps its environment from being built (the message says), then run "
                "blame again",
            )
    steps = _change(workspace, base, head)
    carried = [h.number for s in steps for h in s.hunks if overlaid(h.path)]
    if not carried:
        raise ConfigError(
            f"{head.name} changes nothing under vllm/ relative to {base.name}: no hunk of its "
            "change reaches a branch environment, so none can make a finding",
            "blame a branch that changes vLLM's Python code",
        )
    context = RunContext(
        workspace,
        base.name,
        reading=request.reading or config.oracle.reading,
        out=request.out,
        log=log,
        cache=cache,
        jobs=request.jobs,
        fork=request.fork,
    )
    scratch = request.out / SCRATCH
    shutil.rmtree(scratch, ignore_errors=True)
    prefix = f"{head.name[:60].rstrip('-._')}-blame"
    repo = workspace.repo
    prober: SubsetProber | None = None
    try:
        with ExitStack() as stack:
            servers = {
                chosen.tier.name: stack.enter_context(
                    shared_fork_server(
                        _python(base),
                        chosen.tier.name,
                        request.out / "probe",
                        config.timeouts.probe_s,
                        _width(chosen, request.jobs),
                        request.fork,
                        log,
                        share_key=share_key_of(workspace.base.path),
                    )
                )
                for chosen in selected
            }
            base_runs, head_runs, judged = _measure_both(context, selected, servers, base, head)
            findings = _findings(selected, judged, base.name, head.name)
            chosen_findings = {f.tier for f in findings}
            only = {
                t.tier.name: TierScenarios(
                    t.tier, [s for s in t.scenarios if s.name in {f.scenario for f in findings}]
                )
                for t in selected
                if t.tier.name in chosen_findings
            }
            prober = SubsetProber(context, base, base_runs, steps, only, servers, scratch, prefix)
            for tier in only:
                prober.seed(tier, head, head_runs[tier])
            for finding in findings:
                _search(prober, finding, steps, carried, _width(only[finding.tier], request.jobs))
        return assemble(
            config,
            context.reading,
            request.out,
            Before(workspace, selected, steps, base, head, base_runs, head_runs, judged),
            findings,
            prober,
            _scenarios_dir(config, request),
            time.monotonic() - started,
        )
    finally:
        if prober is not None:
            prober.close()
            _forget_refs(repo, prober)
        shutil.rmtree(scratch, ignore_errors=True)


# -- the request --------------------------------------------------------------------------


def _names(config: Config, request: BlameRequest) -> tuple[str, str]:
    head = branch_spec(config, request.branch).name
    base = branch_spec(config, request.against or config.baseline).name
    if head == base:
        raise ConfigError(
            f"{request.branch!r} and its base {request.against or config.baseline!r} name the same "
            "branch: there is no change to blame",
            "name the branch to blame, and with --against a base it differs from",
        )
    return head, base


def _scenarios(config: Config, request: BlameRequest) -> list[TierScenarios]:
    """The probe tiers' scenarios `-k` selects, or the one scenario file `--finding` names."""
    if request.finding is not None:
        return [_finding_file(request.finding)]
    probe = [t.name for t in tiers.probe_tiers()]
    for name in request.tiers or []:
        if name not in probe:
            raise ConfigError(
                f"the {name} tier is judged from test outcomes, not from probes: blame cannot "
                "measure a set of hunks on it",
                f"use --tier {' or --tier '.join(probe)}",
            )
    chosen = [
        t for t in select_scenarios(config, request.tiers, request.select) if t.tier.name in probe
    ]
    if not chosen:
        chose = f"-k {request.select!r} selects" if request.select else "the config has"
        raise ConfigError(
            f"{chose} scenarios of the tests tier only: blame measures probe tiers",
            f"select scenarios of the {' or '.join(probe)} tier (`difftest list` names them)",
        )
    return chosen


def _finding_file(path: Path) -> TierScenarios:
    """A scenario file in a folder named after its tier, as `difftest fuzz` writes its findings."""
    if not path.is_file():
        raise ConfigError(
            f"--finding {str(path)!r} is not a file",
            "pass a scenario file `difftest fuzz` wrote (OUT/found/scheduler/fuzz-NN-....yaml)",
        )
    folders = {t.folder: t for t in tiers.probe_tiers() if t.folder}
    tier = folders.get(path.parent.name)
    if tier is None:
        raise ConfigError(
            f"--finding {str(path)!r}: its folder {path.parent.name!r} names no probe tier, so "
            "its scenarios cannot be found again",
            "keep the file in a folder named after its tier ("
            + ", ".join(f"{name}/" for name in folders)
            + "), as `difftest fuzz` writes OUT/found/scheduler/",
        )
    try:
        scenario = tier.parse_scenario(read_scenario_file(path, GUIDE), str(path))
    except ConfigError as exc:
        raise ConfigError(
            f"--finding {str(path)!r} is not a scenario file: {exc.problem}",
            exc.hint or f"pass a scenario file (see {GUIDE})",
        ) from None
    return TierScenarios(tier, [scenario])


def _scenarios_dir(config: Config, request: BlameRequest) -> Path:
    """The folder the scenarios were read from (one subfolder per tier)."""
    if request.finding is not None:
        return request.finding.resolve().parent.parent
    assert config.scenarios_dir is not None, "load_config always sets scenarios_dir"
    return config.scenarios_dir


def _width(chosen: TierScenarios, jobs: int | None) -> int:
    """Sets measured side by side: `--jobs`, else one per core for as many as memory allows (the
    tier's own cap: engine probes one per four cores)."""
    cores = os.cpu_count() or 1
    return probes_at_a_time(tiers.probe_tier(chosen.tier.name), cores, jobs)[0]


def _python(branch: PreparedBranch) -> Path:
    assert branch.env is not None
    return branch.env.python


def _change(workspace: Workspace, base: PreparedBranch, head: PreparedBranch) -> list[Step]:
    """The change from the base to the branch: the branch's own steps when they start at the base
    (its patches, replayed commits, a stack's members), else the whole diff as one step."""
    start, tip = head.resolved.ref_sha, head.resolved.sha
    if start == base.resolved.sha and start != tip:
        parts = step_commits(workspace.repo, start, tip)
    else:
        parts = [(base.resolved.sha, tip)]
    steps = split_change(workspace.repo, parts)
    if not any(s.hunks for s in steps):
        raise ConfigError(
            f"{head.name} ({tip[:12]}) does not differ from {base.name} "
            f"({base.resolved.sha[:12]}): there is no change to blame",
            "name a branch that changes something, or another base with --against",
        )
    return steps


# -- measuring the branch and its base ------------------------------------------------------


def _measure_both(
    context: RunContext,
    selected: list[TierScenarios],
    servers: dict[str, SharedServer],
    base: PreparedBranch,
    head: PreparedBranch,
) -> tuple[dict[str, BranchRun], dict[str, BranchRun], list[Result]]:
    """Both branches on every selected scenario, judged through the door beside the base."""
    base_runs: dict[str, BranchRun] = {}
    head_runs: dict[str, BranchRun] = {}
    judged: list[Result] = []
    for chosen in selected:
        tier = tiers.probe_tier(chosen.tier.name)
        server = servers[tier.name]
        delivered = measure_tier(
            _with_branches(context, [base, head]),
            tier,
            chosen.scenarios,
            jobs=server.parallel,
            shared=server,
        )
        base_runs[tier.name], head_runs[tier.name] = delivered[base.name], delivered[head.name]
        for prepared in (base, head):
            run = delivered[prepared.name]
            if run.header is None:
                raise NotMeasured(
                    f"cannot blame: {prepared.name}'s {tier.name} probe measured nothing: "
                    f"{run.error or 'no header'}",
                    "fix what the message names (a branch that does not import cannot be "
                    "blamed), then run blame again",
                )
        others = {head.name: delivered[head.name]}
        judged += judge_beside(
            tier, chosen.scenarios, context.reading, base.name, delivered[base.name], others
        )
    return base_runs, head_runs, judged


def _with_branches(context: RunContext, branches: list[PreparedBranch]) -> RunContext:
    workspace = context.workspace
    return replace(
        context, workspace=Workspace(workspace.config, workspace.base, workspace.repo, branches)
    )


def _findings(
    selected: list[TierScenarios], judged: list[Result], base: str, head: str
) -> list[BlameFinding]:
    """The branch's findings, scenario by scenario; ConfigError when it has none to blame."""
    findings: list[BlameFinding] = []
    errors: list[str] = []
    names: list[str] = []
    for chosen in selected:
        for scenario in chosen.scenarios:
            names.append(scenario.name)
            mine = [r for r in judged if r.branch == head and r.scenario == scenario.name]
            theirs = [r for r in judged if r.branch == base and r.scenario == scenario.name]
            if any(r.verdict == "error" for r in mine):
                errors.append(f"{scenario.name}: {describe(mine)}")
            found = finding_of(mine, theirs)
            if found is None:
                continue
            verdict, runs = found
            first = next(r for r in mine if r.verdict == verdict)
            findings.append(
                BlameFinding(
                    scenario=scenario.name,
                    tier=chosen.tier.name,
                    verdict=verdict,
                    runs=runs,
                    reason=own_reason(first, theirs),
                )
            )
    if findings:
        return findings
    shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
    if errors:
        raise NotMeasured(
            f"cannot blame: {head} could not be measured on {'; '.join(errors[:3])}",
            "fix what the message names, then run blame again",
        )
    raise ConfigError(
        f"{head} shows nothing on {shown} that {base} does not: no finding to blame",
        f"pick a scenario where {head} is broken or worse than {base} "
        f"(`{shlex.join(['difftest', 'run', base, head])}` shows them) with -k, or another base "
        "with --against",
    )


# -- the search ------------------------------------------------------------------------------


def _search(
    prober: SubsetProber, finding: BlameFinding, steps: list[Step], carried: list[int], width: int
) -> None:
    """ddmin over the steps (a change of several), then over the kept steps' hunks; each hunk of
    the minimal set with the try that shows it is needed; the rest of the change measured alone."""
    tier = finding.tier
    log = prober.context.log

    def measured(
        sets: list[tuple[int, ...]], phase: Phase, ahead: list[tuple[int, ...]] | None = None
    ) -> list[Measured]:
        before = len(prober.measured)
        found = prober.measure(tier, sets, phase, ahead or [])
        finding.asked += [m.number for m in found]
        for m in prober.measured[before:]:
            what, text = m.outcome(finding)
            hunks = f"hunk{'s' if len(m.hunks) != 1 else ''} {listed(list(m.hunks))}"
            log(f"blame: try {m.number} ({hunks}): {what}: {text}")
        return found

    def reproduces(phase: Phase, as_hunks: Callable[[Parts], Parts]) -> Callable[..., list[bool]]:
        def ask(sets: list[Parts], ahead: list[Parts]) -> list[bool]:
            found = measured([as_hunks(s) for s in sets], phase, [as_hunks(s) for s in ahead])
            return [m.outcome(finding)[0] == "reproduces" for m in found]

        return ask

    log(
        f"blame: {finding.scenario}: {finding.verdict} in {len(finding.runs)} run(s) ("
        f"{finding.reason}); searching {len(carried)} hunk(s) under vllm/"
    )
    whole = measured([tuple(carried)], "whole")[0]
    what, text = whole.outcome(finding)
    if what != "reproduces":
        finding.problem = (
            f"the change's hunks under vllm/, applied together on the base, do not make it: {text}"
        )
        return
    by_step = {s.index: tuple(h.number for h in s.hunks if h.number in carried) for s in steps}
    units = [index for index, hunks in by_step.items() if hunks]
    kept = units
    if len(units) > 1:
        kept = list(
            ddmin(
                units,
                reproduces("steps", lambda chosen: tuple(h for i in chosen for h in by_step[i])),
                width,
            )
        )
    finding.steps = [i + 1 for i in kept]
    pool = tuple(h for i in kept for h in by_step[i])
    minimal = ddmin(pool, reproduces("hunks", lambda chosen: chosen), width)
    finding.minimal = list(minimal)
    culprit = measured([minimal], "hunks")[0]
    finding.culprit = culprit.number
    if not _comes_back(prober, finding, whole, culprit):
        return
    crash = is_a_crash(finding)
    for hunk in minimal:
        rest = tuple(h for h in minimal if h != hunk)
        if not rest:
            finding.needed[hunk] = 0
            continue
        without = measured([rest], "hunks")[0]
        finding.needed[hunk] = without.number
        what, _text = without.outcome(finding)
        if not crash and does_not_run(what, without.for_scenario(finding.scenario)):
            finding.bound.append(hunk)
    others = tuple(h for h in carried if h not in minimal)
    if others:
        finding.rest = measured([others], "rest")[0].number


def _comes_back(
    prober: SubsetProber, finding: BlameFinding, whole: Measured, culprit: Measured
) -> bool:
    """The whole change and the minimal set probed `MEASURED_AGAIN` times more each, never from a
    cache: True when every probe made the finding. Otherwise the search's answers cannot be trusted
    (a set may have looked needed, or enough, by chance, and a branch could steer that onto
    innocent hunks): the finding reads unstable and no set is reported."""
    log = prober.context.log
    sets = list({m.digest: m for m in (whole, culprit)}.values())
    seen = {m.digest: [m.outcome(finding)[0]] for m in sets}
    for round_ in range(1, MEASURED_AGAIN + 1):
        for again in prober.measure_again(finding.tier, sets, round_):
            finding.again.append(again.number)
            what, text = again.outcome(finding)
            hunks = listed(list(again.hunks))
            log(f"blame: try {again.number} (hunks {hunks}, again): {what}: {text}")
            seen[again.digest].append(what)
    if all(what == "reproduces" for whats in seen.values() for what in whats):
        return True
    counts = [
        f"{_called(m, whole)} made it in {seen[m.digest].count('reproduces')} of "
        f"{len(seen[m.digest])} probes"
        for m in sets
    ]
    finding.unstable, finding.minimal, finding.culprit = True, [], None
    finding.problem = (
        "unstable: the same code did not make it every time it was probed ("
        + "; ".join(counts)
        + "), so no set of hunks can be said to make it: make the branch's counting deterministic "
        "(no timing, randomness or state kept between runs), then blame it again"
    )
    log(f"blame: {finding.scenario}: {finding.problem}")
    return False


def _called(measured: Measured, whole: Measured) -> str:
    if measured.digest == whole.digest:
        return "the whole change"
    return f"hunk{'s' if len(measured.hunks) != 1 else ''} {listed(list(measured.hunks))}"


def _forget_refs(repo: Any, prober: SubsetProber) -> None:
    """The refs `refs/heads/difftest/<set>` resolving wrote: the config recreates any it names."""
    for resolved in prober.resolved:
        try:
            repo.git.update_ref("-d", resolved.local_ref)
        except GitCommandError:
            pass  # already gone, or the repository is read-only: the ref only points at a commit
