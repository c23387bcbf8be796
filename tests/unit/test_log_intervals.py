"""Each logging interval's line against the oracle's rows of its steps
(`tiers.common.log_intervals`), on hand-written runs; the branches' real loggers are checked in
tests/tiers/test_scheduler_tier.py and, against a logger that forgets to reset, in
tests/conditions."""

from __future__ import annotations

import pytest

from difftest.core.records import Totals
from difftest.tiers.common.log_intervals import differences, expected_lines
from tests.factories import make_run, make_step


def rows(drafts: int, accepted: list[int], emitted: int) -> Totals:
    return Totals(
        num_drafts=drafts,
        num_draft_tokens=3 * drafts,
        num_accepted_tokens=sum(accepted),
        num_accepted_tokens_per_pos=accepted,
        num_draft_tokens_per_pos=[drafts] * 3,
        num_emitted_tokens=emitted,
        emitted_source="oracle",
    )


#: Steps 0 (prefill, no row), 1 and 2 (a row each), 5 (a row cut by max_tokens: 2 of 4 emitted).
STEPS = [0, 1, 2, 5]
ROWS = [None, rows(1, [1, 1, 1], 4), rows(1, [1, 0, 0], 2), rows(1, [1, 1, 1], 2)]


def line(mean: float, accepted: int, drafted: int, per_position: list[float]) -> dict:
    return {
        "mean_acceptance_length": mean,
        "accepted": accepted,
        "drafted": drafted,
        "per_position": per_position,
    }


def run(lines: list, steps: int = 6) -> object:
    """A run of `steps` engine steps whose records are STEPS."""
    notes = {"log_intervals": lines, "steps": steps}
    return make_run(steps=[make_step(n) for n in STEPS], notes=notes)


def test_the_oracle_sums_the_rows_of_each_intervals_steps() -> None:
    want = expected_lines(run([None] * 3), ROWS, every=2, intervals=3)
    # Steps 0-1: one row; 2-3: one row; 4-5: one row, its emitted tokens cut.
    assert want == [
        {"mean_acceptance_length": 4.0, "accepted": 3, "drafted": 3, "per_position": [1, 1, 1]},
        {"mean_acceptance_length": 2.0, "accepted": 1, "drafted": 3, "per_position": [1, 0, 0]},
        {"mean_acceptance_length": 2.0, "accepted": 3, "drafted": 3, "per_position": [1, 1, 1]},
    ]
    assert expected_lines(run([None] * 2), ROWS, every=4, intervals=2)[0]["accepted"] == 4


def test_lines_that_match_pass_and_a_line_that_counts_cut_tokens_differs() -> None:
    right = [line(4.0, 3, 3, [1.0, 1.0, 1.0]), line(2.0, 1, 3, [1.0, 0.0, 0.0])]
    assert differences(run([*right, line(2.0, 3, 3, [1.0, 1.0, 1.0])]), ROWS, 2) == []
    (found,) = differences(run([*right, line(4.0, 3, 3, [1.0, 1.0, 1.0])]), ROWS, 2)
    assert (found.counter, found.measured, found.expected) == (
        "log_interval.mean_acceptance_length",
        4.0,
        2.0,
    )
    assert found.explanation.startswith("interval 3 (steps 4-5)")


def test_rates_within_the_logs_three_decimals_agree_and_a_stale_rate_does_not() -> None:
    third = [line(4.0, 3, 3, [1.0, 1.0, 1.0]), line(2.0, 1, 3, [1.0, 0.0, 0.0])]
    close = run([*third, line(2.0, 3, 3, [1.0, 0.9996, 1.0])])
    assert differences(close, ROWS, 2) == []
    # A logger that kept an earlier interval's per-position counts: 2.0 where 1 row accepted 1.
    stale = run([third[0], line(2.0, 1, 3, [2.0, 1.0, 1.0]), third[1] | {"accepted": 3}])
    assert [d.counter for d in differences(stale, ROWS, 2)][0] == "log_interval.per_position"


@pytest.mark.parametrize(
    "lines, words",
    [
        ([None, None, None], "no line logged, the oracle has rows"),
        (None, "were not recorded"),
    ],
)
def test_a_missing_line_is_a_difference_never_a_pass(lines, words) -> None:
    found = differences(run(lines) if lines else make_run(steps=[]), ROWS if lines else [], 2)
    assert found and words in found[0].explanation


def test_the_host_counts_the_intervals_and_reads_a_failed_logger_as_a_difference() -> None:
    """The probe does not decide how much is checked: 6 engine steps in 2s are 3 intervals, and a
    record of fewer (or none) is a difference; a logger that raised is one for its interval."""
    right = [line(4.0, 3, 3, [1.0, 1.0, 1.0]), line(2.0, 1, 3, [1.0, 0.0, 0.0])]
    (short,) = differences(run(right), ROWS, 2)
    assert (short.counter, short.measured, short.expected) == ("log_interval.lines", 2, 3)
    assert differences(run([]), ROWS, 2)[0].expected == 3
    failed = differences(run([*right, {"error": "TypeError: log() got an argument"}]), ROWS, 2)
    assert [d.counter for d in failed] == ["log_interval.lines"]
    assert "the branch's logger failed: TypeError" in failed[0].explanation
