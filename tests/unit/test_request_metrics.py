"""The per-request spec-decode metrics' oracle and comparison (`tiers.common.request_metrics`),
on hand-written verifications; the real scheduler's responses are checked in
tests/tiers/test_scheduler_tier.py."""

from __future__ import annotations

import pytest

from difftest.core.records import ProbeRun
from difftest.tiers.common.accounting import Verification
from difftest.tiers.common.request_metrics import (
    differences,
    expected,
    finished_by_a_rule,
    returned,
)

pytestmark = pytest.mark.quick

K = 3
#: Request `cut`: 3 drafts all accepted, but max_tokens kept 2 tokens; then 1 of 3 accepted, 2
#: emitted. Request `invalid`: every draft grammar-invalid (scheduled 3, real 0), twice.
ROWS = [
    Verification("cut", 3, 3, 3, 2),
    Verification("cut", 3, 3, 1, 2),
    Verification("invalid", 0, 3, 0, 1),
    Verification("invalid", 0, 3, 0, 1),
]

BOTH_STOPPED = {"cut": "stop", "invalid": "stop"}


def vllm_payload(
    histogram: list[int], drafted: int, detailed: tuple[list[int], list[int]] = ([], [])
) -> dict:
    """What vLLM 0.32's `RequestSpecDecodeMetrics.to_dict()` returns: its mean is accepted + 1
    per step (the figure #56101 is about)."""
    steps = sum(histogram)
    accepted = sum(j * n for j, n in enumerate(histogram))
    payload = {
        "mean_acceptance_length": 1.0 + accepted / steps if steps else 1.0,
        "draft_acceptance_rate": accepted / drafted if drafted else 0.0,
        "acceptance_histogram": histogram,
        "num_spec_steps": steps,
        "num_accepted_draft_tokens": accepted,
        "num_draft_tokens": drafted,
        "num_spec_tokens": K,
    }
    if detailed[0]:
        payload["per_step_accepted"], payload["per_step_drafted"] = detailed
    return payload


def test_the_oracle_counts_rows_and_the_tokens_received() -> None:
    want = expected(ROWS, K, "strict", "detailed")
    assert want["cut"] == {
        "acceptance_histogram": [0, 1, 0, 1],
        "num_spec_steps": 2,
        "num_accepted_draft_tokens": 4,
        "num_draft_tokens": 6,
        "draft_acceptance_rate": 4 / 6,
        "mean_acceptance_length": 2.0,  # 4 tokens received in 2 rows, not (4 + 2) / 2
        "per_step_accepted": [3, 1],
        "per_step_drafted": [3, 3],
    }
    # Strict: all-invalid steps are no rows; lenient: rows with 0 drafts, histogram bucket 0.
    assert want["invalid"]["num_spec_steps"] == 0
    assert want["invalid"]["mean_acceptance_length"] == 1.0
    lenient = expected(ROWS, K, "lenient", "summary")["invalid"]
    assert lenient["acceptance_histogram"] == [2, 0, 0, 0]
    assert lenient["mean_acceptance_length"] == 1.0
    assert "per_step_accepted" not in lenient


def test_a_mean_that_counts_cut_tokens_differs_and_nothing_else_does() -> None:
    want = expected(ROWS, K, "lenient", "detailed")
    returned = {
        "cut": vllm_payload([0, 1, 0, 1], 6, ([3, 1], [3, 3])),
        "invalid": vllm_payload([2, 0, 0, 0], 0, ([0, 0], [0, 0])),
    }
    found = differences(returned, want, BOTH_STOPPED, "detailed", K)
    assert [(d.counter, d.measured, d.expected) for d in found] == [
        ("request_metrics.mean_acceptance_length", 3.0, 2.0)
    ]
    assert "request cut" in found[0].explanation


def test_the_strict_reading_finds_the_invalid_requests_rows() -> None:
    want = expected(ROWS, K, "strict", "summary")
    returned = {
        "cut": vllm_payload([0, 1, 0, 1], 6) | {"mean_acceptance_length": 2.0},
        "invalid": vllm_payload([2, 0, 0, 0], 0),
    }
    found = {d.counter for d in differences(returned, want, BOTH_STOPPED, "summary", K)}
    assert found == {"request_metrics.acceptance_histogram", "request_metrics.num_spec_steps"}


def test_a_finished_request_without_metrics_is_a_difference_an_aborted_one_is_not() -> None:
    want = expected(ROWS, K, "lenient", "summary")
    run = ProbeRun(
        scenario="s",
        tier="engine",
        label="order:cut,invalid",
        order=["cut", "invalid"],
        role="batch",
        finish_reasons={"cut": "stop", "invalid": "abort"},
        notes={"stop_reasons": {"cut": "ab"}},
    )
    finished = finished_by_a_rule(run)
    assert finished == {"cut": "stop on stop string 'ab'"}
    found = differences(returned(run), want, finished, "summary", K)
    assert [(d.counter, d.expected) for d in found] == [("request_metrics.missing", "cut")]
    assert "finished (stop on stop string 'ab')" in found[0].explanation


def test_summary_level_ignores_the_per_step_lists_detailed_compares_them() -> None:
    want = expected(ROWS, K, "lenient", "detailed")
    returned = {
        "cut": vllm_payload([0, 1, 0, 1], 6, ([1, 3], [3, 3])) | {"mean_acceptance_length": 2.0}
    }
    summary = expected(ROWS, K, "lenient", "summary")
    assert differences(returned, summary, {"cut": "length"}, "summary", K) == []
    found = differences(returned, want, {"cut": "length"}, "detailed", K)
    assert [d.counter for d in found] == ["request_metrics.per_step_accepted"]
