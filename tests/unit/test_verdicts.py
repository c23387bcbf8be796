"""Verdicts, summaries and exit codes, from hand-built data.

This layer's input is data - `ProbeRun`s from the probe, expected `Totals`
from the oracle, `Violation`s from the invariants - so building those by hand
(`tests.factories`) is the honest way to test it; no vLLM is involved.
"""

from __future__ import annotations

import math

import pytest

from difftest.core.errors import EXIT_FAILED, EXIT_OK, EXIT_UNMEASURED
from difftest.core.records import Failure, ProbeRun, Result, Totals, Violation
from difftest.core.values import format_value
from difftest.core.verdicts import (
    MAL,
    counter_differences,
    exit_code,
    first_reason,
    judge,
    measured_mal,
    one_line,
    oracle_mal,
    run_error,
    summarize,
    unmeasured,
    worst,
)
from tests.factories import (
    BRANCH,
    EMITTED,
    LABEL,
    MAL_VALUE,
    ROWS,
    SCENARIO,
    STATEMENT,
    TIER,
    make_expected,
    make_result,
    make_run,
    make_totals,
    make_violation,
)

TIMEOUT = Failure(
    kind="timeout",
    type="RunTimeout",
    summary="RunTimeout: run exceeded 2 s",
    where="driver.py:40 in step",
)


def judge_one(
    probe: ProbeRun, expected: Totals | None = None, violations: list[Violation] | None = None
) -> Result:
    expected_map = {probe.label: expected or make_expected()}
    (result,) = judge(
        BRANCH,
        SCENARIO,
        TIER,
        STATEMENT,
        [probe],
        expected_map,
        {probe.label: violations or []},
        "strict",
    )
    return result


def test_pass_when_everything_matches() -> None:
    result = judge_one(make_run())
    assert result.verdict == "pass"
    assert result.differences == [] and result.error is None
    assert (result.branch, result.scenario, result.label, result.reading) == (
        BRANCH,
        SCENARIO,
        LABEL,
        "strict",
    )
    assert result.statement == STATEMENT


def test_result_keeps_the_run_duration() -> None:
    assert judge_one(make_run(duration_s=1.25)).duration_s == 1.25


def test_diverge_names_counter_values_and_statement() -> None:
    measured = make_totals(
        num_emitted_tokens=13, emitted_source="implied", mean_acceptance_length=3.25
    )
    result = judge_one(make_run(totals=measured))
    assert result.verdict == "diverge"
    assert result.statement == STATEMENT
    first = result.differences[0]
    assert (first.counter, first.measured, first.expected) == ("num_emitted_tokens", 13, EMITTED)
    assert "no emitted counter" in first.explanation
    # MAL follows emitted: the same story, recorded after the counter.
    assert [d.counter for d in result.differences] == ["num_emitted_tokens", MAL]


def test_own_emitted_counter_is_not_called_implied() -> None:
    result = judge_one(make_run(totals=make_totals(num_emitted_tokens=13)))
    assert "no emitted counter" not in result.differences[0].explanation
    assert "+2" in result.differences[0].explanation


def test_per_position_lists_compare_as_lists() -> None:
    result = judge_one(make_run(totals=make_totals(num_accepted_tokens_per_pos=[4, 3, 1])))
    assert result.verdict == "diverge"
    assert result.differences[0].counter == "num_accepted_tokens_per_pos"
    assert result.differences[0].measured == [4, 3, 1]


def test_mal_alone_is_a_divergence() -> None:
    # Counters right, but the branch logs MAL with the old formula: users see a wrong number.
    result = judge_one(make_run(totals=make_totals(mean_acceptance_length=3.25)))
    assert result.verdict == "diverge"
    (diff,) = result.differences
    assert (
        diff.counter == MAL and diff.measured == 3.25 and diff.expected == pytest.approx(MAL_VALUE)
    )
    assert "logged by the branch" in diff.explanation


def test_mal_within_tolerance_is_equal() -> None:
    result = judge_one(make_run(totals=make_totals(mean_acceptance_length=MAL_VALUE + 1e-9)))
    assert result.verdict == "pass"


def test_mal_falls_back_to_counters_when_branch_logs_none() -> None:
    assert measured_mal(make_totals(mean_acceptance_length=None)) == pytest.approx(MAL_VALUE)
    assert measured_mal(make_totals(mean_acceptance_length=math.nan)) == pytest.approx(MAL_VALUE)
    assert measured_mal(make_totals(num_drafts=0, mean_acceptance_length=None)) is None
    assert oracle_mal(make_totals(num_drafts=0)) is None
    assert oracle_mal(make_totals()) == pytest.approx(EMITTED / ROWS)


def test_no_drafts_on_both_sides_is_no_mal_difference() -> None:
    zero = Totals()
    assert counter_differences(zero, zero) == []
    diffs = counter_differences(make_totals(), zero)
    assert MAL in [d.counter for d in diffs]


def test_broken_wins_over_diverge_and_keeps_both() -> None:
    violation = make_violation(detail="2 requests lost", measured=2)
    result = judge_one(make_run(totals=make_totals(num_drafts=2)), violations=[violation])
    assert result.verdict == "broken"
    assert result.violations == [violation]
    assert result.differences and result.differences[0].counter == "num_drafts"
    assert first_reason(result) == "order-independence: 2 requests lost"


def test_broken_even_when_counters_match() -> None:
    violation = make_violation(
        invariant="accepted-le-drafts", detail="accepted 13 > drafted 12", counter=None
    )
    assert judge_one(make_run(), violations=[violation]).verdict == "broken"


@pytest.mark.parametrize(
    "probe, needle",
    [
        (make_run(status="error", error="ImportError: no module", totals=None), "ImportError"),
        (make_run(status="timeout", error=None, totals=None, failure=TIMEOUT), "timeout"),
        (make_run(status="ok", totals=None), "no totals"),
        (make_run(status="error", error="crash after totals"), "crash after totals"),
    ],
)
def test_error_when_not_measured(probe: ProbeRun, needle: str) -> None:
    result = judge_one(probe)
    assert result.verdict == "error"
    assert needle in (result.error or "")


def test_error_names_the_probe_failure_and_where_it_was_raised() -> None:
    failure = TIMEOUT
    probe = make_run(status="timeout", totals=None, failure=failure)
    assert run_error(probe) == "timeout: RunTimeout: run exceeded 2 s (at driver.py:40 in step)"
    assert judge_one(probe).error == run_error(probe)
    # The host's own reason wins over the probe's account.
    assert run_error(probe.model_copy(update={"error": "record rejected"})) == "record rejected"
    assert run_error(
        probe.model_copy(update={"failure": failure.model_copy(update={"where": ""})})
    ).endswith("2 s")


def test_error_wins_over_violations() -> None:
    result = judge_one(
        make_run(status="error", error="boom", totals=None), violations=[make_violation()]
    )
    assert result.verdict == "error"


def test_missing_oracle_totals_is_an_error_not_a_pass() -> None:
    probe = make_run()
    (result,) = judge(BRANCH, SCENARIO, TIER, STATEMENT, [probe], {}, {}, "lenient")
    assert result.verdict == "error" and "oracle" in (result.error or "")
    assert result.reading == "lenient"


def test_one_result_per_run_keyed_by_label() -> None:
    runs = [make_run("order:a,b"), make_run("order:b,a", totals=make_totals(num_drafts=3))]
    violation = make_violation(label="order:b,a", detail="lost")
    expected = {"order:a,b": make_expected(), "order:b,a": make_expected()}
    results = judge(
        BRANCH, SCENARIO, TIER, STATEMENT, runs, expected, {"order:b,a": [violation]}, "strict"
    )
    assert [(r.label, r.verdict) for r in results] == [
        ("order:a,b", "pass"),
        ("order:b,a", "broken"),
    ]


def test_duplicate_labels_raise() -> None:
    with pytest.raises(ValueError, match="duplicate"):
        judge(
            BRANCH,
            SCENARIO,
            TIER,
            "",
            [make_run("order:a"), make_run("order:a")],
            {"order:a": make_expected()},
            {},
            "strict",
        )


def test_violation_without_a_run_is_not_lost() -> None:
    orphan = make_violation(
        invariant="additivity", label="batch-vs-alone", detail="batch != sum of alone runs"
    )
    runs = [make_run("alone:a"), make_run("alone:b")]
    expected = {"alone:a": make_expected(), "alone:b": make_expected()}
    results = judge(
        BRANCH, SCENARIO, TIER, "", runs, expected, {"batch-vs-alone": [orphan]}, "strict"
    )
    assert [r.verdict for r in results] == ["broken", "pass"]
    assert results[0].violations == [orphan]


def test_unmeasured_gives_an_error_per_label() -> None:
    results = unmeasured(
        BRANCH, SCENARIO, "engine", STATEMENT, ["a", "b"], "env build failed", "strict"
    )
    assert [(r.label, r.verdict, r.error, r.tier, r.statement) for r in results] == [
        ("a", "error", "env build failed", "engine", STATEMENT),
        ("b", "error", "env build failed", "engine", STATEMENT),
    ]
    assert first_reason(results[0]) == "env build failed"


def test_first_reason_of_an_error_is_its_last_line() -> None:
    assert first_reason(
        make_result("error", error="Traceback (most recent call last):\n  x\nImportError: boom\n\n")
    ) == ("ImportError: boom")
    assert first_reason(make_result("error", error=None)) == "no detail"
    assert first_reason(make_result("pass")) == ""
    assert one_line("  \n ") == "no detail"
    # difftest's own error: the problem, not the fix alone (#29, case 5).
    assert one_line("branch 'x' changes binary files (vllm/x.bin)\n  fix: compare others") == (
        "branch 'x' changes binary files (vllm/x.bin)"
    )
    assert one_line("the problem\n  fix: one thing,\n  or another") == "the problem"


def test_first_reason_of_a_divergence_names_the_first_difference() -> None:
    result = judge_one(make_run(totals=make_totals(num_drafts=3, mean_acceptance_length=None)))
    assert first_reason(result) == "num_drafts: measured 3, oracle 4"


def _verdict(branch: str, verdict: str, label: str = LABEL) -> Result:
    return make_result(verdict, branch=branch, label=label)  # type: ignore[arg-type]


def test_summarize_counts_per_branch_with_zeros() -> None:
    results = [
        _verdict("a", "pass"),
        _verdict("a", "broken", "r2"),
        _verdict("a", "broken", "r3"),
        _verdict("b", "error"),
    ]
    summary = summarize(results)
    assert summary["a"] == {"pass": 1, "diverge": 0, "broken": 2, "error": 0}
    assert summary["b"]["error"] == 1 and summary["b"]["pass"] == 0
    assert list(summary) == ["a", "b"]


@pytest.mark.parametrize(
    "verdicts, code",
    [
        (["pass", "pass"], EXIT_OK),
        (["pass", "diverge"], EXIT_FAILED),
        (["pass", "broken"], EXIT_FAILED),
        (["error", "broken"], EXIT_FAILED),
        (["error", "diverge"], EXIT_FAILED),
        (["pass", "error"], EXIT_UNMEASURED),
        ([], EXIT_UNMEASURED),
    ],
)
def test_exit_code(verdicts: list[str], code: int) -> None:
    assert exit_code([_verdict("b", v, f"o{i}") for i, v in enumerate(verdicts)]) == code


def test_exit_code_values_follow_errors_module() -> None:
    assert (EXIT_OK, EXIT_FAILED, EXIT_UNMEASURED) == (0, 1, 3)


def test_worst_verdict() -> None:
    assert worst(["pass", "error", "diverge"]) == "diverge"
    assert worst(["pass", "broken", "error"]) == "broken"
    assert worst(["pass", "error"]) == "error"
    assert worst([]) == "pass"


@pytest.mark.parametrize(
    "value, text",
    [
        ([1, 2], "[1, 2]"),
        (2.75, "2.7500"),
        (None, "-"),
        (math.nan, "nan"),
        (True, "True"),
        ((1.5, None), "[1.5000, -]"),
        (7, "7"),
    ],
)
def test_format_value(value: object, text: str) -> None:
    assert format_value(value) == text
