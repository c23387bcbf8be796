"""The PR gate: is the head worse than the base? From hand-built `Result`s.

The gate compares verdict records, so the records are written by hand; each
case is the smallest pair of results that should (or should not) fail a PR.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from rich.console import Console

from difftest.core.errors import EXIT_FAILED, EXIT_OK, EXIT_UNMEASURED
from difftest.core.gate import compare_for_gate, distance, gate_exit_code
from difftest.core.records import Difference, Result, Verdict
from difftest.reports.gate_markdown import render_gate_markdown
from difftest.reports.gate_terminal import render_gate_terminal
from tests.factories import EMITTED, LABEL, SCENARIO, make_expected, make_result, make_totals


def result(
    verdict: Verdict = "pass", label: str = LABEL, reading: str = "strict", **measured: Any
) -> Result:
    """A result with this verdict; `measured` overrides counters of the oracle's totals
    (MAL derived from them)."""
    expected = make_expected()
    return make_result(
        verdict,
        label=label,
        reading=reading,
        measured=None
        if verdict == "error"
        else make_totals(**{"mean_acceptance_length": None, **measured}),
        differences=[
            Difference(counter=k, measured=v, expected=getattr(expected, k))
            for k, v in measured.items()
            if k != "mean_acceptance_length"
        ],
    )


def test_identical_passing_runs_are_not_worse() -> None:
    outcome = compare_for_gate([result()], [result()])
    assert not outcome.worse and outcome.reasons == [] and outcome.compared == 1
    assert outcome.findings == []
    assert gate_exit_code(outcome, [result()]) == EXIT_OK


def test_head_broken_anywhere_is_worse_even_if_base_is_broken() -> None:
    outcome = compare_for_gate([result("broken", num_drafts=2)], [result("broken", num_drafts=2)])
    assert outcome.worse
    assert any(
        "head is broken (base broken)" in r and "request a lost" in r for r in outcome.reasons
    )
    assert gate_exit_code(outcome, []) == EXIT_FAILED


def test_head_broken_on_a_run_the_base_never_had_is_worse() -> None:
    outcome = compare_for_gate([], [result("broken", label="order:new")])
    assert outcome.worse and "not run on base" in outcome.reasons[0]


@pytest.mark.parametrize("verdict", ["diverge", "broken"])
def test_pass_turning_bad_is_worse(verdict: Verdict) -> None:
    head = result(verdict, num_emitted_tokens=13)
    outcome = compare_for_gate([result()], [head])
    assert outcome.worse
    assert any(
        f.kind == ("broken" if verdict == "broken" else "regressed") and "base pass" in f.text
        for f in outcome.findings
    )
    assert any(
        f.kind == "further"
        and f.counter == "num_emitted_tokens"
        and (f.base, f.head, f.expected) == (EMITTED, 13, EMITTED)
        for f in outcome.findings
    )
    assert all(f.label == LABEL and f.scenario == SCENARIO for f in outcome.findings)


def test_diverging_less_than_base_is_not_worse_and_is_reported_as_better() -> None:
    base = result("diverge", num_emitted_tokens=13, mean_acceptance_length=3.25)
    head = result("diverge", num_emitted_tokens=12, mean_acceptance_length=3.0)
    outcome = compare_for_gate([base], [head])
    assert not outcome.worse
    assert {f.counter for f in outcome.improved} == {
        "num_emitted_tokens"
    }  # MAL is derived: not repeated
    assert gate_exit_code(outcome, [head]) == EXIT_OK


def test_same_divergence_is_not_worse_but_is_still_shown() -> None:
    outcome = compare_for_gate(
        [result("diverge", num_emitted_tokens=13)], [result("diverge", num_emitted_tokens=13)]
    )
    assert not outcome.worse and gate_exit_code(outcome, [result("diverge")]) == EXIT_OK
    assert [(f.kind, f.counter) for f in outcome.findings] == [("unchanged", "num_emitted_tokens")]
    assert outcome.unchanged == outcome.findings
    markdown = render_gate_markdown(outcome, "main", "head")
    assert "Still differs from the oracle, as on the base" in markdown and "distance 2" in markdown


def test_counter_further_from_oracle_is_worse() -> None:
    outcome = compare_for_gate(
        [result("diverge", num_emitted_tokens=12)], [result("diverge", num_emitted_tokens=14)]
    )
    assert outcome.worse
    (reason,) = outcome.reasons
    assert "num_emitted_tokens" in reason and "1 on base, 3 on head" in reason


def test_a_difference_beyond_the_totals_the_base_does_not_have_is_worse() -> None:
    """A log interval's line (or a request's own metrics) that the head gets wrong fails the gate
    even where the totals, and the verdict, are as on the base; the same difference on both sides
    does not."""

    def with_interval(mean: float) -> Result:
        found = result("diverge", num_emitted_tokens=13)
        interval = Difference(
            counter="log_interval.per_position", measured=[mean], expected=[0.5], explanation="x"
        )
        return found.model_copy(update={"differences": [*found.differences, interval]})

    same = compare_for_gate([with_interval(0.75)], [with_interval(0.75)])
    assert not same.worse
    # Nearer the oracle with another value is not worse.
    assert not compare_for_gate([with_interval(0.75)], [with_interval(0.6)]).worse
    outcome = compare_for_gate([with_interval(0.75)], [with_interval(1.0)])
    assert outcome.worse and gate_exit_code(outcome, [with_interval(1.0)]) == EXIT_FAILED
    (reason,) = outcome.reasons
    assert reason.startswith("log_interval.per_position is further from the oracle than on the")
    assert compare_for_gate([result("diverge", num_emitted_tokens=13)], [with_interval(1.0)]).worse


def test_per_position_distance_is_elementwise_sum() -> None:
    assert distance([4, 3, 2], [4, 3, 2]) == 0
    assert distance([5, 3, 0], [4, 3, 2]) == 3
    assert distance([4, 3], [4, 3, 2]) == 2  # a missing position counts as 0
    assert distance(None, None) == 0 and math.isinf(distance(None, 2.0))
    base = result("diverge", num_accepted_tokens_per_pos=[4, 3, 1])  # distance 1
    head = result("diverge", num_accepted_tokens_per_pos=[5, 3, 3])  # distance 2
    outcome = compare_for_gate([base], [head])
    assert outcome.worse and "num_accepted_tokens_per_pos" in outcome.reasons[0]


def test_mal_further_is_worse_beyond_tolerance_only() -> None:
    assert not compare_for_gate([result()], [result(mean_acceptance_length=2.75 + 1e-9)]).worse
    worse = compare_for_gate([result()], [result("diverge", mean_acceptance_length=3.0)])
    assert worse.worse and any(
        f.counter == "mean_acceptance_length" for f in worse.findings if f.kind == "further"
    )


def test_head_error_is_unmeasured_not_worse() -> None:
    head = [result("error")]
    outcome = compare_for_gate([result()], head)
    assert not outcome.worse
    (finding,) = outcome.unmeasured
    assert "base pass" in finding.text and "ImportError: boom" in finding.text
    assert "Traceback" not in finding.text  # the error's last line, not its first
    assert gate_exit_code(outcome, head) == EXIT_UNMEASURED


def test_worse_wins_over_unmeasured() -> None:
    head = [result("error", label="r1"), result("diverge", label="r2", num_drafts=3)]
    outcome = compare_for_gate([result(label="r1"), result(label="r2")], head)
    assert outcome.worse and outcome.unmeasured
    assert gate_exit_code(outcome, head) == EXIT_FAILED


def test_base_error_gives_nothing_to_compare_and_exits_3_naming_it() -> None:
    head = [result("diverge", num_drafts=3)]
    outcome = compare_for_gate([result("error")], head)
    assert not outcome.worse and outcome.compared == 0
    (finding,) = outcome.base_unmeasured
    assert finding.text == "could not measure the base: ImportError: boom"
    assert gate_exit_code(outcome, head) == EXIT_UNMEASURED
    md = render_gate_markdown(outcome, "main", "head")
    assert "could not measure the base (main)" in md and "ImportError: boom" in md
    assert "matches" not in md and "not worse" not in md


def test_a_base_that_ran_nothing_is_unmeasured() -> None:
    """Every base run missing from the results (say, its environment failed before any run)."""
    outcome = compare_for_gate([result("error", label="r1"), result("error", label="r2")], [])
    assert [f.label for f in outcome.base_unmeasured] == ["r1", "r2"]
    assert gate_exit_code(outcome, []) == EXIT_UNMEASURED


def test_nothing_compared_is_never_a_pass() -> None:
    """Head results with no base counterpart at all: nothing was compared, so no claim is made."""
    head = [result(label="only-on-head")]
    outcome = compare_for_gate([], head)
    assert outcome.compared == 0 and not outcome.worse
    assert gate_exit_code(outcome, head) == EXIT_UNMEASURED
    md = render_gate_markdown(outcome, "main", "head")
    assert "nothing was compared" in md and "matches" not in md


def test_a_broken_run_is_listed_only_as_worse() -> None:
    """Closer to the oracle on a counter, but broken:
    never also listed under "Better than the base"."""
    base = result("diverge", num_emitted_tokens=14)
    head = result("broken", num_emitted_tokens=12)
    outcome = compare_for_gate([base], [head])
    assert outcome.worse and not outcome.improved and not outcome.unchanged
    assert [f.kind for f in outcome.findings] == ["broken"]
    assert "Better than the base" not in render_gate_markdown(outcome, "main", "head")


def test_scenario_missing_on_head_is_unmeasured() -> None:
    head = [result(label="r1")]
    outcome = compare_for_gate([result(label="r1"), result(label="r2")], head)
    assert not outcome.worse
    assert [f.label for f in outcome.unmeasured] == ["r2"]
    assert gate_exit_code(outcome, head) == EXIT_UNMEASURED


def test_no_head_results_is_unmeasured() -> None:
    outcome = compare_for_gate([], [])
    assert gate_exit_code(outcome, []) == EXIT_UNMEASURED


def test_mixed_readings_are_refused() -> None:
    with pytest.raises(ValueError, match="readings"):
        compare_for_gate([result(reading="strict")], [result(reading="lenient")])


def test_outcome_records_the_reading() -> None:
    assert (
        compare_for_gate([result(reading="lenient")], [result(reading="lenient")]).reading
        == "lenient"
    )


def test_markdown_explains_why() -> None:
    outcome = compare_for_gate(
        [result("diverge", num_emitted_tokens=12)], [result("diverge", num_emitted_tokens=14)]
    )
    md = render_gate_markdown(outcome, "main", "pr|<b>")
    assert "is worse than main" in md
    assert "pr\\|&lt;b&gt;" in md and "<b>" not in md
    assert "**strict**" in md
    row = next(line for line in md.splitlines() if line.startswith(f"| {SCENARIO} |"))
    assert "| order:a | num\\_emitted\\_tokens | 12 | 14 | 11 |" in row


def test_markdown_when_not_worse_and_unmeasured() -> None:
    ok = render_gate_markdown(compare_for_gate([result()], [result()]), "main", "head")
    assert "is not worse than main" in ok
    assert "matches the oracle" in ok
    unmeasured = render_gate_markdown(
        compare_for_gate([result()], [result("error")]), "main", "head"
    )
    assert "could not measure" in unmeasured.lower() and "ImportError: boom" in unmeasured


def test_the_gate_outcome_for_a_person_reads_as_lines_that_are_never_cut() -> None:
    base = [make_result("pass", label="order:a,b"), make_result("pass", label="order:b,a")]
    head = [make_result("broken", label="order:a,b"), make_result("pass", label="order:b,a")]
    console = Console(record=True, width=60)
    render_gate_terminal(compare_for_gate(base, head), "main", "pr-56195-style", console)
    text = console.export_text()
    assert text.startswith("✗ difftest gate: pr-56195-style is worse than main")
    assert "Why it is worse (1)" in text and "[order:a,b]" in text
    assert "…" not in text and max(len(line.rstrip()) for line in text.splitlines()) <= 60
