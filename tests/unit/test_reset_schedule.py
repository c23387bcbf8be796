"""A prefix-cache reset in the oracle's reading of the records (`tiers/common/schedule.py`,
`steps.sampled`, `scheduler.oracle.expected_steps`), on records shaped as vLLM 0.32's scheduler
leaves them: the reset's preemptions recorded on the step after whose output it landed
(`reset`), the step still in flight dropped for them (`dropped`, two in flight only), and the
scheduler's own report of the same preemptions on the step that resumes them (`preempted`)."""

from __future__ import annotations

from typing import Any

import pytest

from difftest.core.records import ProbeRun, StepRecord
from difftest.tiers.common.schedule import request_schedules
from difftest.tiers.common.steps import delivered, sampled

pytestmark = pytest.mark.quick


def _step(number: int, sampled_tokens: list[int], **extra: Any) -> StepRecord:
    return StepRecord(
        step=number,
        scheduled=["a"],
        sampled={"a": sampled_tokens},
        emitted={"a": [] if "a" in extra.get("dropped", []) else sampled_tokens},
        tokens={"a": len(sampled_tokens)},
        **extra,
    )


def _run(steps: list[StepRecord]) -> ProbeRun:
    return ProbeRun(
        scenario="s", tier="scheduler", label="alone:a", order=["a"], role="alone", steps=steps
    )


def _shape(run: ProbeRun) -> list[tuple[int, bool]]:
    return [(s.step, s.restart) for s in request_schedules(run, None)["a"].samplings]


def test_lockstep_the_step_after_the_reset_is_a_recompute_and_the_one_after_it_is_not() -> None:
    run = _run(
        [
            _step(0, [1]),
            _step(1, [2, 3], reset=["a"]),
            # vLLM reports the reset's preemption with the step that resumes the request.
            _step(2, [4], preempted=["a"]),
            _step(3, [5, 6]),
        ]
    )
    assert _shape(run) == [(0, False), (1, False), (2, True), (3, False)]


def test_two_in_flight_the_dropped_step_is_no_sampling_and_the_resume_recomputes() -> None:
    run = _run(
        [
            _step(0, [1]),
            _step(1, [2, 3], reset=["a"]),
            _step(2, [4, 5], dropped=["a"]),  # in flight at the reset: its output dropped
            _step(3, [4], preempted=["a"]),
            _step(4, [5, 6]),
        ]
    )
    assert _shape(run) == [(0, False), (1, False), (3, True), (4, False)]
    dropped = run.steps[2]
    assert not sampled(dropped, "a") and not delivered(dropped, "a", set())
    assert sampled(run.steps[3], "a") and delivered(run.steps[3], "a", set())


def test_a_preemption_while_scheduling_still_marks_the_next_sampling() -> None:
    """The scheduler's own preemption (a small KV pool): the request is not scheduled in the step
    that reports it, and its next sampling recomputes, as before resets existed."""
    run = _run(
        [
            _step(0, [1]),
            StepRecord(step=1, scheduled=[], preempted=["a"]),
            _step(2, [2]),
            _step(3, [3, 4]),
        ]
    )
    assert _shape(run) == [(0, False), (2, True), (3, False)]
