"""What every tier is, whatever measures it: a name, its scenarios, and one `measure`.

A tier is one way of exercising each branch's stats path (a scripted model
against the real scheduler; the real engine on a tiny model; the repository's
own tests). The pipeline (`difftest.run.pipeline`) never asks which kind of
tier it holds: for every tier the user selected it calls

    scenarios(config, explicit)        -> scenarios or None (validated before anything is built)
    refuse_before_build(scenarios, tree) -> raises what the baseline's files show is wrong
    unavailable(scenario, base)        -> reason or None (e.g. needs CUDA on a CPU base)
    measure(scenarios, skipped, measurer) -> TierOutcome (verdicts, and what they were judged from)

and reports ask `report_rows()` for the counter rows they show. Two complete
contracts implement `measure`, each with the hooks its kind needs and nothing
else: `ProbeTier` (`tiers.probe_tier`: a difftest probe per branch plays the
planned runs, an oracle and invariants judge them) and `SuiteTier`
(`tiers.suite_tier`: the repository's own tests, judged from test outcomes).

`measure` is given a `Measurer`: the run layer's way of starting processes in
every branch environment. The tier says what to run and how to judge it; the
measurer runs it (a tier cannot import the run layer, `tests/test_layering.py`).

Adding a tier is one folder under `difftest/tiers/` whose `tier.py` subclasses
`ProbeTier` or `SuiteTier`, one under `difftest/probe/` (its probe entry, or its
pytest plugin), and one line in `tiers.REGISTRY`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar

from difftest.core.breakage import Measured
from difftest.core.config import Config
from difftest.core.records import ProbeCoverage, Reading, Result, TestRecord
from difftest.tiers.common.scenario import ScenarioIdentity

if TYPE_CHECKING:
    from difftest.core.evidence import TestSourceEvidence
    from difftest.tiers.probe_tier import ProbeTier
    from difftest.tiers.suite_tier import SuiteTier

#: Report row key after the counters: where the branch's emitted count comes from.
EMITTED_SOURCE = "emitted_source"
#: A tier's scenario type.
S = TypeVar("S", bound=ScenarioIdentity)
#: What the measurer delivers per branch for a probe tier (the run layer's `BranchRun`).
P = TypeVar("P", bound=Measured)


@dataclass(frozen=True)
class TierOutcome(Generic[P]):
    """One tier's verdicts, and everything they were judged from (what the evidence keeps)."""

    results: list[Result] = field(default_factory=list)
    #: Branch -> what its probe delivered (probe tiers; empty for suite tiers).
    probes: Mapping[str, P] = field(default_factory=dict)
    #: Every test outcome, judged (suite tiers; empty for probe tiers).
    tests: list[TestRecord] = field(default_factory=list)
    #: Test source label -> where its tests came from (suite tiers).
    test_sources: Mapping[str, TestSourceEvidence] = field(default_factory=dict)
    #: The test sessions as they ran (suite tiers; the run layer's `SessionRun`s).
    sessions: Sequence[Any] = ()
    #: Branch -> what its workers traced, summed over the sessions (suite tiers, when traced).
    coverage: Mapping[str, ProbeCoverage] = field(default_factory=dict)


class BaselineTree(Protocol):
    """The baseline commit's files, read from git after refs resolve and before any environment
    is built (the build layer's `CommitTree`)."""

    @property
    def label(self) -> str:
        """The baseline's name and short commit, as messages name it."""
        ...

    def exists(self, path: str) -> bool:
        """Whether `path` (relative to the repository root) is a file or folder there."""
        ...

    def names_in(self, folder: str) -> list[str]:
        """The entries of `folder` (empty when it is not one)."""
        ...


class Measurer(Protocol[P]):
    """What a tier needs of the run layer: the facts of this comparison, and how to run
    processes."""

    @property
    def reading(self) -> Reading: ...

    @property
    def baseline(self) -> str: ...

    @property
    def setup_errors(self) -> Mapping[str, str | None]:
        """Every compared branch -> why it has no environment (None: it has one)."""
        ...

    def run_probes(self, tier: ProbeTier[Any], scenarios: Sequence[Any]) -> Mapping[str, P]:
        """The tier's probe played in every branch that has an environment (or reused)."""
        ...

    def run_suites(self, tier: SuiteTier[Any], scenario: Any) -> TierOutcome[P]:
        """The tier's test sessions run across every branch, planned and judged by its hooks."""
        ...


class Tier(ABC, Generic[S]):
    """The part of a tier the pipeline and the reports see; `ProbeTier` and `SuiteTier` complete
    it."""

    #: Registry key, `--tier` choice and the value recorded in the evidence.
    name: ClassVar[str]
    #: Subfolder of `scenarios_dir` holding this tier's scenario files ("" for none).
    folder: ClassVar[str] = ""
    #: The pydantic model of one scenario.
    scenario_model: ClassVar[type[ScenarioIdentity]]

    @abstractmethod
    def scenarios(self, config: Config, explicit: bool) -> list[S] | None:
        """This tier's validated scenarios for `config`; None when the config has none for it (a run
        of every tier then leaves it out). `explicit`: the user named the tier (`--tier NAME`)."""

    def refuse_before_build(self, scenarios: list[S], tree: BaselineTree) -> None:
        """Raise `ConfigError` for what the baseline's files show the scenarios cannot mean (a path
        that names nothing): exit 2 in seconds, not a could-not-measure after every build."""

    def unavailable(self, scenario: S, base: dict[str, Any]) -> str | None:
        """Why `scenario` cannot run on this base (its fingerprint), or None if it can."""
        return None

    @abstractmethod
    def report_rows(self) -> list[str]:
        """Row keys of the per-scenario counter table reports show (none: no counter table)."""

    @abstractmethod
    def measure(
        self, scenarios: list[S], skipped: Mapping[str, str], measurer: Measurer[P]
    ) -> TierOutcome[P]:
        """Measure and judge `scenarios` on every branch; `skipped` ones (with why) get no
        verdict."""
