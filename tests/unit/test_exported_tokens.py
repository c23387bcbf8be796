"""The generated-token metrics against the tokens returned (`tiers.engine.exported`), on
hand-written runs; the real engine's are checked in tests/tiers/test_engine_tier.py."""

from __future__ import annotations

import pytest

from difftest.core.records import ProbeRun
from difftest.tiers.engine.exported import token_counter_differences

pytestmark = pytest.mark.quick


def run(moved: dict | None, finish: dict[str, str]) -> ProbeRun:
    """Two requests: `a` returned 5 tokens, `b` 3."""
    notes = {} if moved is None else {"prometheus_tokens": moved}
    return ProbeRun(
        scenario="s",
        tier="engine",
        label="order:a,b",
        order=["a", "b"],
        role="batch",
        status="ok",
        outputs={"a": [1] * 5, "b": [2] * 3},
        finish_reasons=finish,
        notes=notes,
    )


def test_counters_that_moved_by_the_tokens_returned_agree() -> None:
    moved = {
        "generation_tokens": 8,
        "request_generation_tokens_sum": 8,
        "request_generation_tokens_count": 2,
    }
    assert token_counter_differences(run(moved, {"a": "stop", "b": "length"})) == []


def test_an_aborted_request_counts_as_generated_but_not_as_finished() -> None:
    moved = {
        "generation_tokens": 8,
        "request_generation_tokens_sum": 5,
        "request_generation_tokens_count": 1,
    }
    assert token_counter_differences(run(moved, {"a": "stop", "b": "abort"})) == []


def test_tokens_a_stop_string_dropped_are_a_difference() -> None:
    moved = {
        "generation_tokens": 10,
        "request_generation_tokens_sum": 10,
        "request_generation_tokens_count": 2,
    }
    found = token_counter_differences(run(moved, {"a": "stop", "b": "stop"}))
    assert [(d.counter, d.measured, d.expected) for d in found] == [
        ("prometheus.generation_tokens", 10, 8),
        ("prometheus.request_generation_tokens_sum", 10, 8),
    ]
    assert "+2" in found[0].explanation


def test_counters_never_read_are_differences_not_a_pass() -> None:
    found = token_counter_differences(run(None, {"a": "stop", "b": "stop"}))
    assert {d.measured for d in found} == {None} and len(found) == 3
    assert "not read" in found[0].explanation
