"""Verdicts, summaries and exit codes, from hand-built data.

This layer's input is data - `ProbeRun`s from the probe, expected `Totals`
from the oracle, `Violation`s from the invariants - so building those by hand
is the honest way to test it; no vLLM is involved.
"""

from __future__ import annotations

import math

import pytest

from difftest.core.errors import EXIT_FAILED, EXIT_OK, EXIT_UNMEASURED
from difftest.core.records import ProbeRun, Result, Totals, Violation
from tests.factories import ORACLE
from difftest.core.verdicts import (
    MAL,
    counter_differences,
    exit_code,
    first_reason,
    format_value,
    judge,
    measured_mal,
    oracle_mal,
    summarize,
    unmeasured,
    worst,
)

STATEMENT = "EOS inside accepted drafts: emitted < accepted + 1"


def totals(**overrides) -> Totals:
    """Four rows, k=3, 9 accepted, EOS cut: 11 emitted (oracle MAL 2.75)."""
    base = ORACLE.model_dump() | {"emitted_source": "num_emitted_tokens", "mean_acceptance_length": 2.75}
    return Totals(**{**base, **overrides})


def run(label: str = "r1", **kwargs) -> ProbeRun:
    kwargs.setdefault("totals", totals())
    return ProbeRun(scenario="eos", tier="scheduler", order=label.split(","), label=label, **kwargs)


def judge_one(probe: ProbeRun, expected: Totals | None = None, violations: list[Violation] | None = None) -> Result:
    expected_map = {probe.label: expected or totals()}
    (result,) = judge("br", "eos", "scheduler", STATEMENT, [probe], expected_map, {probe.label: violations or []}, "strict")
    return result


def test_pass_when_everything_matches() -> None:
    result = judge_one(run())
    assert result.verdict == "pass"
    assert result.differences == [] and result.error is None
    assert (result.branch, result.scenario, result.order, result.reading) == ("br", "eos", "r1", "strict")


def test_diverge_names_counter_values_and_statement() -> None:
    measured = totals(num_emitted_tokens=13, emitted_source="implied", mean_acceptance_length=3.25)
    result = judge_one(run(totals=measured))
    assert result.verdict == "diverge"
    assert result.explanation == STATEMENT
    first = result.differences[0]
    assert (first.counter, first.measured, first.expected) == ("num_emitted_tokens", 13, 11)
    assert "no emitted counter" in first.explanation
    # MAL follows emitted: the same story, recorded after the counter.
    assert [d.counter for d in result.differences] == ["num_emitted_tokens", MAL]


def test_per_position_lists_compare_as_lists() -> None:
    result = judge_one(run(totals=totals(num_accepted_tokens_per_pos=[4, 3, 1])))
    assert result.verdict == "diverge"
    assert result.differences[0].counter == "num_accepted_tokens_per_pos"
    assert result.differences[0].measured == [4, 3, 1]


def test_mal_alone_is_a_divergence() -> None:
    # Counters right, but the branch logs MAL with the old formula: users see a wrong number.
    result = judge_one(run(totals=totals(mean_acceptance_length=3.25)))
    assert result.verdict == "diverge"
    (diff,) = result.differences
    assert diff.counter == MAL and diff.measured == 3.25 and diff.expected == pytest.approx(2.75)


def test_mal_within_tolerance_is_equal() -> None:
    result = judge_one(run(totals=totals(mean_acceptance_length=2.75 + 1e-9)))
    assert result.verdict == "pass"


def test_mal_falls_back_to_counters_when_branch_logs_none() -> None:
    assert measured_mal(totals(mean_acceptance_length=None)) == pytest.approx(2.75)
    assert measured_mal(totals(mean_acceptance_length=math.nan)) == pytest.approx(2.75)
    assert measured_mal(totals(num_drafts=0, mean_acceptance_length=None)) is None
    assert oracle_mal(totals(num_drafts=0)) is None
    assert oracle_mal(totals()) == pytest.approx(11 / 4)


def test_no_drafts_on_both_sides_is_no_mal_difference() -> None:
    zero = Totals()
    assert counter_differences(zero, zero) == []
    diffs = counter_differences(totals(), zero)
    assert MAL in [d.counter for d in diffs]


def test_broken_wins_over_diverge_and_keeps_both() -> None:
    violation = Violation(invariant="order_independence", label="r1", detail="2 requests lost", counter="num_drafts", measured=2, expected=4)
    result = judge_one(run(totals=totals(num_drafts=2)), violations=[violation])
    assert result.verdict == "broken"
    assert result.violations == [violation]
    assert result.differences and result.differences[0].counter == "num_drafts"
    assert first_reason(result) == "order_independence: 2 requests lost"


def test_broken_even_when_counters_match() -> None:
    violation = Violation(invariant="accepted_le_drafted", label="r1", detail="accepted 13 > drafted 12")
    assert judge_one(run(), violations=[violation]).verdict == "broken"


@pytest.mark.parametrize(
    "probe, needle",
    [
        (run(status="error", error="ImportError: no module", totals=None), "ImportError"),
        (run(status="timeout", error=None, totals=None), "timeout"),
        (run(status="ok", totals=None), "no totals"),
        (run(status="error", error="crash after totals"), "crash after totals"),
    ],
)
def test_error_when_not_measured(probe: ProbeRun, needle: str) -> None:
    result = judge_one(probe)
    assert result.verdict == "error"
    assert needle in (result.error or "")


def test_error_wins_over_violations() -> None:
    violation = Violation(invariant="x", label="r1", detail="d")
    result = judge_one(run(status="error", error="boom", totals=None), violations=[violation])
    assert result.verdict == "error"


def test_missing_oracle_totals_is_an_error_not_a_pass() -> None:
    probe = run()
    (result,) = judge("br", "eos", "scheduler", STATEMENT, [probe], {}, {}, "lenient")
    assert result.verdict == "error" and "oracle" in (result.error or "")
    assert result.reading == "lenient"


def test_one_result_per_run_keyed_by_label() -> None:
    runs = [run("a,b"), run("b,a", totals=totals(num_drafts=3))]
    violation = Violation(invariant="order_independence", label="b,a", detail="lost")
    results = judge("br", "eos", "scheduler", STATEMENT, runs, {"a,b": totals(), "b,a": totals()}, {"b,a": [violation]}, "strict")
    assert [(r.order, r.verdict) for r in results] == [("a,b", "pass"), ("b,a", "broken")]


def test_duplicate_labels_raise() -> None:
    with pytest.raises(ValueError, match="duplicate"):
        judge("br", "eos", "scheduler", "", [run("a"), run("a")], {"a": totals()}, {}, "strict")


def test_violation_without_a_run_is_not_lost() -> None:
    orphan = Violation(invariant="batch_equals_sum", label="batch-vs-alone", detail="batch != sum of alone runs")
    results = judge("br", "eos", "scheduler", "", [run("a"), run("b")], {"a": totals(), "b": totals()}, {"batch-vs-alone": [orphan]}, "strict")
    assert [r.verdict for r in results] == ["broken", "pass"]
    assert results[0].violations == [orphan]


def test_unmeasured_gives_an_error_per_label() -> None:
    results = unmeasured("br", "eos", "engine", STATEMENT, ["a", "b"], "env build failed", "strict")
    assert [(r.order, r.verdict, r.error, r.tier) for r in results] == [
        ("a", "error", "env build failed", "engine"),
        ("b", "error", "env build failed", "engine"),
    ]
    assert first_reason(results[0]) == "env build failed"


def _result(branch: str, verdict: str, order: str = "r1") -> Result:
    return Result(branch=branch, scenario="eos", tier="scheduler", order=order, verdict=verdict, reading="strict")


def test_summarize_counts_per_branch_with_zeros() -> None:
    results = [_result("a", "pass"), _result("a", "broken", "r2"), _result("a", "broken", "r3"), _result("b", "error")]
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
    assert exit_code([_result("b", v, f"o{i}") for i, v in enumerate(verdicts)]) == code


def test_exit_code_values_follow_errors_module() -> None:
    assert (EXIT_OK, EXIT_FAILED, EXIT_UNMEASURED) == (0, 1, 3)


def test_worst_and_format_value() -> None:
    assert worst(["pass", "error", "diverge"]) == "diverge"
    assert worst(["pass", "broken", "error"]) == "broken"
    assert worst([]) == "pass"
    assert format_value([1, 2]) == "[1, 2]"
    assert format_value(2.75) == "2.7500"
    assert format_value(None) == "-"
