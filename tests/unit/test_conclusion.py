"""The conclusion is generated from the results: hand-built evidence for every standing,
never the shipped names.

Each case builds the few results that make a branch's standing (broken with
named lost requests, could not measure, diverging on truncation, diverging on
rows, passing) under made-up branch and scenario names, so a sentence that
was written for the shipped branches instead of derived would fail here.
"""

from __future__ import annotations

from difftest.core.evidence import ScenarioEvidence
from difftest.core.records import Difference, Reading, Result, Totals
from difftest.core.verdicts import counter_differences, unmeasured
from difftest.reports.conclusion import conclude
from difftest.tiers.common.accounting import READINGS, RULES
from difftest.tiers.engine import oracle as engine_oracle
from difftest.tiers.engine.scenario import EngineScenario
from difftest.tiers.scheduler import oracle
from difftest.tiers.scheduler.scenario import Scenario
from difftest.tiers.scheduler.tier import SchedulerTier
from tests.factories import (
    all_invalid_step_run,
    make_evidence,
    make_expected,
    make_result,
    make_run,
    make_totals,
    make_violation,
)

ORDERS = {
    "order:p,g,q": ["p", "g", "q"],
    "order:p,q,g": ["p", "q", "g"],
    "order:g,p,q": ["g", "p", "q"],
}


def evidence(results: list[Result], runs: dict | None = None, reading: str = "strict"):
    scenarios = {
        name: ScenarioEvidence(file=f"s/{name}.yaml", sha256="0" * 64, seed=0, tier="scheduler")
        for name in dict.fromkeys(r.scenario for r in results)
    }
    return make_evidence(
        results=results, runs=runs, scenarios=scenarios, branches={}, reading=reading
    )


def lost(label: str, requests: list[str]):
    return make_violation(
        invariant="stats-lost", label=label, detail="step 1: ...", requests=requests
    )


def diverging(branch: str, scenario: str, label: str = "order:a", **measured) -> Result:
    """A diverge result whose differences are the real ones between `measured`
    and the default oracle."""
    totals = make_totals(**measured)
    return make_result(
        "diverge",
        branch=branch,
        scenario=scenario,
        label=label,
        measured=totals,
        differences=counter_differences(totals, make_expected()),
    )


def test_broken_names_the_scenario_the_runs_and_the_lost_requests() -> None:
    results = [
        make_result(
            "broken",
            branch="quick-fix",
            scenario="mixed",
            label="order:p,g,q",
            violations=[lost("order:p,g,q", ["p"])],
        ),
        make_result(
            "broken",
            branch="quick-fix",
            scenario="mixed",
            label="order:p,q,g",
            violations=[lost("order:p,q,g", ["p", "q"])],
        ),
        make_result("pass", branch="quick-fix", scenario="mixed", label="order:g,p,q"),
        make_result("pass", branch="quick-fix", scenario="plain", label="order:a"),
    ]
    runs = {
        "quick-fix": [
            make_run(label, scenario="mixed", order=order) for label, order in ORDERS.items()
        ]
    }
    (standing,) = conclude(evidence(results, runs)).standings
    assert standing.verdict == "broken"
    assert standing.headline == (
        "is broken in 2/4 runs; in mixed (2/3 runs) requests lose their stats: "
        "order p,g,q loses p; order p,q,g loses p, q"
    )


def test_broken_without_named_requests_quotes_the_invariant() -> None:
    violation = make_violation(
        invariant="additivity", label="order:a", detail="batch a: num_drafts=3, alone sum to 4"
    )
    results = [make_result("broken", branch="b1", scenario="s1", violations=[violation])]
    (standing,) = conclude(evidence(results)).standings  # no runs recorded: the label names the run
    assert "invariants break: order:a: additivity: batch a: num_drafts=3" in standing.headline


def test_could_not_measure_says_how_many_and_why() -> None:
    results = unmeasured(
        "ghost",
        "s1",
        "scheduler",
        "",
        ["order:a", "order:b"],
        "Traceback ...\nImportError: no vllm",
        "strict",
    )
    results += [make_result("pass", branch="ghost", scenario="s2")]
    (standing,) = conclude(evidence(results)).standings
    assert standing.verdict == "error"
    assert standing.headline == "could not be measured in 2/3 runs (s1): ImportError: no vllm"


def test_diverge_on_truncation_is_called_an_overcount_and_says_why() -> None:
    # The oracle emits 11 of accepted + rows = 13 (a stop cut the step);
    # the branch counts 13, implied.
    results = [
        diverging(
            "old",
            "cut-a",
            num_emitted_tokens=13,
            emitted_source="implied",
            mean_acceptance_length=3.25,
        ),
        diverging(
            "old",
            "cut-b",
            num_emitted_tokens=12,
            emitted_source="implied",
            mean_acceptance_length=3.0,
        ),
        make_result("pass", branch="old", scenario="control"),
    ]
    (standing,) = conclude(evidence(results)).standings
    assert standing.headline == (
        "diverges in 2/3 runs, overcounting emitted tokens on truncation: +2 in cut-a and cut-b "
        "(no emitted counter: its mean acceptance length assumes accepted + 1 per row)"
    )


def test_diverge_on_rows_states_the_rule_and_folds_the_emitted_count_that_follows() -> None:
    """No scenario facts here (made-up scenarios): the rule, never a reading nobody can check
    (issue 19, item 13)."""
    extra_row = dict(num_drafts=5, num_emitted_tokens=12, mean_acceptance_length=2.4)
    results = [
        diverging("fix-a", "all-invalid", **extra_row),
        diverging("fix-a", "mixed", **extra_row),
    ]
    for reading in ("strict", "lenient"):
        (standing,) = conclude(evidence(results, reading=reading)).standings
        assert standing.headline == (
            "diverges in 2/2 runs, on num_drafts: +1 in all-invalid and mixed; the oracle: "
            + RULES["num_drafts"]
        )
        assert (
            standing.also == []
        )  # the emitted +1 follows from the extra row: not a finding of its own


def test_extra_rows_with_draft_tokens_are_not_a_question_of_the_reading() -> None:
    """A skipped drafter's zero-fill counted as drafts: rows AND draft tokens above the oracle."""
    zero_fill = dict(
        num_drafts=6, num_draft_tokens=15, num_draft_tokens_per_pos=[6, 5, 4], num_emitted_tokens=13
    )
    results = [
        diverging("fix-a", "drafter-skip", **zero_fill),
        diverging("fix-a", "engine-drafter-skip", **zero_fill),
    ]
    for reading in ("strict", "lenient"):
        (standing,) = conclude(evidence(results, reading=reading)).standings
        # The rows and their draft tokens move together: one effect, named together (#34).
        assert standing.headline.startswith(
            "diverges in 2/2 runs, on num_drafts +2, num_draft_tokens +3 in drafter-skip and "
            "engine-drafter-skip; the oracle: "
        )
        assert (
            "grammar-invalid" not in standing.headline
            and "skipped drafter's zero-fill" in standing.headline
        )


def test_diverge_ranks_by_breadth_and_lists_the_rest() -> None:
    results = [
        diverging(
            "x",
            f"s{i}",
            num_accepted_tokens=8,
            num_accepted_tokens_per_pos=[4, 3, 1],
            num_emitted_tokens=10,
            mean_acceptance_length=2.5,
        )
        for i in range(3)
    ] + [diverging("x", "s9", num_draft_tokens=13, num_draft_tokens_per_pos=[5, 4, 4])]
    (standing,) = conclude(evidence(results)).standings
    assert standing.headline.startswith(
        "diverges in 4/4 runs, on num_accepted_tokens: up to -1 (s0) in 3 scenarios; the oracle: "
    )
    assert "also num_draft_tokens +1 in s9" in standing.also


def test_per_request_figures_are_one_finding_sized_by_the_mean() -> None:
    """Every differing figure of the responses' own metrics is one finding (not one per figure,
    nor one per request), runs counted once, sized by the mean a user reads; a finished request
    without metrics is said in words."""

    def figures(label: str, *names: str, mean: float = 3.0) -> Result:
        diffs = [
            Difference(counter=f"request_metrics.{name}", measured=mean, expected=2.0)
            if name == "mean_acceptance_length"
            else Difference(counter=f"request_metrics.{name}", measured=None, expected="r")
            for name in names
        ]
        return make_result(
            "diverge", branch="x", scenario="per-req", label=label, differences=diffs
        )

    results = [
        figures("order:a,b", "mean_acceptance_length", "missing", "mean_acceptance_length"),
        figures("alone:a", "mean_acceptance_length", mean=4.0),
        diverging("x", "plain", label="order:c", num_draft_tokens=13),
    ]
    (standing,) = conclude(evidence(results)).standings
    assert standing.headline.startswith(
        "diverges in 3/3 runs, on per-request metrics: mean_acceptance_length +2, none returned "
        "for a finished request in per-req; the oracle: " + RULES["request_metrics"]
    )
    assert "also num_draft_tokens +1 in plain" in standing.also


def test_a_finding_several_branches_share_is_said_once_naming_who_has_it() -> None:
    """The same further finding on every branch is one line; a broken branch, whose diverging
    runs fold into one `also` line, still counts as having it."""
    shared = dict(num_draft_tokens=13)
    lead = dict(num_accepted_tokens=8, num_accepted_tokens_per_pos=[4, 3, 1])
    results = [
        diverging(branch, scenario, label, **kwargs)
        for branch in ("fix-a", "fix-b", "racy")
        for scenario, label, kwargs in (
            ("s1", "order:a", lead),
            ("s2", "order:a", lead),
            ("t", "order:b", shared),
        )
    ] + [
        make_result(
            "broken",
            branch="racy",
            scenario="mixed",
            label="order:p,g,q",
            violations=[lost("order:p,g,q", ["p"])],
        )
    ]
    conclusion = conclude(evidence(results))
    assert [(s.who, s.text) for s in conclusion.shared] == [
        ("every branch", "num_draft_tokens +1 in t")
    ]
    assert all(
        "num_draft_tokens +1 in t" not in line for s in conclusion.standings for line in s.also
    )


def test_the_oracles_rule_is_given_once_and_referred_to_after() -> None:
    """#34: six branches repeating the same rule once pushed "why main is wrong" off the screen."""
    zero_fill = dict(num_drafts=6, num_draft_tokens=15, num_draft_tokens_per_pos=[6, 5, 4])
    results = [
        diverging(branch, scenario, **zero_fill)
        for branch in ("fix-a", "fix-b")
        for scenario in ("drafter-skip", "engine-drafter-skip", "pd-decode-node")
    ]
    first, second = conclude(evidence(results)).standings
    assert first.headline.count(RULES["num_drafts"]) == 1
    assert RULES["num_drafts"] not in second.headline
    assert second.headline.endswith("; the oracle's rule, as for fix-a")
    # Per-position draft tokens adding up to the draft tokens' own difference are not repeated.
    assert "num_draft_tokens_per_pos" not in first.headline
    assert "num_drafts +2, num_draft_tokens +3 (drafter-skip) in 3 scenarios" in first.headline


def test_ranking_names_who_is_right() -> None:
    diverge = diverging(
        "close", "s1", num_drafts=5, num_emitted_tokens=12, mean_acceptance_length=2.4
    )
    broken = make_result("broken", branch="racy", scenario="s1")
    passing = make_result("pass", branch="good", scenario="s1")
    assert (
        conclude(evidence([passing, diverge, broken])).verdict
        == "good passes every run; broken: racy"
    )
    assert conclude(evidence([diverge, broken])).verdict == (
        "closest to the oracle: close (nothing broken; 1/1 runs diverge); broken: racy"
    )
    both = [passing, make_result("pass", branch="also-good", scenario="s1")]
    assert conclude(evidence(both)).verdict == "good and also-good pass every run"
    assert (
        conclude(evidence([broken])).verdict
        == "every branch is broken somewhere; fewest broken runs: racy"
    )
    error = unmeasured("ghost", "s1", "scheduler", "", ["order:a"], "boom", "strict")
    assert (
        conclude(evidence([diverge, *error])).verdict
        == "closest to the oracle: close (nothing broken; 1/1 runs diverge)"
    )


def test_a_broken_branch_that_also_diverges_says_both() -> None:
    results = [
        make_result("broken", branch="b", scenario="s1", violations=[lost("order:a", ["a"])]),
        diverging("b", "s2", num_drafts=5, num_emitted_tokens=12, mean_acceptance_length=2.4),
    ]
    (standing,) = conclude(evidence(results)).standings
    assert standing.verdict == "broken" and standing.counts == {
        "broken": 1,
        "error": 0,
        "diverge": 1,
        "pass": 0,
    }
    assert standing.also == [
        "also diverges in 1/2 runs, on num_drafts: +1 in s2; the oracle: " + RULES["num_drafts"]
    ]


def test_differences_are_read_from_the_results_not_recomputed() -> None:
    """A difference the verdict recorded is what the conclusion reports
    (here a hand-written one)."""
    result = make_result(
        "diverge",
        branch="y",
        scenario="s",
        differences=[
            Difference(counter="num_draft_tokens_per_pos", measured=[5, 4, 4], expected=[4, 4, 4])
        ],
    )
    (standing,) = conclude(evidence([result])).standings
    assert standing.headline.startswith(
        "diverges in 1/1 runs, on num_draft_tokens_per_pos: +1 in s; the oracle: per position"
    )


def test_many_broken_runs_are_named_up_to_a_limit() -> None:
    results = [
        make_result(
            "broken",
            branch="racy",
            scenario="big",
            label=f"order:{i}",
            violations=[lost(f"order:{i}", ["a"])],
        )
        for i in range(10)
    ]
    (standing,) = conclude(evidence(results)).standings
    assert standing.headline.endswith("order:5 loses a; and 4 more runs")


# -- issue 19, item 12: a branch with nothing measured is never ranked closest ------------------


def test_a_branch_with_nothing_measured_is_never_ranked_closest() -> None:
    hang = unmeasured(
        "f-hang",
        "s1",
        "scheduler",
        "",
        ["order:a", "order:b", "order:c", "order:d"],
        "timeout",
        "strict",
    )
    broken = make_result("broken", branch="racy", scenario="s1")
    verdict = conclude(evidence([broken, *hang])).verdict
    assert "closest" not in verdict and "f-hang" not in verdict
    assert verdict == "every measured branch is broken somewhere; fewest broken runs: racy"
    partly = [
        make_result("pass", branch="half", scenario="s1"),
        *unmeasured("half", "s2", "scheduler", "", ["order:a"], "boom", "strict"),
    ]
    assert (
        conclude(evidence([*partly, *hang])).verdict
        == "closest to the oracle: half (nothing broken; 1/2 could not be measured)"
    )


def test_when_no_branch_has_a_measured_run_nothing_is_ranked() -> None:
    results = [
        *unmeasured("f-hang", "s1", "scheduler", "", ["order:a", "order:b"], "timeout", "strict"),
        *unmeasured(
            "main", "s1", "scheduler", "", ["order:a", "order:b"], "ImportError: no vllm", "strict"
        ),
    ]
    verdict = conclude(evidence(results)).verdict
    assert "closest" not in verdict
    assert verdict == "nothing was measured: no run of f-hang or main could be measured"


# -- issue 19, item 13: the reading is the reason only where the scenario has an all-invalid request

#: A request whose every draft the choice grammar rejects (async: -1 padded):
#: the readings differ on it.
ALL_INVALID = {
    "name": "yes-or-no",
    "statement": "every draft of the grammar request is rejected",
    "k": 3,
    "draft_path": "async",
    "requests": [
        {
            "id": "g",
            "prompt": "ok?",
            "max_tokens": 10,
            "grammar": {"choice": ["yes", "no"]},
            "target": "yes<eos>",
            "drafter": {"kind": "scripted", "steps": ["zzz", "zzz", "zzz"], "then": "perfect"},
        }
    ],
}
#: No grammar at all: EOS is the bonus token. The readings agree on every run.
NO_GRAMMAR = {
    "name": "bonus-end",
    "statement": "EOS is the bonus token",
    "k": 3,
    "orders": "all",
    "requests": [
        {
            "id": "e",
            "prompt": "hi",
            "max_tokens": 20,
            "target": "xabc<eos>",
            "drafter": {"kind": "scripted", "steps": ["abc"]},
        },
        {
            "id": "p",
            "prompt": "go",
            "max_tokens": 9,
            "target": "abcdefghij",
            "drafter": {"kind": "scripted", "steps": [], "then": "perfect"},
        },
    ],
}
#: A grammar, but only the last draft of each step is invalid: no request is ALL invalid,
#: the readings agree.
PARTLY_INVALID = {
    "name": "spell",
    "statement": "the last draft of each step is rejected",
    "k": 3,
    "draft_path": "async",
    "requests": [
        {
            "id": "g",
            "prompt": "spell",
            "max_tokens": 20,
            "grammar": {"choice": ["abcdef"]},
            "target": "abcdef<eos>",
            "drafter": {"kind": "scripted", "steps": ["bcz", "efz"], "then": "perfect"},
        }
    ],
}


def scenario_of(raw: dict) -> Scenario:
    """The scenario as the tier's loader validates it (the very object a run is made from)."""
    return SchedulerTier().parse_scenario(raw, f"<{raw['name']}>")


def counted(
    scenario: Scenario, label: str, reading: Reading, measured: Totals, branch: str = "fix-a"
) -> Result:
    """The result of a branch that measured `measured` on one planned run,
    judged by the real oracle."""
    run = next(r for r in scenario.runs() if r["label"] == label)
    expected = oracle.expected_totals(scenario, run["order"], reading)
    return make_result(
        "diverge",
        branch=branch,
        scenario=scenario.name,
        label=label,
        reading=reading,
        measured=measured,
        expected=expected,
        differences=counter_differences(measured, expected),
    )


def one_more_row(totals: Totals) -> Totals:
    """What a branch counting one more row (with no draft token, emitting one token) reports."""
    rows, emitted = totals.num_drafts + 1, totals.num_emitted_tokens + 1
    return totals.model_copy(
        update={
            "num_drafts": rows,
            "num_emitted_tokens": emitted,
            "mean_acceptance_length": emitted / rows,
        }
    )


def test_an_extra_row_where_no_request_is_all_grammar_invalid_gives_no_reading() -> None:
    """The excess `num_drafts` in a scenario without an all-invalid request is not the reading's."""
    for raw in (NO_GRAMMAR, PARTLY_INVALID):
        scenario = scenario_of(raw)
        label = scenario.runs()[0]["label"]
        result = counted(
            scenario,
            label,
            "strict",
            one_more_row(oracle.expected_totals(scenario, scenario.runs()[0]["order"])),
        )
        for facts in ({}, {"scenarios": {scenario.name: scenario}}):
            (standing,) = conclude(evidence([result]), **facts).standings
            assert standing.headline.startswith(
                f"diverges in 1/1 runs, on num_drafts: +1 in {scenario.name}"
            ), standing.headline
            assert (
                "reading" not in standing.headline
                and "grammar-invalid makes" not in standing.headline
            )


def test_the_reading_is_the_reason_only_where_the_scenario_has_an_all_invalid_request() -> None:
    scenario = scenario_of(ALL_INVALID)
    (run,) = scenario.runs()
    lenient = oracle.expected_totals(scenario, run["order"], "lenient")
    strict = oracle.expected_totals(scenario, run["order"], "strict")
    assert lenient.num_drafts > strict.num_drafts  # the fact the reason rests on
    facts = {scenario.name: scenario}
    # A branch that counts the all-invalid rows, judged strictly:
    # the strict reading is why it differs.
    too_many = counted(scenario, run["label"], "strict", lenient)
    (standing,) = conclude(evidence([too_many], reading="strict"), scenarios=facts).standings
    assert standing.headline == (
        f"diverges in 1/1 runs, on num_drafts: +{lenient.num_drafts - strict.num_drafts} "
        "in yes-or-no; "
        "strict reading: " + READINGS["strict"]
    )
    assert (
        standing.also == []
    )  # the emitted count that follows the rows is not a finding of its own
    # The reverse, judged leniently.
    too_few = counted(scenario, run["label"], "lenient", strict)
    (standing,) = conclude(evidence([too_few], reading="lenient"), scenarios=facts).standings
    assert standing.headline.endswith("lenient reading: " + READINGS["lenient"])
    # Without the scenario the conclusion cannot know: it states the rule, not a reason.
    (blind,) = conclude(evidence([too_many], reading="strict")).standings
    assert "reading" not in blind.headline and blind.headline.endswith(
        "; the oracle: " + RULES["num_drafts"]
    )
    # A row count the other reading does not explain (one more still) is not the reading's either.
    beyond = counted(scenario, run["label"], "strict", one_more_row(lenient))
    (standing,) = conclude(evidence([beyond], reading="strict"), scenarios=facts).standings
    assert "reading" not in standing.headline


def test_the_reading_is_read_from_a_recorded_run_with_its_steps() -> None:
    """The engine tier's oracle reads the run's steps (stripped from the evidence): given the
    recorded run, a step whose scheduled drafts were all invalidated is the fact."""
    run = all_invalid_step_run()
    strict = engine_oracle.expected_totals(3, run, "strict")
    lenient = engine_oracle.expected_totals(3, run, "lenient")
    assert lenient.num_drafts == strict.num_drafts + 1
    result = make_result(
        "diverge",
        branch="b",
        scenario="eng",
        tier="engine",
        label="order:g",
        measured=lenient,
        expected=strict,
        differences=counter_differences(lenient, strict),
    )
    scenario = EngineScenario.model_validate(
        {
            "name": "eng",
            "statement": "a structured request",
            "k": 3,
            "requests": [{"id": "g", "prompt": "ok?", "max_tokens": 8}],
        }
    )
    found = evidence([result])
    (stepless,) = conclude(
        found, scenarios={"eng": scenario}
    ).standings  # the evidence keeps no steps
    assert "reading" not in stepless.headline
    (standing,) = conclude(
        found, scenarios={"eng": scenario}, recorded={("b", "eng", "order:g"): run}
    ).standings
    assert standing.headline.endswith("strict reading: " + READINGS["strict"])
