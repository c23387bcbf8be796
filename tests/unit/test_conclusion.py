"""The conclusion is generated from the results: hand-built evidence for every standing, never the shipped names.

Each case builds the few results that make a branch's standing (broken with
named lost requests, could not measure, diverging on truncation, diverging on
rows, passing) under made-up branch and scenario names, so a sentence that
was written for the shipped branches instead of derived would fail here.
"""

from __future__ import annotations

from difftest.core.evidence import ScenarioEvidence
from difftest.core.records import Difference, Result
from difftest.core.verdicts import counter_differences, unmeasured
from difftest.reports.conclusion import conclude
from tests.factories import make_evidence, make_expected, make_result, make_run, make_totals, make_violation

ORDERS = {"order:p,g,q": ["p", "g", "q"], "order:p,q,g": ["p", "q", "g"], "order:g,p,q": ["g", "p", "q"]}


def evidence(results: list[Result], runs: dict | None = None, reading: str = "strict"):
    scenarios = {
        name: ScenarioEvidence(file=f"s/{name}.yaml", sha256="0" * 64, seed=0, tier="scheduler")
        for name in dict.fromkeys(r.scenario for r in results)
    }
    return make_evidence(results=results, runs=runs, scenarios=scenarios, branches={}, reading=reading)


def lost(label: str, requests: list[str]):
    return make_violation(invariant="stats-lost", label=label, detail="step 1: ...", requests=requests)


def diverging(branch: str, scenario: str, label: str = "order:a", **measured) -> Result:
    """A diverge result whose differences are the real ones between `measured` and the default oracle."""
    totals = make_totals(**measured)
    return make_result(
        "diverge", branch=branch, scenario=scenario, label=label, measured=totals,
        differences=counter_differences(totals, make_expected()),
    )


def test_broken_names_the_scenario_the_runs_and_the_lost_requests() -> None:
    results = [
        make_result("broken", branch="quick-fix", scenario="mixed", label="order:p,g,q", violations=[lost("order:p,g,q", ["p"])]),
        make_result("broken", branch="quick-fix", scenario="mixed", label="order:p,q,g", violations=[lost("order:p,q,g", ["p", "q"])]),
        make_result("pass", branch="quick-fix", scenario="mixed", label="order:g,p,q"),
        make_result("pass", branch="quick-fix", scenario="plain", label="order:a"),
    ]
    runs = {"quick-fix": [make_run(label, scenario="mixed", order=order) for label, order in ORDERS.items()]}
    (standing,) = conclude(evidence(results, runs)).standings
    assert standing.verdict == "broken"
    assert standing.headline == (
        "is broken in 2/4 runs; in mixed (2/3 runs) requests lose their stats: "
        "order p,g,q loses p; order p,q,g loses p, q"
    )


def test_broken_without_named_requests_quotes_the_invariant() -> None:
    violation = make_violation(invariant="additivity", label="order:a", detail="batch a: num_drafts=3, alone sum to 4")
    results = [make_result("broken", branch="b1", scenario="s1", violations=[violation])]
    (standing,) = conclude(evidence(results)).standings  # no runs recorded: the label names the run
    assert "invariants break: order:a: additivity: batch a: num_drafts=3" in standing.headline


def test_could_not_measure_says_how_many_and_why() -> None:
    results = unmeasured("ghost", "s1", "scheduler", "", ["order:a", "order:b"], "Traceback ...\nImportError: no vllm", "strict")
    results += [make_result("pass", branch="ghost", scenario="s2")]
    (standing,) = conclude(evidence(results)).standings
    assert standing.verdict == "error"
    assert standing.headline == "could not be measured in 2/3 runs (s1): ImportError: no vllm"


def test_diverge_on_truncation_is_called_an_overcount_and_says_why() -> None:
    # The oracle emits 11 of accepted + rows = 13 (a stop cut the step); the branch counts 13, implied.
    results = [
        diverging("old", "cut-a", num_emitted_tokens=13, emitted_source="implied", mean_acceptance_length=3.25),
        diverging("old", "cut-b", num_emitted_tokens=12, emitted_source="implied", mean_acceptance_length=3.0),
        make_result("pass", branch="old", scenario="control"),
    ]
    (standing,) = conclude(evidence(results)).standings
    assert standing.headline == (
        "diverges in 2/3 runs, overcounting emitted tokens on truncation: +2 in cut-a and cut-b "
        "(no emitted counter: its mean acceptance length assumes accepted + 1 per row)"
    )


def test_diverge_on_rows_gives_the_reading_and_folds_the_emitted_count_that_follows() -> None:
    extra_row = dict(num_drafts=5, num_emitted_tokens=12, mean_acceptance_length=2.4)
    results = [diverging("fix-a", "all-invalid", **extra_row), diverging("fix-a", "mixed", **extra_row)]
    (standing,) = conclude(evidence(results, reading="strict")).standings
    assert standing.headline == (
        "diverges in 2/2 runs, on num_drafts: +1 in all-invalid and mixed; "
        "strict reading: a request whose drafts are all grammar-invalid makes no row"
    )
    assert standing.also == []  # the emitted +1 follows from the extra row: not a finding of its own
    (lenient,) = conclude(evidence(results, reading="lenient")).standings
    assert lenient.headline.endswith("lenient reading: a request whose drafts are all grammar-invalid makes a row with 0 draft tokens")


def test_extra_rows_with_draft_tokens_are_not_a_question_of_the_reading() -> None:
    """A skipped drafter's zero-fill counted as drafts: rows AND draft tokens above the oracle."""
    zero_fill = dict(num_drafts=6, num_draft_tokens=15, num_draft_tokens_per_pos=[6, 5, 4], num_emitted_tokens=13)
    results = [diverging("fix-a", "drafter-skip", **zero_fill), diverging("fix-a", "engine-drafter-skip", **zero_fill)]
    for reading in ("strict", "lenient"):
        (standing,) = conclude(evidence(results, reading=reading)).standings
        assert standing.headline.startswith("diverges in 2/2 runs, on num_drafts: +2 in drafter-skip and engine-drafter-skip")
        assert "grammar-invalid" not in standing.headline and "skipped drafter's zero-fill" in standing.headline


def test_diverge_ranks_by_breadth_and_lists_the_rest() -> None:
    results = [
        diverging("x", f"s{i}", num_accepted_tokens=8, num_accepted_tokens_per_pos=[4, 3, 1], num_emitted_tokens=10,
                  mean_acceptance_length=2.5)
        for i in range(3)
    ] + [diverging("x", "s9", num_draft_tokens=13, num_draft_tokens_per_pos=[5, 4, 4])]
    (standing,) = conclude(evidence(results)).standings
    assert standing.headline.startswith("diverges in 4/4 runs, on num_accepted_tokens: up to -1 (s0) in 3 scenarios; the oracle: ")
    assert "also on num_draft_tokens: +1 in s9" in standing.also


def test_ranking_names_who_is_right() -> None:
    diverge = diverging("close", "s1", num_drafts=5, num_emitted_tokens=12, mean_acceptance_length=2.4)
    broken = make_result("broken", branch="racy", scenario="s1")
    passing = make_result("pass", branch="good", scenario="s1")
    assert conclude(evidence([passing, diverge, broken])).verdict == "good passes every run; broken: racy"
    assert conclude(evidence([diverge, broken])).verdict == (
        "closest to the oracle: close (nothing broken; 1/1 runs diverge); broken: racy"
    )
    both = [passing, make_result("pass", branch="also-good", scenario="s1")]
    assert conclude(evidence(both)).verdict == "good and also-good pass every run"
    assert conclude(evidence([broken])).verdict == "every branch is broken somewhere; fewest broken runs: racy"
    error = unmeasured("ghost", "s1", "scheduler", "", ["order:a"], "boom", "strict")
    assert conclude(evidence([diverge, *error])).verdict == "closest to the oracle: close (nothing broken; 1/1 runs diverge)"


def test_a_broken_branch_that_also_diverges_says_both() -> None:
    results = [
        make_result("broken", branch="b", scenario="s1", violations=[lost("order:a", ["a"])]),
        diverging("b", "s2", num_drafts=5, num_emitted_tokens=12, mean_acceptance_length=2.4),
    ]
    (standing,) = conclude(evidence(results)).standings
    assert standing.verdict == "broken" and standing.counts == {"broken": 1, "error": 0, "diverge": 1, "pass": 0}
    assert standing.also == ["also diverges in 1/2 runs, on num_drafts: +1 in s2; strict reading: a request whose drafts are all grammar-invalid makes no row"]


def test_differences_are_read_from_the_results_not_recomputed() -> None:
    """A difference the verdict recorded is what the conclusion reports (here a hand-written one)."""
    result = make_result(
        "diverge", branch="y", scenario="s", differences=[Difference(counter="num_draft_tokens_per_pos", measured=[5, 4, 4], expected=[4, 4, 4])]
    )
    (standing,) = conclude(evidence([result])).standings
    assert standing.headline.startswith("diverges in 1/1 runs, on num_draft_tokens_per_pos: +1 in s; the oracle: per position")


def test_many_broken_runs_are_named_up_to_a_limit() -> None:
    results = [
        make_result("broken", branch="racy", scenario="big", label=f"order:{i}", violations=[lost(f"order:{i}", ["a"])])
        for i in range(10)
    ]
    (standing,) = conclude(evidence(results)).standings
    assert standing.headline.endswith("order:5 loses a; and 4 more runs")
