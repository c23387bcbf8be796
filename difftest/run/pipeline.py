"""One comparison, end to end: scenarios -> environments -> probes in every branch -> verdicts ->
evidence.

`run`, `gate` and `verify` all call `compare`, so they measure and judge the
same way. Data only flows forward: everything that can be wrong in the input
(scenario files, `-k`, branch names, refs, patches) is checked before any
environment is built; the workspace (environments) feeds the runner (probe
processes), whose runs feed each tier's oracle and invariants, which feed the
verdicts and the evidence that every report is rendered from.
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import git

from difftest import tiers
from difftest.build.envs.fingerprint import canonical_hash, sha256_file
from difftest.build.refs import ResolvedBranch, TransplantInfo
from difftest.build.tests.trees import CommitTree
from difftest.build.workspace import Workspace, branch_spec, branch_specs, prepare
from difftest.core import paths, tally
from difftest.core.config import Config
from difftest.core.errors import ConfigError
from difftest.core.evidence import (
    BaseEvidence,
    BranchEvidence,
    Evidence,
    ProbeFiles,
    ReplayedCommit,
    ScenarioEvidence,
    ShardEvidence,
    TransplantEvidence,
)
from difftest.core.records import ProbeCoverage, ProbeRun, Reading, Result, TestRecord
from difftest.core.selection import compile_selection
from difftest.probe.protocol import PROTOCOL_VERSION, Job, without_trace
from difftest.run.cache.results import open_cache, result_key
from difftest.run.cluster.connect import ClusterRequest, connect
from difftest.run.cluster.executor import RayExecutor, TierProbes
from difftest.run.context import (
    Log,
    ProgressFactory,
    RunContext,
    baseline_among,
    default_baseline,
    no_progress,
    quiet,
)
from difftest.run.coverage.judge import coverage_evidence
from difftest.run.coverage.tracing_job import plan_tracing
from difftest.run.probes.capacity import available_memory_mb, probes_at_once
from difftest.run.probes.environ import passed_environ
from difftest.run.probes.runner import (
    BranchRun,
    Progress,
    SharedServer,
    keeps_fork_servers,
    run_branches,
    share_key_of,
)
from difftest.run.probes.sandbox import protection, protection_evidence
from difftest.run.suites.measure import measure_suites
from difftest.tiers.base import Tier, TierOutcome
from difftest.tiers.common.scenario import ScenarioBase, ScenarioIdentity
from difftest.tiers.probe_tier import ProbeTier
from difftest.tiers.suite_tier import SuiteTier

#: (tier name, that tier's results, whether another tier runs next): called as soon as a tier is
#: judged.
TierDone = Callable[[str, list[Result], bool], None]


@dataclass(frozen=True)
class CompareRequest:
    """What to compare: everything `run`, `gate` and `verify` may choose."""

    #: Branch names or git refs; None: every configured branch.
    branches: list[str] | None = None
    #: Tier names; None: every registered tier that has a scenario folder.
    tiers: list[str] | None = None
    #: A `-k` expression over scenario names.
    select: str | None = None
    #: Exact scenario names (what `verify` re-runs); None: every scenario `select` matches.
    scenarios: list[str] | None = None
    #: The oracle reading; None: the config's.
    reading: Reading | None = None
    #: Where the probes' jobs, records and logs go (`<out>/probe/`).
    out: Path = Path("out")
    #: Branch probes at once; None: each tier's default.
    jobs: int | None = None
    fetch: bool = False
    #: The branch crashes and hangs are judged against, and cross-branch invariants compare with;
    #: None: the config's `baseline` (the gate passes its base).
    baseline: str | None = None
    #: Reuse probe runs from the result cache (`--no-cache`: measure every probe, then store
    #: afresh).
    reuse_cached: bool = True
    #: Store clean measurements in the result cache (`verify` neither reads nor writes it).
    store_results: bool = True
    #: (I, N): only the I-th of N deterministic slices of the selected scenarios (`run --shard
    #: I/N`).
    shard: tuple[int, int] | None = None
    #: Fork each tier's probes from one warm interpreter (`run.probes.forking`); False
    #: (`--no-fork`): every probe starts its own interpreter.
    fork: bool = True
    #: Run every probe on a Ray cluster (`--executor ray`); None: on this machine.
    cluster: ClusterRequest | None = None
    #: Trace these `vllm/` files (folders ending in `/`) in every branch, the baseline too
    #: (`difftest coverage`); None: each branch's changed files, the baseline untraced.
    trace_paths: tuple[str, ...] | None = None


@dataclass
class TierScenarios:
    """One tier's selected scenarios, and those this base cannot run (with the reason)."""

    tier: Tier[Any]
    scenarios: list[Any]
    skipped: dict[str, str] = field(default_factory=dict)


@dataclass
class Comparison:
    workspace: Workspace
    evidence: Evidence
    #: tier name -> what the tier measured and judged.
    outcomes: dict[str, TierOutcome[BranchRun]]
    #: The scenarios compared, per tier (reports read their step records with them).
    selected: list[TierScenarios] = field(default_factory=list)

    @property
    def delivered(self) -> dict[str, Mapping[str, BranchRun]]:
        """tier name -> branch name -> what its probe delivered (empty for a tier measured by
        suites, or whose branches have no environment)."""
        return {name: o.probes for name, o in self.outcomes.items()}


def compare(
    config: Config,
    request: CompareRequest,
    log: Log = quiet,
    progress: ProgressFactory = no_progress,
    tier_done: TierDone | None = None,
) -> Comparison:
    """Validate, prepare environments, measure every tier in every branch, judge each as it ends."""
    selected = select_scenarios(config, request.tiers, request.select, request.scenarios)
    order = [s.name for chosen in selected for s in chosen.scenarios]
    tally.count(
        "run",
        tiers=[chosen.tier.name for chosen in selected],
        scenarios=len(order),
        whole=not request.select and not request.scenarios and request.shard is None,
    )
    if request.shard is not None:
        selected = take_shard(selected, *request.shard)
    # A bad DIFFTEST_RESULT_CACHE stops us here.
    cache = open_cache(request.reuse_cached, request.store_results)
    named, reference = with_baseline(config, request.branches, request.baseline)
    branch_specs(config, named)  # too many, or named twice: refused before anything is said
    if request.cluster is not None:
        check_placement(config, named, request.cluster)
    if reference:
        log(
            f"baseline {reference[0]} is measured too (reused from the result cache when "
            "unchanged): crashes and hangs of the named branches are judged against it; its own "
            "results are not reported"
        )
    # Connected before anything is built: a wrong address costs seconds, not a base build.
    cluster = connect(request.cluster.address) if request.cluster is not None else None
    try:
        workspace = prepare(
            config,
            named,
            do_fetch=request.fetch,
            log=log,
            before_build=refusals_before_build(selected, config, request.baseline),
        )
        guard = protection()
        if not guard.active:
            log(guard.describe() + " (the base is still checked by content before each run)")
        for chosen in selected:
            _mark_unavailable(chosen, workspace.base.fingerprint, log)
        plan = plan_tracing(workspace, log, request.trace_paths)
        context = RunContext(
            workspace,
            default_baseline(workspace, request.baseline),
            reading=request.reading or config.oracle.reading,
            out=request.out,
            log=log,
            progress=progress,
            cache=cache,
            jobs=request.jobs,
            fork=request.fork,
            trace=plan,
            cluster=RayExecutor(
                cluster, config.base, workspace.base, dict(request.cluster.place), log
            )
            if cluster is not None and request.cluster is not None
            else None,
        )
        measurer = BranchMeasurer(context)
        outcomes: dict[str, TierOutcome[BranchRun]] = {}
        results: list[Result] = []
        for index, chosen in enumerate(selected):
            outcome = chosen.tier.measure(chosen.scenarios, chosen.skipped, measurer)
            outcomes[chosen.tier.name] = outcome
            judged = [r for r in outcome.results if r.branch not in reference]
            results += judged
            if tier_done is not None and judged:
                more = any(
                    s.name not in later.skipped
                    for later in selected[index + 1 :]
                    for s in later.scenarios
                )
                tier_done(chosen.tier.name, judged, more)
    finally:
        if cluster is not None:
            cluster.close()
    evidence = make_evidence(workspace, selected, outcomes, results, context.reading, request.out)
    shard = (
        ShardEvidence(index=request.shard[0], count=request.shard[1], order=order)
        if request.shard
        else None
    )
    evidence = evidence.model_copy(
        update={
            "baseline": context.baseline,
            "shard": shard,
            "reference_branches": reference,
            "probe_environ_sha256": canonical_hash(passed_environ()),
            "protection": protection_evidence(),
            "coverage": coverage_evidence(
                workspace, context.baseline, traced_by_branch(outcomes), plan
            ),
        }
    )
    return Comparison(workspace, evidence, outcomes, selected)


@dataclass(frozen=True)
class BranchMeasurer:
    """The run layer's `tiers.base.Measurer`: probes and test sessions in every branch
    environment."""

    context: RunContext

    @property
    def reading(self) -> Reading:
        return self.context.reading

    @property
    def baseline(self) -> str:
        return self.context.baseline

    @property
    def setup_errors(self) -> Mapping[str, str | None]:
        return self.context.setup_errors

    def run_probes(
        self, tier: ProbeTier[Any], scenarios: Sequence[ScenarioBase]
    ) -> dict[str, BranchRun]:
        context = self.context
        names = [b.name for b in context.workspace.branches if b.env is not None]
        if context.cluster is not None:
            jobs = context.jobs or len(names)
            context.log(
                f"{tier.name} tier: {len(names)} branch probe(s) {context.cluster.describe()}"
            )
        else:
            jobs, why = probes_at_a_time(tier, len(names), context.jobs)
            context.log(f"{tier.name} tier: {len(names)} branch probe(s), {jobs} at a time ({why})")
        with context.progress(tier.name, names) as callback:
            delivered = measure_tier(context, tier, scenarios, callback, jobs)
        for branch, run in delivered.items():
            context.log(f"{branch}: {tier.name} tier {_outcome(run)} ({len(run.runs)} runs)")
        return delivered

    def run_suites(
        self, tier: SuiteTier[Any], scenario: ScenarioIdentity
    ) -> TierOutcome[BranchRun]:
        names = [b.name for b in self.context.workspace.branches if b.env is not None]
        if self.context.cluster is not None:
            self.context.log(
                f"{tier.name} tier: its test sessions run on this machine "
                "(--executor ray runs the probes of probe tiers)"
            )
        with self.context.progress(tier.name, names) as callback:
            return measure_suites(self.context, tier, scenario, callback)


def traced_by_branch(
    outcomes: Mapping[str, TierOutcome[BranchRun]],
) -> dict[str, dict[str, ProbeCoverage | None]]:
    """branch -> tier -> what that branch's probe of that tier traced."""
    traced: dict[str, dict[str, ProbeCoverage | None]] = {}
    for tier, outcome in outcomes.items():
        for branch, run in outcome.probes.items():
            traced.setdefault(branch, {})[tier] = run.coverage
        for branch, coverage in outcome.coverage.items():
            traced.setdefault(branch, {})[tier] = coverage
    return traced


def take_shard(selected: list[TierScenarios], index: int, count: int) -> list[TierScenarios]:
    """The `index`-th (1-based) of `count` slices: every `count`-th scenario of the selection, in
    order.

    Whole scenarios, every branch: a scenario's verdicts compare its branches with each other and
    the baseline, so a slice judges exactly as the whole run does.
    """
    names = [s.name for chosen in selected for s in chosen.scenarios]
    mine = set(names[index - 1 :: count])
    if not mine:
        raise ConfigError(
            f"shard {index}/{count} has no scenario: only {len(names)} are selected",
            f"use at most {len(names)} shards",
        )
    out = []
    for chosen in selected:
        kept = [s for s in chosen.scenarios if s.name in mine]
        if kept:
            out.append(TierScenarios(chosen.tier, kept))
    return out


def check_request(config: Config, request: CompareRequest) -> None:
    """What `compare` refuses before building anything (the scenarios, `-k`, the branches named),
    checked before a command clears its `--out`: a usage error touches nothing there."""
    select_scenarios(config, request.tiers, request.select, request.scenarios)
    named, _reference = with_baseline(config, request.branches, request.baseline)
    branch_specs(config, named)


def with_baseline(
    config: Config, names: list[str] | None, wanted: str | None
) -> tuple[list[str] | None, list[str]]:
    """The branches to prepare, and those among them measured only as the reference: naming branches
    still measures the baseline, so a crash or a hang is judged the same whichever branches are
    named."""
    baseline = wanted or config.baseline
    if names is None or not baseline or config.branch(baseline) is None:
        return names, []
    if baseline in {
        branch_spec(config, name).name for name in names
    }:  # named, or a ref that resolves to it
        return names, []
    return [*names, baseline], [baseline]


def refusals_before_build(
    selected: list[TierScenarios], config: Config, wanted_baseline: str | None
) -> Callable[[git.Repo, list[ResolvedBranch]], None]:
    """Each selected tier's check of its scenarios against the baseline commit's files, for
    `prepare` to call once refs resolve and before anything is built."""

    def refuse(repo: git.Repo, resolved: list[ResolvedBranch]) -> None:
        name = baseline_among([b.name for b in resolved], config, wanted_baseline)
        baseline = next(b for b in resolved if b.name == name)
        tree = CommitTree(repo, baseline.sha, baseline.name)
        for chosen in selected:
            chosen.tier.refuse_before_build(chosen.scenarios, tree)

    return refuse


def select_scenarios(
    config: Config, tier_names: list[str] | None, select: str | None, names: list[str] | None = None
) -> list[TierScenarios]:
    """Load and validate the scenarios first: a bad file or `-k` stops the run before anything is
    built."""
    chosen_tiers = (
        [tiers.get(name) for name in tier_names] if tier_names else list(tiers.REGISTRY.values())
    )
    matcher = compile_selection(select) if select is not None else None
    chosen: list[TierScenarios] = []
    loaded = {tier.name: tier.scenarios(config, explicit=bool(tier_names)) for tier in chosen_tiers}
    for tier in chosen_tiers:
        scenarios = loaded[tier.name]
        if scenarios is None:
            continue
        if matcher is not None:
            scenarios = [s for s in scenarios if matcher(s.name)]
        if names is not None:
            scenarios = [s for s in scenarios if s.name in names]
        if scenarios:
            chosen.append(TierScenarios(tier, scenarios))
    if not chosen:
        if select is not None:
            known = sorted({s.name for found in loaded.values() for s in found or []})
            raise ConfigError(
                f"no scenario matches -k {select!r}",
                "use words from the scenario names"
                + (
                    f": {', '.join(known)}"
                    if known
                    else f" (none found under {config.scenarios_dir})"
                ),
            )
        raise ConfigError(
            f"no scenario found under {config.scenarios_dir}", "check `scenarios_dir` in the config"
        )
    _check_unique_names(chosen)
    return chosen


def _check_unique_names(chosen: list[TierScenarios]) -> None:
    """Results, evidence and the gate key scenarios by name alone, so names must not repeat across
    tiers."""
    seen: dict[str, str] = {}
    for group in chosen:
        for scenario in group.scenarios:
            if scenario.name in seen:
                raise ConfigError(
                    f"scenario name {scenario.name!r} is used in both "
                    f"the {seen[scenario.name]} and the {group.tier.name} tier",
                    f"rename one of them (e.g. prefix the file name with `{group.tier.name}-`)",
                )
            seen[scenario.name] = group.tier.name


def _mark_unavailable(chosen: TierScenarios, base: dict, log: Log) -> None:
    for scenario in chosen.scenarios:
        reason = chosen.tier.unavailable(scenario, base)
        if reason:
            chosen.skipped[scenario.name] = reason
            log(f"{scenario.name}: not run on this base: {reason}")


def make_job(
    tier: ProbeTier[Any],
    scenarios: Sequence[ScenarioBase],
    run_timeout_s: float | None,
    work_dir: Path | None = None,
) -> Job:
    """The JOB.json the tier's probe reads; `work_dir` is where it builds its model folders."""
    return {
        "protocol": PROTOCOL_VERSION,
        "entry": tier.probe_entry,
        "work_dir": str(work_dir or paths.models_dir()),
        "run_timeout_s": run_timeout_s,
        "scenarios": [s.job_scenario() for s in scenarios],
    }


def probes_at_a_time(tier: ProbeTier[Any], branches: int, jobs: int | None) -> tuple[int, str]:
    """`--jobs`, or the tier's default for these branches and cores capped by the memory
    available."""
    if jobs is not None:
        return max(1, jobs), "--jobs"
    cores = os.cpu_count() or 1
    wanted = tier.default_jobs(branches, cores)
    available = available_memory_mb()
    chosen = probes_at_once(wanted, tier.probe_memory_mb, available)
    memory = (
        f"{available / 1024:.1f} GB available, ~{tier.probe_memory_mb} MB per probe"
        if available
        else "memory unknown"
    )
    return chosen, f"{cores} cores, {memory}"


def _outcome(run: BranchRun) -> str:
    if run.reused is not None:
        return (
            f"reused from the result cache (measured {run.reused.measured_at} "
            f"in {run.reused.duration_s:.1f} s, key {run.reused.key[:12]}; "
            "--no-cache measures it again)"
        )
    return (f"failed: {run.error}" if run.error else "done") + f" in {run.duration_s:.1f} s"


def measure_tier(
    context: RunContext,
    tier: ProbeTier[Any],
    scenarios: Sequence[ScenarioBase],
    progress: Progress | None = None,
    jobs: int | None = None,
    shared: SharedServer | None = None,
) -> dict[str, BranchRun]:
    """Run one tier's probe in every branch that has an environment, concurrently (forked from one
    warm interpreter with `context.fork`, `run.probes.forking`, or from a `shared` one kept by the
    caller); a branch whose output for this very job is in the result cache is read from there
    instead (`run.cache.results`)."""
    workspace, cache, work_dir = context.workspace, context.cache, context.probe_dir
    branches = [(b.name, b.env) for b in workspace.branches if b.env is not None]
    job = make_job(tier, scenarios, context.timeouts.run_s)
    if context.trace is not None:
        context.trace.add_to(job)
    # The baseline's coverage is never judged (the others' changes are measured against it): its
    # result is keyed and reused whatever the other branches change, and traced or not.
    jobs_by_branch = {
        name: cast(Job, without_trace(job))
        if name == context.baseline and not (context.trace and context.trace.everywhere)
        else job
        for name, _env in branches
    }
    keys = {
        name: result_key(
            tier.name,
            jobs_by_branch[name],
            env.fingerprint,
            workspace.base.fingerprint,
            {s.name: s.sha256 for s in scenarios},
            context.timeouts.probe_s,
            context.timeouts.exit_s,
        )
        for name, env in branches
    }
    reused: dict[str, BranchRun] = {}
    if cache is not None:
        for name, _env in branches:
            found = cache.load(
                keys[name], jobs_by_branch[name], name, tier.name, work_dir, context.log
            )
            if found is not None:
                reused[name] = found
                if progress is not None:
                    progress(
                        name, len(found.runs), len(found.runs), "reused from the result cache", ""
                    )
    if context.cluster is not None:
        probes = TierProbes(
            tier.name,
            job,
            context.timeouts.probe_s,
            context.timeouts.exit_s,
            tier.probe_cpus,
            tier.probe_gpus(workspace.base.fingerprint),
            tier.probe_memory_mb,
        )
        remote = [(name, env) for name, env in branches if name not in reused]
        measured = (
            context.cluster.run_branches(remote, probes, work_dir, progress, jobs) if remote else {}
        )
        _store(context, measured, keys)
        return {name: reused.get(name) or measured[name] for name, _env in branches}
    targets = [(name, env.python) for name, env in branches if name not in reused]
    measured = (
        run_branches(
            targets,
            job,
            tier.name,
            work_dir,
            context.timeouts.probe_s,
            jobs or probes_at_a_time(tier, len(targets), context.jobs)[0],
            progress,
            # One probe has nothing to share (the server's warm-up would only come on top of its
            # import), unless this process keeps servers for later runs.
            fork=context.fork and (len(targets) > 1 or keeps_fork_servers()),
            log=context.log,
            exit_s=context.timeouts.exit_s,
            shared=shared,
            share_key=share_key_of(context.workspace.base.path),
        )
        if targets
        else {}
    )
    _store(context, measured, keys)
    return {name: reused.get(name) or measured[name] for name, _env in branches}


def _store(context: RunContext, measured: Mapping[str, BranchRun], keys: Mapping[str, str]) -> None:
    """Clean measurements into the result cache (keyed without the machine that measured them)."""
    if context.cache is not None:
        for name, run in measured.items():
            context.cache.store(keys[name], run, context.log)


def check_placement(config: Config, named: list[str] | None, cluster: ClusterRequest) -> None:
    """Every `--ray-place` names a compared branch (a typo would silently place nothing)."""
    compared = [s.name for s in branch_specs(config, named)]
    for branch in cluster.place:
        if branch not in compared:
            raise ConfigError(
                f"--ray-place names {branch!r}, which is not compared",
                f"name one of: {', '.join(compared)}",
            )


def _transplant_evidence(info: TransplantInfo) -> TransplantEvidence:
    """The evidence's copy of a transplant: every recorded field, and the (original, written) commit
    pairs."""
    plain = {
        name: getattr(info, name) for name in TransplantEvidence.model_fields if name != "replayed"
    }
    return TransplantEvidence(
        **plain, replayed=[ReplayedCommit(original=o, sha=sha) for o, sha in info.replayed]
    )


def make_evidence(
    workspace: Workspace,
    selected: list[TierScenarios],
    outcomes: Mapping[str, TierOutcome[BranchRun]],
    results: list[Result],
    reading: Reading,
    out: Path = Path("out"),
) -> Evidence:
    """The evidence of one comparison; `out` is where evidence.json goes (probe files are named
    relative to it)."""
    base_fp = workspace.base.fingerprint
    branches = {}
    for b in workspace.branches:
        r = b.resolved
        branches[b.name] = BranchEvidence(
            ref=r.ref,
            sha=r.sha,
            ref_sha=r.ref_sha,
            patches={str(p.path.name): p.sha256 for p in r.patches},
            transplants=[_transplant_evidence(t) for t in r.transplants],
            stack=list(r.stack),
            fingerprint=b.env.fingerprint if b.env else {"error": b.error},
        )
    scenarios = {
        s.name: ScenarioEvidence(
            file=f"{chosen.tier.folder}/{s.file}" if chosen.tier.folder else s.file,
            sha256=s.sha256,
            seed=s.seed,
            tier=chosen.tier.name,
            statement=s.statement,
            conditions=s.conditions,
            skipped=chosen.skipped.get(s.name),
        )
        for chosen in selected
        for s in chosen.scenarios
    }
    # Per-step records stay in the probe's JSONL next to the reports; the evidence keeps each
    # run's totals, outputs and notes, which is what re-checking a verdict needs.
    runs: dict[str, list[ProbeRun]] = {}
    for outcome in outcomes.values():
        for name, run in outcome.probes.items():
            runs.setdefault(name, []).extend(r.model_copy(update={"steps": []}) for r in run.runs)
    tests: list[TestRecord] = [r for o in outcomes.values() for r in o.tests]
    test_sources = {k: v for o in outcomes.values() for k, v in o.test_sources.items()}
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
        probes=probe_files({tier: o.probes for tier, o in outcomes.items()}, out),
        tests=tests,
        test_sources=test_sources,
    )


def probe_files(delivered: Mapping[str, Mapping[str, BranchRun]], out: Path) -> list[ProbeFiles]:
    """Each probe's job and records, hashed, with their nonce (`ProbeFiles`): what `show` trusts
    later."""
    found = []
    for tier, per_branch in delivered.items():
        for name, run in per_branch.items():
            if (
                run.job_path is None
                or run.records_path is None
                or not run.records_path.is_file()
                or not run.job_path.is_file()
            ):  # a FIFO in their place is not read
                continue
            found.append(
                ProbeFiles(
                    branch=name,
                    tier=tier,
                    job=_relative(run.job_path, out),
                    job_sha256=sha256_file(run.job_path),
                    records=_relative(run.records_path, out),
                    records_sha256=sha256_file(run.records_path),
                    nonce=run.nonce,
                    exited_cleanly=run.exited_cleanly,
                    reused=run.reused,
                    launch=None if run.reused else run.launch,
                    launch_note=run.launch_note,
                    outcome=run.outcome,
                    node=run.node,
                )
            )
    return found


def _relative(path: Path, out: Path) -> str:
    return Path(os.path.relpath(path.resolve(), out.resolve())).as_posix()
