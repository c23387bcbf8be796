"""Invariants on hand-made runs: lost stats and order dependence must be flagged (pure, fast).

The generic checks (`tiers.common.invariants`) take recorded runs, so runs are
built by hand with exactly the flaw under test; runs are told apart by their
`role`, never by their label, which the tests check by giving misleading labels.
The scheduler tier's own check ("outputs follow the script") needs a scenario,
built inline from the smallest script that shows it.
"""

from __future__ import annotations

from typing import Any

from difftest.core.records import ProbeRun, RunRole, StepRecord, Totals
from difftest.probe.scheduler import script
from difftest.tiers.common.invariants import (
    COMPARED,
    ByLabel,
    across_orders,
    batches_and_alone,
    per_run_checks,
    reference_run,
)
from difftest.tiers.scheduler import invariants as scheduler_invariants
from difftest.tiers.scheduler.oracle import expected_outputs
from difftest.tiers.scheduler.scenario import Scenario
from tests.factories import K, make_run, make_step, make_step_stats, make_totals


def counts(drafts: int, tokens: int, accepted: int, emitted: int | None = None) -> Totals:
    """Totals of `drafts` rows filling k=3 positions in turn; emitted implied unless given
    (then counted)."""
    per_tok = [drafts if tokens >= drafts * (i + 1) else 0 for i in range(K)]
    per_acc = [min(drafts, max(0, accepted - i * drafts)) for i in range(K)]
    return make_totals(
        num_drafts=drafts,
        num_draft_tokens=tokens,
        num_accepted_tokens=accepted,
        num_accepted_tokens_per_pos=per_acc,
        num_draft_tokens_per_pos=per_tok,
        num_emitted_tokens=drafts + accepted if emitted is None else emitted,
        emitted_source="implied" if emitted is None else "counter:num_emitted_tokens",
        mean_acceptance_length=None,
    )


def plus(*parts: Totals) -> Totals:
    """What a batch of these requests must report: the field-wise sum."""

    def add(name: str) -> Any:
        values = [getattr(p, name) for p in parts]
        if isinstance(values[0], list):
            return [sum(col) for col in zip(*values, strict=True)]
        return sum(values)

    return make_totals(**{n: add(n) for n in COMPARED})


def run(
    label: str,
    totals: Totals,
    steps: list[StepRecord] | None = None,
    role: RunRole | None = None,
    **kw: Any,
) -> ProbeRun:
    return make_run(label, role=role, totals=totals, steps=steps or [], **kw)


def check(runs: list[ProbeRun]) -> ByLabel:
    """The generic checks as a tier runs them: per run, then across batch orders."""
    found = per_run_checks(runs)
    across_orders(found, *batches_and_alone(runs))
    return found


A, B = counts(1, 3, 3), counts(2, 6, 3)


def test_consistent_runs_have_no_violations() -> None:
    both = plus(A, B)
    runs = [run("order:a,b", both), run("order:b,a", both), run("alone:a", A), run("alone:b", B)]
    assert check(runs) == {r.label: [] for r in runs}


def test_order_dependence_flags_only_the_deviating_order() -> None:
    runs = [
        run("order:a,b", plus(A, B)),
        run("order:b,a", counts(1, 3, 3)),
        run("alone:a", A),
        run("alone:b", B),
    ]
    found = check(runs)
    assert found["order:a,b"] == []
    kinds = {v.invariant for v in found["order:b,a"]}
    assert kinds == {"order-independence", "additivity"}
    detail = next(v for v in found["order:b,a"] if v.counter == "num_drafts").detail
    assert "b,a" in detail and "sum of the requests run alone" in detail


def test_runs_are_compared_by_role_not_by_label() -> None:
    # Labels that look like the opposite role: the checks must go by `role`.
    runs = [
        run("alone:x", plus(A, B), role="batch", order=["a", "b"]),
        run("alone:y", counts(1, 3, 3), role="batch", order=["b", "a"]),
        run("order:a", A, role="alone", order=["a"]),
        run("order:b", B, role="alone", order=["b"]),
    ]
    batches, alone = batches_and_alone(runs)
    assert [r.label for r in batches] == ["alone:x", "alone:y"] and set(alone) == {"a", "b"}
    found = check(runs)
    assert found["alone:x"] == [] and found["order:a"] == [] and found["order:b"] == []
    assert {v.invariant for v in found["alone:y"]} == {"order-independence", "additivity"}


def test_reference_runs_are_neither_batches_nor_alone() -> None:
    runs = [run("order:a", A), run("reference:a", counts(2, 6, 6))]
    batches, alone = batches_and_alone(runs)
    assert [r.label for r in batches] == ["order:a"] and alone == {}
    assert check(runs) == {"order:a": [], "reference:a": []}


def test_unmeasured_runs_are_not_checked() -> None:
    runs = [
        run("order:a,b", plus(A, B)),
        make_run("order:b,a", totals=None, status="error", error="boom"),
    ]
    assert check(runs) == {"order:a,b": []}


def test_majority_is_the_reference_without_alone_runs() -> None:
    same = counts(3, 9, 6)
    runs = [
        run("order:a,b,c", same),
        run("order:b,a,c", same),
        run("order:c,b,a", counts(2, 6, 4)),
    ]
    found = check(runs)
    assert found["order:a,b,c"] == [] and found["order:b,a,c"] == []
    assert {v.invariant for v in found["order:c,b,a"]} == {"order-independence"}
    assert "2 of 3 orders agree" in found["order:c,b,a"][0].detail


def test_a_tie_takes_the_first_listed_order_and_one_order_has_no_reference() -> None:
    first, second = run("order:a,b", counts(1, 3, 3)), run("order:b,a", counts(2, 6, 3))
    name, _ = reference_run([first, second], {})  # type: ignore[misc]
    assert name.startswith("order:a,b (1 of 2")
    assert reference_run([first], {}) is None


def test_additivity_needs_every_request_alone() -> None:
    runs = [run("order:a,b", counts(5, 15, 15)), run("alone:a", A)]  # no alone:b: nothing to add up
    assert check(runs)["order:a,b"] == []


def test_lost_stats_in_a_step_are_flagged() -> None:
    # Two requests verified real drafts; the step reports one row (the first was dropped).
    step = make_step(
        1,
        scheduled=["p", "g", "q"],
        drafts={"p": [1, 2, 3], "g": [-1, -1, -1], "q": [4, 5, 6]},
        invalid={"g": 3},
        sampled={"p": [1, 2, 3, 9], "g": [7], "q": [4, 5, 6, 9]},
        emitted={},
    )
    nothing = make_step(
        2,
        scheduled=["p", "g"],
        drafts={"p": [1, 2, 3], "g": [-1, -1, -1]},
        invalid={"g": 3},
        sampled={"p": [1, 9], "g": [7]},
        emitted={},
        stats=None,
    )
    found = check([run("order:p,g,q", counts(1, 3, 3), [step, nothing])])["order:p,g,q"]
    lost = [v for v in found if v.invariant == "stats-lost"]
    assert [v.measured for v in lost] == [1, 0]
    assert [v.expected for v in lost] == [2, 1]
    assert "no spec stats at all" in lost[1].detail and "p, q" in lost[0].detail
    # p and q contributed the same counts: which one was kept cannot be told;
    # with no stats, all were lost.
    assert [v.requests for v in lost] == [[], ["p"]]


def test_lost_stats_name_the_request_whose_row_is_missing() -> None:
    # p verified 3 drafts (all accepted), q 3 drafts (1 accepted);
    # the step's one row is q's: p was lost.
    step = make_step(
        1,
        scheduled=["p", "g", "q"],
        drafts={"p": [1, 2, 3], "g": [-1, -1, -1], "q": [4, 5, 6]},
        invalid={"g": 3},
        sampled={"p": [1, 2, 3, 9], "g": [7], "q": [4, 9]},
        emitted={},
        stats=make_step_stats(num_accepted_tokens=1, num_accepted_tokens_per_pos=[1, 0, 0]),
    )
    (lost,) = [
        v
        for v in check([run("order:p,g,q", counts(1, 3, 1), [step])])["order:p,g,q"]
        if v.invariant == "stats-lost"
    ]
    assert lost.requests == ["p"]
    assert lost.detail.endswith("but the step reports 1 row(s); lost: p")


def test_all_invalid_row_is_not_required() -> None:
    step = make_step(
        1,
        scheduled=["g"],
        drafts={"g": [-1, -1, -1]},
        invalid={"g": 3},
        sampled={"g": [7]},
        emitted={},
        stats=None,
    )
    assert check([run("order:g", counts(0, 0, 0), [step])]) == {"order:g": []}


def test_accepted_above_drafts_and_per_pos_mismatch() -> None:
    bad = make_totals(
        num_drafts=1,
        num_draft_tokens=2,
        num_accepted_tokens=3,
        num_accepted_tokens_per_pos=[1, 1, 0],
        num_draft_tokens_per_pos=[1, 1, 0],
        num_emitted_tokens=4,
    )
    kinds = [v.invariant for v in check([run("order:a", bad)])["order:a"]]
    assert kinds == ["accepted-le-drafts", "per-pos-sum"]


def test_step_stats_are_checked_like_totals() -> None:
    step = make_step(
        stats=make_step_stats(num_accepted_tokens=4, num_accepted_tokens_per_pos=[1, 1, 1])
    )
    found = check([run("order:a", counts(1, 3, 3), [step])])["order:a"]
    assert [(v.invariant, v.detail.split(":")[0]) for v in found] == [
        ("accepted-le-drafts", "step 1"),
        ("per-pos-sum", "step 1"),
    ]


def test_emitted_counter_bounds_per_step() -> None:
    step = make_step(stats=make_step_stats(num_emitted_tokens=5))
    found = check([run("order:a", counts(1, 3, 3, emitted=5), [step])])["order:a"]
    assert [v.invariant for v in found] == ["emitted-bounds"]
    assert found[0].expected == [1, 4]


def test_emitted_bounds_need_the_branch_own_counter() -> None:
    # The same step with emitted implied (no counter of the branch's own): nothing to bound.
    step = make_step(stats=make_step_stats(num_emitted_tokens=5))
    assert check([run("order:a", counts(1, 3, 3), [step])]) == {"order:a": []}
    fine = make_step(stats=make_step_stats(num_emitted_tokens=4))
    assert check([run("order:a", counts(1, 3, 3, emitted=4), [fine])]) == {"order:a": []}


# -- the scheduler tier: outputs follow the script ----------------------------

SCRIPTED = Scenario.model_validate(
    {
        "name": "t",
        "statement": "s",
        "k": 3,
        "requests": [
            {
                "id": "a",
                "prompt": "hi",
                "max_tokens": 20,
                "target": "xa<eos>cd",
                "drafter": {"kind": "scripted", "steps": ["a<eos>c"]},
            }
        ],
    }
)


def test_outputs_that_follow_the_script_pass() -> None:
    # The prefill samples `x`; drafts [a, EOS, c] are accepted and the request stops at EOS.
    want = {"a": script.tokens("xa<eos>")}
    assert expected_outputs(SCRIPTED, ["a"]) == want
    good = run("order:a", counts(1, 3, 3), outputs=want)
    assert scheduler_invariants.check(SCRIPTED, [good]) == {"order:a": []}


def test_outputs_past_the_stop_break_the_script() -> None:
    want = expected_outputs(SCRIPTED, ["a"])["a"]
    bad = run("order:a", counts(1, 3, 3), outputs={"a": [*want, want[-1]]})
    (violation,) = scheduler_invariants.check(SCRIPTED, [bad])["order:a"]
    assert (violation.invariant, violation.counter, violation.expected) == (
        "outputs-follow-script",
        "outputs",
        want,
    )
    assert "request a emitted" in violation.detail


# -- serving conditions -------------------------------------------------------------------------


def test_a_step_without_any_draft_slot_must_report_no_spec_stats() -> None:
    """#16023: a prefill-only step (or any step with spec decoding off) reports no stats object."""
    empty_stats = make_step_stats(
        num_drafts=0,
        num_draft_tokens=0,
        num_accepted_tokens=0,
        num_accepted_tokens_per_pos=[0, 0, 0],
        num_draft_tokens_per_pos=[0, 0, 0],
    )

    def prefill(stats: dict[str, Any] | None) -> StepRecord:
        return make_step(step=0, drafts={}, sampled={"a": [5]}, emitted={"a": [5]}, stats=stats)

    found = per_run_checks([run("order:a", A, steps=[prefill(empty_stats), make_step()])])
    assert [v.invariant for v in found["order:a"]] == ["stats-without-drafts"]
    assert per_run_checks([run("order:a", A, steps=[prefill(None), make_step()])])["order:a"] == []


def test_a_nan_mean_acceptance_length_in_the_log_is_flagged() -> None:
    logged = {"mean_acceptance_length_log": "SpecDecoding metrics: Mean acceptance length: nan, "}
    found = per_run_checks([run("order:a", A, notes=logged)])
    assert [v.invariant for v in found["order:a"]] == ["mean-is-nan"]
    fine = {"mean_acceptance_length_log": "SpecDecoding metrics: Mean acceptance length: 2.50, "}
    assert per_run_checks([run("order:a", A, notes=fine)])["order:a"] == []


def test_padding_an_aborted_request_and_a_finished_ones_step_are_not_verified_drafts() -> None:
    """A padded new decode ([-1]*k), a request aborted while its step was in flight, and one still
    in flight after it finished, verified no real draft: a step that reports none of them has lost
    nothing."""
    steps = [
        make_step(
            step=0,
            drafts={},
            sampled={"a": [5]},
            emitted={"a": [5]},
            finished={"a": "stop"},
            stats=None,
        ),
        make_step(
            step=1,
            scheduled=["a", "b", "c"],
            drafts={"a": [1, 2, 3], "b": [1, 2, 3], "c": [-1, -1, -1]},
            sampled={"a": [1], "b": [1, 2], "c": [7]},
            emitted={"c": [7]},
            aborted=["b"],
            stats=None,
        ),
    ]
    assert per_run_checks([run("order:a,b,c", A, steps=steps)])["order:a,b,c"] == []


def test_runs_scheduled_differently_are_not_compared_across_orders() -> None:
    """Where the batch decided a request's schedule (here: padded in one order only), totals may
    differ legitimately; the runs scheduled alike are still compared."""
    shapes = {"order:a,b": {"a": "padded"}, "order:b,a": {"a": "plain"}, "alone:a": {"a": "plain"}}
    runs = [
        run("order:a,b", plus(A, B, counts(1, 3, 0))),
        run("order:b,a", plus(A, B)),
        run("alone:a", A),
        run("alone:b", B),
    ]
    found = per_run_checks(runs)
    across_orders(found, *batches_and_alone(runs), shapes=lambda r: shapes.get(r.label, {}))
    assert all(v == [] for v in found.values())
    # Without the shapes the padded order reads as order-dependent and not additive.
    found = check(runs)
    assert {v.invariant for v in found["order:a,b"]} == {"order-independence", "additivity"}
