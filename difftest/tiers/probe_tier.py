"""The contract of a tier measured by probes (scheduler, engine): planned runs, an oracle,
invariants.

A difftest probe process per branch (`probe_entry`, under `difftest.probe`)
plays each scenario's planned runs (`scenario.runs()`, `job_scenario()`); the
measurer starts it in every branch environment, as many at once as
`default_jobs` and `probe_memory_mb` allow. The one door (`tiers.door`) then
judges what every probe delivered with this tier's hooks:

    expected(scenario, run, reading)  -> the oracle's totals for one measured run
    invariants(scenario, runs)        -> violations per run label, for one branch
    across_branches(scenario, runs, baseline) -> violations per branch and label
    expected_steps(scenario, run, reading) -> the oracle's stats row per recorded step
                                         (`difftest show` and the HTML trace)

Scenario files are read by `load` (and one mapping by `parse_scenario`, the
same validation); `fuzz_strategy` generates mappings for `difftest fuzz`.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from difftest.core.config import Config
from difftest.core.errors import ConfigError
from difftest.core.records import COUNTERS, Difference, ProbeRun, Reading, Totals
from difftest.core.verdicts import MAL
from difftest.tiers import door
from difftest.tiers.base import EMITTED_SOURCE, Measurer, P, Tier, TierOutcome
from difftest.tiers.common.invariants import ByLabel
from difftest.tiers.common.scenario import ScenarioBase

#: Row keys of a probe tier's counter table: the counters, where the emitted count comes from, and
#: the mean acceptance length.
COUNTER_ROWS = (*COUNTERS, EMITTED_SOURCE, MAL)
#: A probe tier's scenario type: a batch of requests played in several orders.
S = TypeVar("S", bound=ScenarioBase)


class ProbeTier(Tier[S]):
    """A tier whose branches are measured by a difftest probe and judged by an oracle."""

    #: Key of `difftest.probe.__main__.ENTRIES`: the probe that plays this tier's jobs.
    probe_entry: ClassVar[str]
    #: Memory budget of one branch probe, MB: its measured peak plus a margin (`bench/memory.py`);
    #: caps how many probes run at once (`run.probes.capacity`).
    probe_memory_mb: ClassVar[int] = 1024
    #: Cores one probe wants: a Ray task's `num_cpus` (`--executor ray`), capped at the largest
    #: node's.
    probe_cpus: ClassVar[int] = 1

    def scenarios(self, config: Config, explicit: bool) -> list[S] | None:
        """The scenario files of `scenarios_dir/folder`; None when that folder does not exist."""
        assert config.scenarios_dir is not None, "load_config always sets scenarios_dir"
        folder = config.scenarios_dir / self.folder
        if not folder.is_dir():
            if explicit:
                raise ConfigError(
                    f"no scenario folder for the {self.name} tier: {folder} does not exist",
                    "point `scenarios_dir` in the config at a folder with one subfolder per tier",
                )
            return None
        return list(self.load(folder))

    @abstractmethod
    def load(self, folder: Path) -> list[S]:
        """Read and validate every scenario file of `folder`; raise ConfigError naming file, key,
        fix."""

    @abstractmethod
    def parse_scenario(self, raw: dict[str, Any], source: str) -> S:
        """Validate one scenario mapping exactly as `load` validates a file (`source` names it)."""

    def fuzz_strategy(self) -> Any:
        """A Hypothesis strategy of this tier's scenario mappings (no `name`), valid by
        construction, for `difftest fuzz`; None if the tier cannot be fuzzed (the engine tier: no
        scripted model)."""
        return None

    def default_jobs(self, branches: int, cores: int) -> int:
        """Branch probes run at once when `--jobs` is not given."""
        return max(1, branches)

    def probe_gpus(self, base: dict[str, Any]) -> int:
        """GPUs one probe needs on this base (its fingerprint): a Ray task's `num_gpus`. None
        unless the tier drives a real engine on a CUDA build."""
        return 0

    @abstractmethod
    def expected(self, scenario: S, run: ProbeRun, reading: Reading) -> Totals:
        """The oracle's totals for one measured run."""

    @abstractmethod
    def invariants(self, scenario: S, runs: list[ProbeRun]) -> ByLabel:
        """Violations per run label among one branch's runs of `scenario`."""

    def across_branches(
        self, scenario: S, runs_by_branch: dict[str, list[ProbeRun]], baseline: str
    ) -> dict[str, ByLabel]:
        """Violations per branch and run label found by comparing branches (none by default)."""
        return {}

    @abstractmethod
    def expected_steps(self, scenario: S, run: ProbeRun, reading: Reading) -> list[Totals | None]:
        """The oracle's stats row for each of `run.steps`, in order; None where the tier cannot say.

        Summed over the steps they equal `expected(scenario, run, reading)`. Set
        beside the stats the branch recorded for the same step, they show the
        first step where the branch and the oracle part ways.
        """

    def response_differences(
        self, scenario: S, run: ProbeRun, reading: Reading
    ) -> list[Difference]:
        """Where what the run's requests returned, and what the server exported about them,
        differ from the oracle beyond the step counters: the per-request spec-decode metrics
        (`tiers.common.request_metrics`, where the scenario asks for them), the generated-token
        metrics (engine tier)."""
        return []

    def report_rows(self) -> list[str]:
        return list(COUNTER_ROWS)

    def measure(
        self, scenarios: list[S], skipped: Mapping[str, str], measurer: Measurer[P]
    ) -> TierOutcome[P]:
        """One probe per branch plays every runnable scenario; the door judges what they
        delivered."""
        runnable = [s for s in scenarios if s.name not in skipped]
        delivered = measurer.run_probes(self, runnable) if runnable else {}
        results = door.judge_tier(
            self,
            scenarios,
            skipped,
            measurer.setup_errors,
            delivered,
            measurer.reading,
            measurer.baseline,
        )
        return TierOutcome(results=results, probes=delivered)
