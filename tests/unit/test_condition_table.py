"""The one table of serving conditions (`probe.conditions`) is what every reader reads: each
tier's schema has exactly the table's condition keys where the table puts them, each probe plays
exactly its tier's conditions, the scheduler's fuzz strategy draws every one, and reports word
them from it. A condition added in one place only fails here."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from difftest.core.errors import ConfigError
from difftest.probe import conditions
from difftest.tiers.engine.scenario import EngineRequest, EngineScenario, EngineSettings
from difftest.tiers.scheduler import strategies
from difftest.tiers.scheduler.scenario import RequestSpec, Scenario, parse_scenario
from tests.factories import ROOT

pytestmark = pytest.mark.quick

#: Per tier and level: the schema's fields, and those that are no serving condition (what a
#: scenario probes, not the conditions it probes under).
SCHEMAS: dict[tuple[str, str], tuple[Any, set[str]]] = {
    ("scheduler", "scenario"): (
        Scenario,
        {"name", "statement", "seed", "file", "sha256", "tier", "k", "batch_orders", "alone"}
        | {"draft_path", "requests"},
    ),
    ("scheduler", "request"): (
        RequestSpec,
        {"id", "prompt", "max_tokens", "eos", "stop", "grammar", "target", "drafter"},
    ),
    ("engine", "scenario"): (
        EngineScenario,
        {"name", "statement", "seed", "file", "sha256", "tier", "k", "batch_orders", "alone"}
        | {"engine", "requires", "requests"},
    ),
    ("engine", "engine"): (
        EngineSettings,
        {"prompt_lookup_min", "prompt_lookup_max", "max_model_len", "max_num_seqs", "method"}
        | {"model", "block_size"},
    ),
    ("engine", "request"): (
        EngineRequest,
        {"id", "prompt", "max_tokens", "truncate", "stop_string_tokens", "ignore_eos", "place"}
        | {"include_stop_str_in_output", "min_tokens", "prime", "structured"}
        | {"until_max_model_len"},
    ),
}

PROBE_DRIVERS = {
    "scheduler": ROOT / "difftest/probe/scheduler/driver.py",
    "engine": ROOT / "difftest/probe/engine/driver.py",
}


@pytest.mark.parametrize("where", sorted(SCHEMAS), ids="-".join)
def test_each_schema_has_exactly_the_tables_conditions_where_the_table_puts_them(
    where: tuple[str, str],
) -> None:
    tier, level = where
    model, not_conditions = SCHEMAS[where]
    fields = set(model.model_fields)
    table = conditions.keys(tier, level)  # type: ignore[arg-type]
    assert table <= fields, f"the table names keys the {tier} schema lacks: {table - fields}"
    assert fields - not_conditions == table, (
        f"{tier} {level} fields that are neither a condition in the table nor listed here as no "
        f"condition: {fields - not_conditions - table}"
    )


def test_a_condition_both_tiers_have_has_one_key() -> None:
    """The scheduler's `abort` was the engine's `abort_after_steps`; now one key, and the old one
    is refused with the rename."""
    shared = {c.key for c in conditions.CONDITIONS if len(c.levels) == 2}
    assert {"abort", "prefix_caching", "kv_blocks", "per_request_metrics"} <= shared
    with pytest.raises(ValueError, match="is now `abort`"):
        EngineRequest.model_validate(
            {"id": "a", "prompt": "hi", "max_tokens": 4, "abort_after_steps": 2}
        )


def _played(tier: str) -> frozenset[str]:
    """The probe driver's PLAYED_CONDITIONS, read from its source (the probe imports vLLM)."""
    tree = ast.parse(Path(PROBE_DRIVERS[tier]).read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "PLAYED_CONDITIONS" for t in node.targets
        ):
            call = node.value
            assert isinstance(call, ast.Call)
            return frozenset(ast.literal_eval(call.args[0]))
    raise AssertionError(f"{PROBE_DRIVERS[tier]} declares no PLAYED_CONDITIONS")


@pytest.mark.parametrize("tier", ["scheduler", "engine"])
def test_each_probe_plays_exactly_its_tiers_conditions(tier: str) -> None:
    assert _played(tier) == conditions.keys(tier)  # type: ignore[arg-type]


def test_a_probe_refuses_a_condition_it_does_not_play_naming_it() -> None:
    data = {"k": 3, "reset_prefix_cache": 2, "requests": [{"id": "a", "abort": 1}]}
    assert conditions.unplayed("scheduler", data, frozenset({"abort"})) == ["reset_prefix_cache"]
    with pytest.raises(ValueError, match="does not play the condition.s. reset_prefix_cache"):
        conditions.refuse_unplayed("scheduler", data, frozenset({"abort"}))
    conditions.refuse_unplayed("scheduler", data, conditions.keys("scheduler"))


def test_reports_word_conditions_from_the_table() -> None:
    data = {
        "engine": {"kv_blocks": 10, "prefix_caching": True},
        "requests": [{"id": "a", "abort": 3}, {"id": "b"}],
    }
    assert conditions.described("engine", data) == ["prefix caching", "10 KV blocks", "aborts"]
    # Plain values are no condition.
    assert conditions.described("scheduler", {"in_flight": 1, "kv_connector": "none"}) == []


def test_the_scheduler_fuzz_strategy_draws_every_condition() -> None:
    """In a few hundred seeded examples (the fuzz CLI's own count is larger), every scheduler
    condition the table does not mark as not fuzzed is drawn at least once, and each example is
    valid as drawn."""
    seen: set[str] = set()

    @settings(
        max_examples=300,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
        deadline=None,
    )
    @given(strategies.scenarios())
    def draw(data: dict[str, Any]) -> None:
        parse_scenario({"name": "drawn", **data}, "drawn")  # valid as drawn
        seen.update(c.key for c, _ in conditions.values("scheduler", data))

    draw()
    fuzzed = {c.key for c in conditions.of_tier("scheduler") if "scheduler" not in c.not_fuzzed}
    assert fuzzed - seen == set()


def test_engine_fuzz_gaps_are_named() -> None:
    """The engine tier has no fuzz strategy yet: every engine condition says so, not silently."""
    for condition in conditions.of_tier("engine"):
        assert "engine" in condition.not_fuzzed, condition.key


def test_the_loader_explains_a_conditions_key_from_the_table() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_scenario(
            {
                "name": "x",
                "statement": "s",
                "k": 2,
                "reset_prefix_cache": -1,
                "requests": [
                    {
                        "id": "a",
                        "prompt": "hi",
                        "max_tokens": 2,
                        "target": "abcd",
                        "drafter": {"kind": "scripted"},
                    }
                ],
            },
            "x.yaml",
        )
    (reset,) = [c for c in conditions.CONDITIONS if c.key == "reset_prefix_cache"]
    assert reset.hint in str(caught.value)
