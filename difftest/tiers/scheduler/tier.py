"""The scheduler tier: a scripted model drives each branch's REAL vLLM Scheduler / AsyncScheduler.

The oracle works from the scenario alone (the model is scripted), so every
counter is predicted exactly; probes are single-threaded and light, so every
branch runs at once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from difftest.core.records import Difference, ProbeRun, Reading, Totals
from difftest.tiers.common import log_intervals, request_metrics
from difftest.tiers.common.invariants import ByLabel
from difftest.tiers.probe_tier import ProbeTier
from difftest.tiers.scheduler import invariants, oracle
from difftest.tiers.scheduler.scenario import Scenario, load_scenarios, parse_scenario


class SchedulerTier(ProbeTier[Scenario]):
    name = "scheduler"
    folder = "scheduler"
    probe_entry = "scheduler"
    scenario_model = Scenario
    #: Measured peak 520 MB (all 61 runs, bench/memory.py), plus a margin.
    probe_memory_mb = 640

    def load(self, folder: Path) -> list[Scenario]:
        return load_scenarios(folder)

    def parse_scenario(self, raw: dict[str, Any], source: str) -> Scenario:
        return parse_scenario(raw, source)

    def fuzz_strategy(self) -> Any:
        # Imported here: Hypothesis is needed by `difftest fuzz` only.
        from difftest.tiers.scheduler.strategies import scenarios

        return scenarios()

    def expected(self, scenario: Scenario, run: ProbeRun, reading: Reading) -> Totals:
        return oracle.expected_totals(scenario, run, reading)

    def invariants(self, scenario: Scenario, runs: list[ProbeRun]) -> ByLabel:
        return invariants.check(scenario, runs)

    def response_differences(
        self, scenario: Scenario, run: ProbeRun, reading: Reading
    ) -> list[Difference]:
        found = []
        if scenario.log_every is not None:
            rows = oracle.expected_steps(scenario, run, reading)
            found += log_intervals.differences(run, rows, scenario.log_every)
        level = scenario.per_request_metrics
        if level == "none":
            return found
        verifications = [
            v for play in oracle.plays(scenario, run).values() for v in play.verifications
        ]
        return found + request_metrics.judged(run, verifications, scenario.k, reading, level)

    def expected_steps(
        self, scenario: Scenario, run: ProbeRun, reading: Reading
    ) -> list[Totals | None]:
        return list(oracle.expected_steps(scenario, run, reading))
