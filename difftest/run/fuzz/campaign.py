"""`difftest fuzz`: generated scenarios, every branch's real scheduler, `run`'s judging, shrunk
findings.

    strategy (tier) -> scenario mapping -> the tier's loader validation -> one job
      -> a warm probe per branch (`run.fuzz.warm_probe`) -> records checked as `run` checks them
      -> judged as `run` judges (oracle + invariants; or the `--against` branch's totals)
      -> kinds of failure (core.fuzz) -> the search (search.py: Hypothesis, seeded, shrinking)
      -> per finding: a scenario file under <out>/found/<tier>/, its evidence,
         and a config to re-run it

A generated scenario that the loader refuses is a bug in the strategy, never a
finding: the search stops with that (shrunk) scenario. Every example is probed
once (outcomes are cached by scenario), so the search's later rounds and the
shrinker's replays cost no probe time.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from difftest import tiers
from difftest.build.envs.branch import BranchEnv
from difftest.build.workspace import Workspace, branch_spec, branch_specs, prepare
from difftest.core.config import Config
from difftest.core.errors import ConfigError
from difftest.core.evidence import Evidence, atomic_write_text, write_evidence
from difftest.core.fuzz import Finding, FuzzReport, Kind, Observation, observations
from difftest.core.records import ProbeRun, Reading, Result, Totals
from difftest.probe.protocol import Job
from difftest.run.cluster.connect import Cluster, ClusterRequest, connect
from difftest.run.cluster.executor import Resources
from difftest.run.coverage.tracing_job import TracePlan, plan_tracing
from difftest.run.fuzz.ray_warm import RayWarmProcess
from difftest.run.fuzz.reach import FuzzReach
from difftest.run.fuzz.search import Found, SearchResult, search
from difftest.run.fuzz.warm_probe import WarmProbe, WarmProbeLimits
from difftest.run.pipeline import TierScenarios, check_placement, make_evidence, make_job
from difftest.run.probes.runner import (
    BranchRun,
    share_key_of,
    shared_fork_server,
    stop_all_probes,
)
from difftest.tiers.base import TierOutcome
from difftest.tiers.common.scenario import ScenarioBase, read_scenario_file, scenario_file_text
from difftest.tiers.door import JUDGED_ROLES, judge_runs, judge_scenario
from difftest.tiers.probe_tier import ProbeTier

Log = Callable[[str], None]
#: (examples run in this round, examples asked for or None, round, findings so far)
FuzzProgress = Callable[[int, int | None, int, int], None]
#: The name every generated scenario carries while it is examined.
EXAMPLE_NAME = "fuzz-example"
FOUND = "found"
#: Where scenario files are explained (named in errors about a found file).
GUIDE = "scenarios/README.md"
SUMMARY = "fuzz.json"


class StrategyError(RuntimeError):
    """The tier's strategy generated a scenario its own loader refuses: a difftest bug, not a
    finding."""


@dataclass(frozen=True)
class FuzzRequest:
    branches: list[str] | None = None
    seed: int = 0
    #: Test cases per search round; None: bounded by `time_s` only.
    examples: int | None = 100
    time_s: float | None = None
    against: str | None = None
    reading: Reading | None = None
    out: Path = Path("out")
    fetch: bool = False
    #: Warm probes as actors on a Ray cluster (`--executor ray`); None: on this machine.
    cluster: ClusterRequest | None = None
    #: Actors per branch on the cluster; examples are spread over them in turn.
    actors: int = 1
    #: Fork each local warm probe from one warm interpreter (False: each starts fresh).
    fork: bool = True
    #: Steer the search toward the fuzzed branches' changed code (`hypothesis.target` on how much
    #: of it each example ran).
    guided: bool = False


@dataclass(frozen=True)
class OutFolder:
    """What fuzz asks of the module that owns `--out` (`difftest.reports`, which `run` may not
    import; the CLI passes it in): `clear` what an earlier command wrote there, once the request is
    known to be valid, and `record` each file fuzz writes (paths relative to `--out`), so that the
    next command clears exactly those. Nothing is ever removed because an earlier fuzz.json names
    it: that file is as writable by branch code as the rest of `--out`."""

    clear: Callable[[], object] = lambda: None
    record: Callable[[list[str]], None] = lambda _files: None


@dataclass
class FuzzOutcome:
    report: FuzzReport
    workspace: Workspace
    #: Finding name -> its evidence (also written to <out>/found/evidence/<name>/evidence.json).
    evidence: dict[str, Evidence] = field(default_factory=dict)
    #: Where each file written into `--out` is recorded.
    out: OutFolder = field(default_factory=OutFolder)


def fuzzable_tier() -> ProbeTier[Any]:
    """The first registered tier that provides a fuzz strategy."""
    for tier in tiers.probe_tiers():
        if tier.fuzz_strategy() is not None:
            return tier
    raise ConfigError("no tier can be fuzzed", "a tier must provide `fuzz_strategy()`")


def fuzz(
    config: Config,
    request: FuzzRequest,
    log: Log = lambda _m: None,
    progress: FuzzProgress | None = None,
    out: OutFolder | None = None,
) -> FuzzOutcome:
    """Search for failures of every branch, shrink them, write them as scenario files; never raises
    for a branch. `out` clears `--out` first and records each file written there (default:
    neither)."""
    tier = fuzzable_tier()
    if request.out.exists() and not request.out.is_dir():
        raise ConfigError(
            f"--out {request.out}: not a folder",
            "name a folder (it is created if it does not exist)",
        )
    fuzzed, against = _branch_names(config, request)
    if request.cluster is not None:
        check_placement(config, fuzzed + ([against] if against else []), request.cluster)
    # Connected before anything is built: a wrong address costs seconds, not a base build.
    cluster = connect(request.cluster.address) if request.cluster is not None else None
    try:
        return _fuzz(
            config, request, tier, fuzzed, against, cluster, log, progress, out or OutFolder()
        )
    finally:
        if cluster is not None:
            cluster.close()


def _fuzz(
    config: Config,
    request: FuzzRequest,
    tier: ProbeTier[Any],
    fuzzed: list[str],
    against: str | None,
    cluster: Cluster | None,
    log: Log,
    progress: FuzzProgress | None,
    out: OutFolder,
) -> FuzzOutcome:
    probed = fuzzed + ([against] if against else [])
    # What each branch's changed lines are judged against: the --against branch, else the
    # config's baseline, built (never probed) where it is not among the probed branches.
    reference = against or _config_baseline(config) or probed[0]
    workspace = prepare(
        config,
        probed + ([reference] if reference not in probed else []),
        do_fetch=request.fetch,
        log=log,
    )
    reading = request.reading or config.oracle.reading
    report = FuzzReport(
        command=sys.argv[:],
        tier=tier.name,
        seed=request.seed,
        examples=request.examples,
        time_s=request.time_s,
        reading=reading,
        against=against,
        branches=fuzzed,
        out=str(request.out),
        guided=request.guided,
    )
    outcome = FuzzOutcome(report, workspace, out=out)
    out.clear()
    # Every job traces the compared branches' changed files, the warm-up's too (before vLLM is
    # imported), as `run`'s jobs do.
    plan = plan_tracing(workspace, log)
    baseline = _baseline(config, probed)
    reach = FuzzReach(workspace, reference, plan, tier.name)
    limits = WarmProbeLimits(start_s=config.timeouts.probe_s, run_s=config.timeouts.run_s)
    mine = [b for b in workspace.branches if b.name in probed]
    ready = {b.name: b.env for b in mine if b.env is not None}
    report.unmeasured.update({b.name: b.error or "no environment" for b in mine if b.env is None})
    with ExitStack() as stack:
        if cluster is not None:
            log(f"{tier.name} tier: warm probes as actors on the Ray cluster at {cluster.address}")
        fork = (
            stack.enter_context(
                shared_fork_server(
                    ready[_server_branch(ready, against, config.baseline)].python,
                    tier.name,
                    request.out / "probe",
                    config.timeouts.probe_s,
                    len(ready),
                    request.fork,
                    log,
                    share_key=share_key_of(workspace.base.path),
                )
            )
            if cluster is None and ready
            else None
        )
        servers = {
            name: stack.enter_context(
                WarmProbe(
                    name,
                    env.python,
                    tier.name,
                    request.out / "probe",
                    limits,
                    len(ready),
                    process=None
                    if cluster is None or request.cluster is None
                    else _actors(cluster, request, workspace, env, tier, limits, len(ready), log),
                    fork=fork,
                )
            )
            for name, env in ready.items()
        }
        prober = Prober(
            servers,
            stack.enter_context(ThreadPoolExecutor(max_workers=max(1, len(servers)))),
            plan,
            reach.traces,
        )
        # Unwound first (last in): on Ctrl-C or SIGTERM the warm probes are killed before the pool
        # waits for its threads, which would otherwise wait on a stuck probe for up to `probe_s`.
        stack.push(_stop_probes_on_error)
        for name, why in prober.warm_up(tier, reach).items():
            report.unmeasured[name] = why
            log(f"{name}: cannot be fuzzed: {why}")
        if against is not None and against in report.unmeasured:
            for name in fuzzed:
                report.unmeasured.setdefault(
                    name, f"the --against branch {against} could not be measured"
                )
        judged = [b for b in fuzzed if b not in report.unmeasured]
        if judged:
            examiner = Examiner(
                tier,
                prober,
                judged,
                against,
                reading,
                config.timeouts.run_s,
                baseline,
                reach,
            )
            _search(examiner, outcome, config, request, log, progress)
        report.probe_starts = {name: s.starts for name, s in servers.items()}
    report.coverage = reach.evidence()
    report.first_reached = reach.first_reached()
    request.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(request.out / SUMMARY, report.model_dump_json(indent=1))
    out.record([SUMMARY])
    return outcome


def _server_branch(ready: dict[str, Any], against: str | None, baseline: str | None) -> str:
    """Whose interpreter starts the fork server: the branch every search probes (`--against`, else
    the baseline) where it is among them, so that one server serves search after search."""
    for name in (against, baseline):
        if name in ready:
            return name
    return next(iter(ready))


def _actors(
    cluster: Cluster,
    request: FuzzRequest,
    workspace: Workspace,
    env: BranchEnv,
    tier: ProbeTier[Any],
    limits: WarmProbeLimits,
    branches: int,
    log: Log,
) -> RayWarmProcess:
    """A branch's warm probes as actors on the cluster (`run.fuzz.ray_warm`)."""
    assert request.cluster is not None
    resources = Resources(
        float(tier.probe_cpus),
        tier.probe_gpus(workspace.base.fingerprint),
        tier.probe_memory_mb,
        request.cluster.place.get(env.name),
    )
    # An actor holds its cores for the whole search: every branch's actors must fit at once, or
    # the last ones would wait for a core forever (a warm probe works only while an example plays).
    nodes = cluster.nodes()
    largest = max((n.resources.get("CPU", 0) for n in nodes), default=1)
    total = sum(n.resources.get("CPU", 0) for n in nodes)
    share = total / max(1, branches * request.actors)
    resources = replace(resources, cpus=max(min(resources.cpus, largest, share), 0.001))
    return RayWarmProcess(
        cluster,
        workspace.config.base,
        workspace.base,
        env,
        tier.name,
        limits,
        resources,
        actors=request.actors,
        log=log,
    )


def _search(
    examiner: Examiner,
    outcome: FuzzOutcome,
    config: Config,
    request: FuzzRequest,
    log: Log,
    progress: FuzzProgress | None,
) -> None:
    report = outcome.report
    compared = f"against {examiner.against}" if examiner.against else f"{examiner.reading} reading"
    log(
        f"fuzzing {', '.join(examiner.branches)} on the {examiner.tier.name} tier "
        f"(seed {request.seed}, {compared})"
    )
    examiner.reach.start_clock()
    result = search(
        examiner.tier.fuzz_strategy(),
        examiner.examine,
        seed_value=request.seed,
        examples=request.examples,
        deadline_s=request.time_s,
        on_call=_progress_adapter(progress, request.examples),
        score=examiner.score if request.guided else None,
    )
    report.searched, report.calls, report.rounds = result.examples, result.calls, result.rounds
    report.elapsed_s, report.stopped, report.probed = (
        round(result.elapsed_s, 3),
        result.stopped,
        examiner.probed,
    )
    report.stop_reason = result.stop_reason
    if result.stopped == "flaky":
        log(f"the search stopped: {result.stop_reason}")
    _write_findings(outcome, result, examiner, config, request, log)


# -- branches ---------------------------------------------------------------------


def _branch_names(config: Config, request: FuzzRequest) -> tuple[list[str], str | None]:
    """The branches to fuzz and the one to compare them with (names as the workspace gives them)."""
    against = branch_spec(config, request.against).name if request.against else None
    if request.branches:
        fuzzed = [s.name for s in branch_specs(config, request.branches)]
    else:
        fuzzed = [b.name for b in config.branches if b.name != against]
    if against is not None and against in fuzzed:
        raise ConfigError(
            f"branch {against!r} is both fuzzed and the --against branch",
            "list the branches to compare with it, without it "
            "(e.g. `difftest fuzz --against main BRANCH`)",
        )
    if not fuzzed:
        raise ConfigError("no branch to fuzz", "name a branch besides the --against one")
    return fuzzed, against


def _baseline(config: Config, probed: list[str]) -> str:
    """The probed branch the oracle's judging names as the baseline."""
    return config.baseline if config.baseline in probed else probed[0]


def _config_baseline(config: Config) -> str | None:
    """The config's baseline, as the workspace names it."""
    return branch_spec(config, config.baseline).name if config.baseline else None


# -- probing ------------------------------------------------------------------------


def _stop_probes_on_error(exc_type: type[BaseException] | None, _exc: object, _tb: object) -> bool:
    """On an interrupt (Ctrl-C, SIGTERM: not an ordinary error), every probe is killed at once, as
    `run`'s are; the command line then says how many and exits 130."""
    if exc_type is not None and not issubclass(exc_type, Exception):
        stop_all_probes()
    return False


class Prober:
    """Every branch's warm probe, asked the same job at once."""

    def __init__(
        self,
        servers: dict[str, WarmProbe],
        pool: ThreadPoolExecutor,
        trace: TracePlan,
        traces: Callable[[str], bool] = lambda _branch: True,
    ) -> None:
        self.servers = servers
        self.pool = pool
        self.trace = trace
        #: Whether a branch's next job is traced (`FuzzReach.traces`).
        self.traces = traces

    def play(self, job: Job, keep: Path | None = None) -> dict[str, BranchRun]:
        """Every branch's answer (the job traces what the campaign traces, in the branches that
        still want it); with `keep`, each probe's job and records are also written there."""
        futures = {
            name: self.pool.submit(server.play, self._job_for(name, job), keep)
            for name, server in self.servers.items()
        }
        return {name: f.result() for name, f in futures.items()}

    def _job_for(self, branch: str, job: Job) -> Job:
        mine: Job = {**job}
        mine.pop("trace", None)
        if self.traces(branch):
            self.trace.add_to(mine)
        return mine

    def warm_up(self, tier: ProbeTier[Any], reach: FuzzReach) -> dict[str, str]:
        """Start every probe (vLLM imported) with an empty job; the branches whose probe cannot
        start, why. What the import executed counts as example 0."""
        job: Job = make_job(tier, [], None)
        delivered = self.play(job)
        reach.add(0, delivered)
        failed = {
            name: run.error or "no header" for name, run in delivered.items() if run.header is None
        }
        for name in failed:
            self.servers.pop(name).close()
        return failed


class Examiner:
    """Judges generated scenarios in every branch; caches the kinds each scenario shows."""

    def __init__(
        self,
        tier: ProbeTier[Any],
        prober: Prober,
        branches: list[str],
        against: str | None,
        reading: Reading,
        run_s: float,
        baseline: str,
        reach: FuzzReach,
    ) -> None:
        self.tier = tier
        self.prober = prober
        self.branches = branches
        self.against = against
        self.reading = reading
        self.run_s = run_s
        self.baseline = baseline
        self.reach = reach
        self.cache: dict[str, dict[Kind, Observation]] = {}
        #: Scenario -> how much of the fuzzed branches' changed code it ran (`FuzzReach.score`).
        self.scores: dict[str, float] = {}
        self.probed = 0

    def examine(self, raw: dict[str, Any]) -> dict[Kind, Observation]:
        key = json.dumps(raw, sort_keys=True)
        if key not in self.cache:
            scenario = self.scenario(raw)
            delivered = self.probe(scenario)
            self.probed += 1
            self.reach.add(self.probed, delivered)
            self.scores[key] = self.reach.score(delivered)
            self.cache[key] = {o.kind: o for o in self.judge(scenario, delivered)[0]}
        return self.cache[key]

    def score(self, raw: dict[str, Any]) -> float:
        """How much of the fuzzed branches' changed code the (examined) scenario ran."""
        return self.scores.get(json.dumps(raw, sort_keys=True), 0.0)

    def scenario(self, raw: dict[str, Any], name: str = EXAMPLE_NAME) -> ScenarioBase:
        try:
            return self.tier.parse_scenario({**raw, "name": name}, f"<generated {name}>")
        except ConfigError as exc:
            raise StrategyError(
                f"the {self.tier.name} tier's fuzz strategy generated a scenario "
                f"its loader refuses: {exc.problem}\n{json.dumps(raw)}"
            ) from None

    def probe(self, scenario: ScenarioBase, keep: Path | None = None) -> dict[str, BranchRun]:
        return self.prober.play(make_job(self.tier, [scenario], self.run_s), keep)

    def judge(
        self, scenario: ScenarioBase, delivered: dict[str, BranchRun]
    ) -> tuple[list[Observation], dict[str, list[Result]]]:
        """Every fuzzed branch's observations (against the oracle or the --against branch) and its
        results."""
        runs = {name: run.runs for name, run in delivered.items()}
        by_oracle = (
            judge_scenario(self.tier, scenario, delivered, self.reading, self.baseline)
            if self.against is None
            else {}
        )
        found: list[Observation] = []
        results: dict[str, list[Result]] = {}
        for branch in self.branches:
            if self.against is None:
                results[branch] = by_oracle[branch]
                found += observations(results[branch], runs[branch])
            else:
                results[branch] = self._judge_against(scenario, branch, runs)
                found += observations(results[branch], runs[branch], self.against)
        return found, results

    def as_run_judges(
        self, scenario: ScenarioBase, delivered: dict[str, BranchRun]
    ) -> list[Result]:
        """Every probed branch's results by the oracle: what `difftest run` on the scenario's file
        gives."""
        judged = judge_scenario(self.tier, scenario, delivered, self.reading, self.baseline)
        return [r for name in delivered for r in judged[name]]

    def _judge_against(
        self, scenario: ScenarioBase, branch: str, runs: dict[str, list[ProbeRun]]
    ) -> list[Result]:
        """Differences from the --against branch: its totals are the expected ones, its own
        violations and its own differences beyond the totals (per-request metrics, log intervals,
        exported token counts) are not this branch's, and a run it could not measure is not
        judged."""
        assert self.against is not None
        reference = {r.label: r for r in runs[self.against] if r.role in JUDGED_ROLES}
        comparable = [
            r
            for r in runs[branch]
            if r.role not in JUDGED_ROLES or (r.label in reference and reference[r.label].measured)
        ]
        expected: dict[str, Totals] = {
            label: r.totals for label, r in reference.items() if r.totals is not None
        }
        baseline_violations = self.tier.invariants(scenario, list(reference.values()))
        baseline_differences = {
            label: self.tier.response_differences(scenario, r, self.reading)
            for label, r in reference.items()
            if r.measured
        }
        return judge_runs(
            self.tier,
            scenario,
            branch,
            comparable,
            self.reading,
            expected=expected,
            baseline_violations=baseline_violations,
            baseline_differences=baseline_differences,
        )


def _progress_adapter(
    progress: FuzzProgress | None, examples: int | None
) -> Callable[[SearchResult[Any]], None] | None:
    if progress is None:
        return None
    state = {"round": 0, "calls": 0}

    def on_call(result: SearchResult[Any]) -> None:
        if result.rounds != state["round"]:
            state["round"], state["calls"] = result.rounds, 0
        state["calls"] += 1
        progress(state["calls"], examples, result.rounds, len(result.found))

    return on_call


# -- findings -------------------------------------------------------------------------


def _write_findings(
    outcome: FuzzOutcome,
    result: SearchResult[Kind],
    examiner: Examiner,
    config: Config,
    request: FuzzRequest,
    log: Log,
) -> None:
    """Each finding as a scenario file, loaded back with the tier's loader, probed again for its
    evidence."""
    if not result.found:
        return
    tier = examiner.tier
    found_dir = request.out / FOUND
    scenario_dir = found_dir / tier.folder
    scenario_dir.mkdir(parents=True, exist_ok=True)
    outcome.report.baseline = _write_config(config, outcome.workspace, found_dir)
    outcome.out.record([f"{FOUND}/branches.yaml"])
    for index, found in enumerate(result.found, 1):
        name = _finding_name(index, found)
        path = scenario_dir / f"{name}.yaml"
        path.write_text(
            scenario_file_text(
                {**found.value, "statement": _statement(found, request.seed)},
                _comments(name, found, request),
            )
        )
        outcome.out.record([str(path.relative_to(request.out))])
        # Read back as `run` reads it: the file is the finding, so it must load (name, hash) and
        # show it again.
        scenario = tier.parse_scenario(read_scenario_file(path, GUIDE), str(path))
        # The evidence folder is laid out as `run --out` lays one out, so `difftest show` reads its
        # steps.
        evidence_dir = found_dir / "evidence" / name
        delivered = examiner.probe(scenario, keep=evidence_dir / "probe")
        again, _ = examiner.judge(scenario, delivered)
        reproduced = set(found.kinds) <= {o.kind for o in again}
        if not reproduced:
            log(f"{name}: probing the written file again did not show every kind it was found for")
        evidence = make_evidence(
            outcome.workspace,
            [TierScenarios(tier, [scenario])],
            {tier.name: TierOutcome(probes=delivered)},
            examiner.as_run_judges(scenario, delivered),
            examiner.reading,
            out=evidence_dir,
        )
        evidence_path = write_evidence(evidence, evidence_dir / "evidence.json")
        outcome.out.record(_written_below(request.out, evidence_path, evidence_dir / "probe"))
        outcome.evidence[name] = evidence
        outcome.report.findings.append(
            Finding(
                name=name,
                file=str(Path(FOUND) / tier.folder / f"{name}.yaml"),
                evidence=str(evidence_path.relative_to(request.out)),
                observations=list(found.kinds.values()),
                round=found.round,
                found_after_s=round(found.first_seen_s, 3),
                reproduced=reproduced,
            )
        )


def _finding_name(index: int, found: Found[Kind]) -> str:
    first = next(iter(found.kinds))
    return f"fuzz-{index:02d}-" + "-".join(
        _slug(p) for p in (first.branch, first.verdict, first.what)
    )


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]+", "-", text).strip("-") or "x"


def _statement(found: Found[Kind], seed: int) -> str:
    first = next(iter(found.kinds))
    return (
        f"Found by difftest fuzz (seed {seed}): {first.branch} {first.verdict} ({first.what}), "
        "shrunk by Hypothesis."
    )


def _comments(name: str, found: Found[Kind], request: FuzzRequest) -> list[str]:
    against = f" --against {request.against}" if request.against else ""
    lines = [
        f"Found by `difftest fuzz --seed {request.seed}{against}` (search round {found.round}), "
        "shrunk by Hypothesis."
    ]
    lines += [
        f"{o.kind.branch}: {o.kind.verdict} in {o.label}: {o.reason}" for o in found.kinds.values()
    ]
    command = ["difftest", "run", "-c", str(request.out / FOUND / "branches.yaml"), "-k", name]
    lines.append(f"Reproduce: {shlex.join(command)}")
    return lines


def _write_config(config: Config, workspace: Workspace, found_dir: Path) -> str:
    """The config with these branches and `scenarios_dir` pointing here, all paths absolute; its
    baseline."""
    raw = json.loads(config.model_dump_json(exclude={"root"}))
    # Each branch pinned to the commit it was fuzzed at (its ref may move), with its patch series.
    raw["branches"] = [
        {
            "name": b.name,
            "ref": b.resolved.ref_sha,
            "patches": [str(p.path) for p in b.resolved.patches],
        }
        for b in workspace.branches
    ]
    names = [b.name for b in workspace.branches]
    raw["baseline"] = config.baseline if config.baseline in names else names[0]
    raw["scenarios_dir"] = "."
    raw["stats_paths"] = config.stats_paths
    text = (
        "# Written by difftest fuzz: the fuzzed branches "
        "(each at the commit it was fuzzed at) and\n"
        "# `scenarios_dir` pointing at the scenarios it found. "
        "`difftest run -c THIS_FILE` re-runs them.\n"
    )
    (found_dir / "branches.yaml").write_text(text + yaml.safe_dump(raw, sort_keys=False))
    return str(raw["baseline"])


def _written_below(out: Path, evidence: Path, probe: Path) -> list[str]:
    """A finding's evidence file and the probe files kept in `probe` (each branch's job and
    records), relative to `out`: what its evidence wrote, for the manifest."""
    kept = sorted(p for p in probe.iterdir() if p.is_file()) if probe.is_dir() else []
    return [str(p.relative_to(out)) for p in [evidence, *kept]]
