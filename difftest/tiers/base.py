"""What a tier is: the catalogue of everything a tier provides, with the defaults.

A tier is one way of exercising each branch's stats path (a scripted model
against the real scheduler; the real engine on a tiny model; the repository's
own tests). The host never asks which tier it holds: it calls these hooks, in
this order, for every tier the user selected (`difftest.run.pipeline`):

    scenarios(config, explicit)       -> scenarios or None  (validation: before anything is built;
                                         the default reads `load(folder)` from `scenarios_dir/folder`)
    parse_scenario(mapping, source)   -> one scenario, validated as `load` validates a file
    unavailable(scenario, base)       -> reason or None     (e.g. needs CUDA on a CPU base)

then, by `method`, one of two ways of measuring and judging:

`method = "probes"` (scheduler, engine): a difftest probe process per branch plays planned runs.

    scenario.runs(), job_scenario()   -> the planned runs and what the probe plays
    probe_entry                       -> which probe runs it inside each branch environment
    default_jobs(branches, cores)     -> how many branch probes at once (then capped by memory:
                                         probe_memory_mb, `run.capacity`)
    expected(scenario, run, reading)  -> the oracle's totals for one measured run
    invariants(scenario, runs)        -> violations per run label, for one branch
    across_branches(scenario, runs, baseline) -> violations per branch and label

`method = "suites"` (tests): the repository's own pytest tests run in every branch
environment, all branches at once in one pytest-xdist session per test tree
(`difftest.run.suite`); the verdicts come from test outcomes, not counter totals.

    plan_suites(scenario, baseline, branches) -> which tests come from where, and the sessions
    suite_requirements(scenario)      -> test-only packages (a folder on PYTHONPATH, never installed)
    plugin                            -> the pytest plugin (under `difftest.probe`) loaded in every process
    judge_suites(scenario, outcomes, ...) -> one verdict per (branch, test source), and the judged records

and for every tier:

    report_rows()                     -> the counter rows reports show (none: no counter table)
    expected_steps(scenario, run, reading) -> the oracle's stats row for each recorded step
                                         (`difftest show` and the HTML trace, beside what the branch recorded)
    fuzz_strategy()                   -> Hypothesis strategy of scenario mappings (`difftest fuzz`), or None

Adding a tier is one folder under `difftest/tiers/` with a `tier.py`, one under
`difftest/probe/` (its `start(job)`, or its pytest plugin), and one line in
`tiers.REGISTRY`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

from difftest.core.config import Config
from difftest.core.errors import ConfigError
from difftest.core.records import COUNTERS, ProbeRun, Reading, Result, TestRecord, Totals
from difftest.core.suites import BranchTests, RawOutcome, SuitePlan
from difftest.core.verdicts import MAL
from difftest.tiers.common.invariants import ByLabel
from difftest.tiers.common.scenario import ScenarioBase, ScenarioIdentity

#: Report row key after the counters: where the branch's emitted count comes from.
EMITTED_SOURCE = "emitted_source"


class Tier:
    """Base of every tier; subclasses set the class attributes and override the hooks they need."""

    #: Registry key, `--tier` choice and the value recorded in the evidence.
    name: ClassVar[str]
    #: How the pipeline measures and judges the tier (see the module docstring).
    method: ClassVar[Literal["probes", "suites"]] = "probes"
    #: Subfolder of `scenarios_dir` holding this tier's scenario files ("" for none).
    folder: ClassVar[str] = ""
    #: Key of `difftest.probe.__main__.ENTRIES`: the probe that plays this tier's jobs ("probes").
    probe_entry: ClassVar[str] = ""
    #: Module under `difftest.probe` loaded as a pytest plugin in every pytest process ("suites").
    plugin: ClassVar[str] = ""
    #: The pydantic model of one scenario.
    scenario_model: ClassVar[type[ScenarioIdentity]]
    #: Memory budget of one branch probe, MB: its measured peak plus a margin (`bench/memory.py`);
    #: caps how many probes run at once (`run.capacity`).
    probe_memory_mb: ClassVar[int] = 1024

    def scenarios(self, config: Config, explicit: bool) -> list[ScenarioIdentity] | None:
        """This tier's validated scenarios for `config`; None when the config has none for it (a run
        of every tier then leaves it out). `explicit`: the user named the tier (`--tier NAME`)."""
        folder = config.scenarios_dir / self.folder
        if not folder.is_dir():
            if explicit:
                raise ConfigError(
                    f"no scenario folder for the {self.name} tier: {folder} does not exist",
                    "point `scenarios_dir` in the config at a folder with one subfolder per tier",
                )
            return None
        return list(self.load(folder))

    def load(self, folder: Path) -> list[ScenarioBase]:
        """Read and validate every scenario file of `folder`; raise ConfigError naming file, key, fix."""
        raise NotImplementedError

    def parse_scenario(self, raw: dict[str, Any], source: str) -> ScenarioBase:
        """Validate one scenario mapping exactly as `load` validates a file (`source` names it in errors)."""
        raise NotImplementedError

    def fuzz_strategy(self) -> Any:
        """A Hypothesis strategy of this tier's scenario mappings (no `name`), valid by construction,
        for `difftest fuzz`; None if the tier cannot be fuzzed (the engine tier: no scripted model)."""
        return None

    def unavailable(self, scenario: ScenarioBase, base: dict[str, Any]) -> str | None:
        """Why `scenario` cannot run on this base (its fingerprint), or None if it can."""
        return None

    def default_jobs(self, branches: int, cores: int) -> int:
        """Branch probes run at once when `--jobs` is not given."""
        return max(1, branches)

    def expected(self, scenario: ScenarioBase, run: ProbeRun, reading: Reading) -> Totals:
        """The oracle's totals for one measured run."""
        raise NotImplementedError

    def invariants(self, scenario: ScenarioBase, runs: list[ProbeRun]) -> ByLabel:
        """Violations per run label among one branch's runs of `scenario`."""
        raise NotImplementedError

    def across_branches(
        self, scenario: ScenarioBase, runs_by_branch: dict[str, list[ProbeRun]], baseline: str
    ) -> dict[str, ByLabel]:
        """Violations per branch and run label found by comparing branches (none by default)."""
        return {}

    def report_rows(self) -> list[str]:
        """Row keys of the per-scenario counter table: the counters, the emitted source, the mean."""
        return [*COUNTERS, EMITTED_SOURCE, MAL]

    # -- tiers measured by test suites (`method = "suites"`) -----------------------------------

    def plan_suites(
        self, scenario: ScenarioIdentity, baseline: BranchTests, branches: list[BranchTests]
    ) -> SuitePlan:
        """Which tests come from where (`TestSource`s) and the pytest sessions that run them."""
        raise NotImplementedError

    def suite_requirements(self, scenario: ScenarioIdentity) -> list[str]:
        """Test-only packages the sessions need, as pip requirements."""
        raise NotImplementedError

    def judge_suites(
        self,
        scenario: ScenarioIdentity,
        plan: SuitePlan,
        outcomes: list[RawOutcome],
        codes: list[str],
        baseline: str,
        reading: Reading,
        unmeasured: dict[str, str],
    ) -> tuple[list[Result], list[TestRecord]]:
        """One Result per (code branch, source) and every outcome judged; `unmeasured`: branches
        whose code ran nothing, and why."""
        raise NotImplementedError

    def expected_steps(
        self, scenario: ScenarioBase, run: ProbeRun, reading: Reading
    ) -> list[Totals | None]:
        """The oracle's stats row for each of `run.steps`, in order; None where the tier cannot say.

        Summed over the steps they equal `expected(scenario, run, reading)`. Set
        beside the stats the branch recorded for the same step, they show the
        first step where the branch and the oracle part ways.
        """
        return [None] * len(run.steps)
