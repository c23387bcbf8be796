"""Measuring sets of a change's hunks: each applied alone on the base, as a branch of its own, and
judged through the one door.

A set is written as a patch series (`build.refs.hunks`), named by the sha256 of
that series, and resolved on the base's commit like any configured branch with
patches; its environment overlays the base as every branch environment does.
Sets are measured a batch at a time (`width` probes side by side), each batch
forked from the tier's one fork server, which the search keeps warm from its
first probe to its last (`run.probes.runner.shared_fork_server`); while a batch
probes, the sets that may be asked next are resolved and built on a second
thread (the only one using the repository meanwhile). What a set did
is kept by the content of its patch series, so a set asked about again costs
nothing; and a set whose files under `vllm/` are those of a branch already
measured (the whole change, whose other files no environment carries) takes that
branch's runs. The verdicts come from the tier's own `measure`, which judges
through `tiers.door` beside the base's runs: a subset is judged as `run` judges.

A set whose hunks do not apply, whose environment cannot be built, whose code
does not import or whose runs could not be measured is recorded as such, never
as a finding.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from git.exc import GitCommandError

from difftest import tiers
from difftest.build.envs.branch import OVERLAID, ensure_branch_env
from difftest.build.refs import ResolvedBranch, resolve_branch
from difftest.build.refs.hunks import Step, patch_bytes, subset_patches
from difftest.build.workspace import PreparedBranch, Workspace
from difftest.core.blame import BlameFinding, Outcome, Phase, describe, makes
from difftest.core.config import BranchSpec, branch_name_problem
from difftest.core.errors import EnvironmentBuildError, RefError
from difftest.core.records import Reading, Result
from difftest.core.verdicts import one_line
from difftest.run.context import RunContext
from difftest.run.pipeline import TierScenarios, measure_tier
from difftest.run.probes.runner import BranchRun, SharedServer
from difftest.tiers.base import TierOutcome
from difftest.tiers.probe_tier import ProbeTier

Log = Callable[[str], None]
#: Patch files of the sets tried are named `blame-<digest>-<step>.patch`: the name goes into the
#: commit difftest writes, so one set gets one commit (and one environment) on every machine.
PATCH_PREFIX = "blame-"


@dataclass
class Measured:
    """One set of hunks on one tier: its branch and probe (if it got that far) and its verdicts."""

    #: Counted from 1 in the order sets were first asked about (the try's number).
    number: int
    tier: str
    phase: Phase
    digest: str
    hunks: tuple[int, ...]
    branch: PreparedBranch | None = None
    run: BranchRun | None = None
    results: list[Result] = field(default_factory=list)
    #: Why nothing was measured: (outcome, one line); None when the runs were judged.
    problem: tuple[Outcome, str] | None = None
    #: The measured branch whose files under vllm/ it shares (its runs are that branch's).
    same_as: str = ""
    #: Its tree of vllm/ (what its environment carries), once resolved.
    tree: str | None = None
    probed: bool = False
    seconds: float = 0.0

    def for_scenario(self, scenario: str) -> list[Result]:
        return [r for r in self.results if r.scenario == scenario]

    def outcome(self, finding: BlameFinding) -> tuple[Outcome, str]:
        """What this set did for `finding`, and that in one line."""
        if self.problem is not None:
            return self.problem
        results = self.for_scenario(finding.scenario)
        text = describe(results)
        if self.same_as:
            text += f" (its files under vllm/ are {self.same_as}'s: its runs)"
        if not results or any(r.verdict == "error" for r in results):
            return "unmeasured", text
        return ("reproduces" if makes(finding, results) else "gone"), text


@dataclass
class _Door:
    """The tier's `Measurer` for one batch: the batch's probes and the base's, already run."""

    reading: Reading
    baseline: str
    setup_errors: Mapping[str, str | None]
    delivered: Mapping[str, BranchRun]

    def run_probes(self, tier: Any, scenarios: Sequence[Any]) -> Mapping[str, BranchRun]:
        return self.delivered

    def run_suites(self, tier: Any, scenario: Any) -> TierOutcome[BranchRun]:
        raise NotImplementedError("blame measures probe tiers only")


class SubsetProber:
    """Measures sets of hunks of `steps` on `base`, batch by batch, each set once."""

    def __init__(
        self,
        context: RunContext,
        base: PreparedBranch,
        base_runs: Mapping[str, BranchRun],
        steps: list[Step],
        selected: Mapping[str, TierScenarios],
        servers: Mapping[str, SharedServer],
        scratch: Path,
        prefix: str,
    ) -> None:
        self.context = context
        self.base = base
        #: tier -> the base's probe (every scenario the search judges).
        self.base_runs = base_runs
        self.steps = steps
        self.selected = selected
        self.servers = servers
        self.scratch = scratch
        self.prefix = prefix
        #: Every set measured, in the order first asked about.
        self.measured: list[Measured] = []
        self._by_key: dict[tuple[str, str], Measured] = {}
        #: tree of vllm/ -> a branch measured with it, per tier (its runs serve the same tree).
        self._trees: dict[tuple[str, str], tuple[PreparedBranch, BranchRun]] = {}
        #: Sets prepared ahead (resolved, environment built) while the batch before them probed.
        self._ready: dict[tuple[str, str], Measured] = {}
        self._ahead = ThreadPoolExecutor(max_workers=1, thread_name_prefix="difftest-blame-ahead")
        self._pending: Future[None] | None = None
        #: Every branch resolved for a set (refs to remove when the search ends).
        self.resolved: list[ResolvedBranch] = []
        self.probes = 0

    # -- what a set is -------------------------------------------------------------

    def patches(self, hunks: Sequence[int]) -> list[tuple[int, str]]:
        return subset_patches(self.steps, hunks)

    def digest(self, hunks: Sequence[int]) -> str:
        """sha256 of the set's patch series: what it is cached by."""
        series = [[index, text] for index, text in self.patches(hunks)]
        return hashlib.sha256(json.dumps(series).encode()).hexdigest()

    def branch_name(self, digest: str) -> str:
        return f"{self.prefix}-{digest[:10]}"

    def patch_files(self, hunks: Sequence[int]) -> list[Path]:
        """The set's patch series, written into the scratch folder (one file per step)."""
        digest = self.digest(hunks)
        self.scratch.mkdir(parents=True, exist_ok=True)
        files = []
        for index, text in self.patches(hunks):
            path = self.scratch / f"{PATCH_PREFIX}{digest[:12]}-{index + 1}.patch"
            path.write_bytes(patch_bytes(text))
            files.append(path)
        return files

    # -- measuring -------------------------------------------------------------------

    def seed(self, tier: str, branch: PreparedBranch, run: BranchRun) -> None:
        """A branch measured already (the whole branch): a set whose files under vllm/ are its files
        takes its runs instead of a probe."""
        tree = self._tree(branch.resolved.sha)
        if tree is not None:
            self._trees[(tier, tree)] = (branch, run)

    def measure(
        self,
        tier: str,
        sets: list[tuple[int, ...]],
        phase: Phase,
        ahead: Sequence[tuple[int, ...]] = (),
    ) -> list[Measured]:
        """Each set measured on `tier`, at most once per patch series; the sets `ahead` (those that
        may be asked next) are resolved and built meanwhile, while this batch probes."""
        self._settle()
        todo: dict[str, Measured] = {}
        out: list[Measured] = []
        for hunks in sets:
            digest = self.digest(hunks)
            found = self._by_key.get((tier, digest)) or todo.get(digest)
            if found is None:
                found = self._ready.pop((tier, digest), None)
                if found is None:
                    found = Measured(0, tier, phase, digest, tuple(hunks))
                    self._prepare(found)
                found.number, found.phase = len(self.measured) + 1, phase
                self.measured.append(found)
                todo[digest] = found
            out.append(found)
        later = [h for h in ahead if self.digest(h) not in todo]
        if later:
            self._pending = self._ahead.submit(self._prepare_ahead, tier, later)
        runnable = [m for m in todo.values() if m.branch is not None and m.run is None]
        if runnable:
            self._probe(tier, runnable)
        for measured in todo.values():
            if measured.same_as:
                self._judge(tier, [measured])
            self._by_key[(tier, measured.digest)] = measured
        return out

    def measure_again(self, tier: str, sets: Sequence[Measured], round_: int) -> list[Measured]:
        """Each of `sets` (measured already, its environment built) probed once more as a new try of
        phase `again`: never read from the result cache nor from another set's runs, its files kept
        apart from the reported sets' (`round_` names the folder)."""
        self._settle()
        again = []
        for earlier in sets:
            if earlier.branch is None or earlier.branch.env is None:
                continue
            measured = Measured(
                len(self.measured) + 1,
                tier,
                "again",
                earlier.digest,
                earlier.hunks,
                branch=earlier.branch,
                tree=earlier.tree,
            )
            self.measured.append(measured)
            again.append(measured)
        if again:
            fresh = dataclasses.replace(
                self.context, cache=None, out=self.scratch / "again" / str(round_)
            )
            self._probe(tier, again, fresh, remember=False)
        return again

    def close(self) -> None:
        """Stop preparing ahead (a set being prepared is finished first: seconds at most)."""
        self._ahead.shutdown(wait=True, cancel_futures=True)

    def _settle(self) -> None:
        """Wait for the sets being prepared ahead: one thread at a time uses the repository."""
        if self._pending is not None:
            pending, self._pending = self._pending, None
            pending.result()

    def _prepare_ahead(self, tier: str, sets: list[tuple[int, ...]]) -> None:
        for hunks in sets:
            digest = self.digest(hunks)
            if (tier, digest) in self._by_key or (tier, digest) in self._ready:
                continue
            measured = Measured(0, tier, "hunks", digest, tuple(hunks))
            self._prepare(measured)
            self._ready[(tier, digest)] = measured

    def known(self, tier: str, hunks: Sequence[int]) -> Measured | None:
        return self._by_key.get((tier, self.digest(hunks)))

    def _prepare(self, measured: Measured) -> None:
        """The set as a branch with an environment, or why it cannot be one."""
        started = time.monotonic()
        name = self.branch_name(measured.digest)
        problem = branch_name_problem(name)
        if problem:  # the prefix comes from a valid branch name, cut short: a guard, never met
            raise RefError(f"blame: {name!r} cannot name a branch: {problem}", "report it")
        spec = BranchSpec(
            name=name, ref=self.base.resolved.sha, patches=self.patch_files(measured.hunks)
        )
        try:
            resolved = resolve_branch(self.context.workspace.repo, spec)
        except RefError as exc:
            measured.problem = ("does-not-apply", one_line(exc.problem))
            measured.seconds = time.monotonic() - started
            return
        self.resolved.append(resolved)
        measured.tree = self._tree(resolved.sha)
        same = self._trees.get((measured.tier, measured.tree or ""))
        prepared = PreparedBranch(resolved)
        try:
            prepared.env = ensure_branch_env(
                self.context.workspace.base,
                self.context.workspace.repo,
                resolved,
                self.context.workspace.config.base_ref,
                self.context.log,
            )
        except EnvironmentBuildError as exc:
            measured.problem = ("unmeasured", f"no environment: {exc.problem}")
        measured.branch = prepared
        if same is not None and prepared.env is not None:
            measured.run, measured.same_as = same[1], same[0].name
        measured.seconds = time.monotonic() - started

    def _probe(
        self,
        tier: str,
        batch: list[Measured],
        base_context: RunContext | None = None,
        remember: bool = True,
    ) -> None:
        """One probe per set of `batch`, side by side from the shared fork server, then the door;
        with `remember`, a set's runs serve later sets with the same tree of vllm/."""
        chosen = self.selected[tier]
        started = time.monotonic()
        branches = [m.branch for m in batch if m.branch is not None]
        base_context = base_context or self.context
        workspace = base_context.workspace
        context = dataclasses.replace(
            base_context,
            workspace=Workspace(workspace.config, workspace.base, workspace.repo, branches),
        )
        server = self.servers[tier]
        delivered = measure_tier(
            context, tiers.probe_tier(tier), chosen.scenarios, jobs=server.parallel, shared=server
        )
        self.probes += sum(1 for run in delivered.values() if run.reused is None)
        spent = (time.monotonic() - started) / len(batch)
        for measured in batch:
            assert measured.branch is not None
            run = delivered[measured.branch.name]
            measured.run, measured.probed = run, run.reused is None
            measured.seconds += spent
            if run.header is None:
                measured.problem = ("does-not-import", one_line(run.error or run.log_tail))
            if remember and measured.tree is not None and measured.problem is None:
                self._trees.setdefault((tier, measured.tree), (measured.branch, run))
        self._judge(tier, batch)

    def _judge(self, tier: str, batch: list[Measured]) -> None:
        """Every set of `batch` beside the base, through the tier's `measure` (the one door)."""
        runs = {m.branch.name: m.run for m in batch if m.branch is not None and m.run is not None}
        results = judge_beside(
            tiers.probe_tier(tier),
            self.selected[tier].scenarios,
            self.context.reading,
            self.base.name,
            self.base_runs[tier],
            runs,
        )
        for measured in batch:
            if measured.branch is not None:
                measured.results = [r for r in results if r.branch == measured.branch.name]

    def _tree(self, sha: str) -> str | None:
        """The tree of vllm/ at `sha`: what a branch environment carries of it."""
        try:
            return str(
                self.context.workspace.repo.git.rev_parse(
                    "--verify", "--quiet", f"{sha}:{OVERLAID.rstrip('/')}"
                )
            )
        except GitCommandError:
            return None


def judge_beside(
    tier: ProbeTier[Any],
    scenarios: Sequence[Any],
    reading: Reading,
    base: str,
    base_run: BranchRun,
    others: Mapping[str, BranchRun],
) -> list[Result]:
    """The verdicts of `others` and of the base on `scenarios`, from the tier's own `measure` (which
    judges through `tiers.door`), the base the baseline crashes and hangs are judged against."""
    door = _Door(
        reading,
        base,
        {base: None, **{name: None for name in others}},
        {base: base_run, **others},
    )
    return tier.measure(list(scenarios), {}, door).results
