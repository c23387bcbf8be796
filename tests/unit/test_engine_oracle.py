"""The engine tier's oracle, invariants, truncation choice and scenario files (pure, no vLLM).

The engine oracle reads what the engine did step by step, so its input is a
run's step records; the runs here are written by hand (`tests.factories`) with
one request `a` whose prefill samples 5 and whose one decode step drafts
[6, 7, 8], all accepted plus bonus 9, cut by a stop at 7.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from difftest.core.errors import ConfigError
from difftest.core.records import ProbeRun, Reading, StepRecord
from difftest.probe.engine.truncation import NoTruncationPoint, choose
from difftest.tiers.engine.invariants import across_branches, check
from difftest.tiers.engine.oracle import expected_totals, verifications
from difftest.tiers.engine.scenario import load_engine_scenarios
from tests.factories import SCENARIOS_DIR, make_run, make_step, make_totals

K = 3
LABEL = "order:a"
#: What the branch reports for the default run: one row, 3 drafts, all accepted; emitted implied.
ENGINE_TOTALS = make_totals(
    num_drafts=1,
    num_draft_tokens=3,
    num_accepted_tokens=3,
    num_accepted_tokens_per_pos=[1, 1, 1],
    num_draft_tokens_per_pos=[1, 1, 1],
    num_emitted_tokens=4,
    emitted_source="implied",
    mean_acceptance_length=None,
)
PROMETHEUS = {
    "num_drafts": 1,
    "num_draft_tokens": 3,
    "num_accepted_tokens": 3,
    "num_accepted_tokens_per_pos": [1, 1, 1],
}


def prefill(step: int = 0) -> StepRecord:
    return make_step(step, drafts={}, sampled={"a": [5]}, emitted={"a": [5]}, stats=None)


def engine_run(
    label: str = LABEL,
    steps: list[StepRecord] | None = None,
    outputs: dict[str, list[int]] | None = None,
    notes: dict[str, Any] | None = None,
    **overrides: Any,
) -> ProbeRun:
    """Request a: prefill 5, then drafts [6, 7, 8] all accepted + bonus 9,
    a stop at 7 keeps [6, 7]."""
    decode = make_step(
        1,
        drafts={"a": [6, 7, 8]},
        sampled={"a": [6, 7, 8, 9]},
        emitted={"a": [6, 7]},
        finished={"a": "stop"},
    )
    fields: dict[str, Any] = dict(
        tier="engine",
        steps=steps or [prefill(), decode],
        totals=ENGINE_TOTALS.model_copy(deep=True),
        outputs=outputs or {"a": [5, 6, 7]},
        finish_reasons={"a": "stop"},
        notes={
            "prometheus": dict(PROMETHEUS),
            "stat_logger_matches_scheduler": True,
            **(notes or {}),
        },
    )
    return make_run(label, **{**fields, **overrides})


def invariants_of(run: ProbeRun) -> list[str]:
    return [v.invariant for v in check([run])[run.label]]


# -- oracle -------------------------------------------------------------------


def test_emitted_comes_from_the_step_after_stop_handling() -> None:
    expected = expected_totals(K, engine_run(), "strict")
    assert (expected.num_drafts, expected.num_draft_tokens, expected.num_accepted_tokens) == (
        1,
        3,
        3,
    )
    assert expected.num_accepted_tokens_per_pos == [1, 1, 1]
    assert expected.num_emitted_tokens == 2 and expected.mean_acceptance_length == 2.0
    assert expected.emitted_source == "oracle"


def test_rejected_drafts_and_steps_without_drafts() -> None:
    steps = [
        prefill(),
        make_step(1, drafts={"a": [6, 7]}, sampled={"a": [6, 1]}, emitted={"a": [6, 1]}),
        make_step(2, drafts={}, sampled={"a": [2]}, emitted={"a": [2]}),
    ]
    expected = expected_totals(K, engine_run(steps=steps), "strict")
    assert (expected.num_drafts, expected.num_draft_tokens, expected.num_accepted_tokens) == (
        1,
        2,
        1,
    )
    assert expected.num_draft_tokens_per_pos == [1, 1, 0]
    assert expected.num_accepted_tokens_per_pos == [1, 0, 0]
    assert expected.num_emitted_tokens == 2


def test_the_zero_fill_of_a_skipped_drafter_is_no_row() -> None:
    # The runner skipped drafting for this step: [0, 0, 0] were scheduled and rejected
    # (main counts them).
    zero_fill = make_step(
        1, drafts={"a": [0, 0, 0]}, sampled={"a": [6]}, emitted={"a": [6]}, skipped=["a"]
    )
    run = engine_run(steps=[prefill(), zero_fill], outputs={"a": [5, 6]})
    assert [v.drafting_skipped for v in verifications(zero_fill)] == [True]
    for reading in ("strict", "lenient"):
        assert expected_totals(K, run, reading).num_drafts == 0  # type: ignore[arg-type]
    # A branch that schedules the zero-fill but does not count it has lost nothing.
    assert "stats-lost" not in invariants_of(
        run.model_copy(update={"steps": [prefill(), zero_fill.model_copy(update={"stats": None})]})
    )


def test_all_invalid_drafts_depend_on_the_reading() -> None:
    steps = [
        make_step(
            0, drafts={"a": [-1, -1]}, invalid={"a": 2}, sampled={"a": [4]}, emitted={"a": [4]}
        )
    ]
    assert expected_totals(K, engine_run(steps=steps), "strict").num_drafts == 0
    lenient = expected_totals(K, engine_run(steps=steps), "lenient")
    assert (lenient.num_drafts, lenient.num_draft_tokens, lenient.num_emitted_tokens) == (1, 0, 1)


def test_verifications_follow_scheduling_order_and_skip_undelivered_requests() -> None:
    step = make_step(
        scheduled=["b", "a", "c"],
        drafts={"a": [1, 2], "b": [3, -1], "c": [4]},
        invalid={"b": 1},
        sampled={"a": [1, 9], "b": [3, 9]},  # c's output was not delivered this step
        emitted={"a": [1, 9], "b": [3]},
    )
    assert [
        (v.request, v.real_drafts, v.scheduled_drafts, v.accepted, v.emitted)
        for v in verifications(step)
    ] == [
        ("b", 1, 2, 1, 1),
        ("a", 2, 2, 1, 2),
    ]
    # Without a scheduling list, the drafts' order is used.
    unscheduled = step.model_copy(update={"scheduled": []})
    assert [v.request for v in verifications(unscheduled)] == ["a", "b"]


# -- invariants ---------------------------------------------------------------


def test_consistent_run_has_no_violations() -> None:
    assert check([engine_run()]) == {LABEL: []}


def test_prometheus_disagreeing_with_the_stat_logger_is_a_violation() -> None:
    assert invariants_of(engine_run(notes={"prometheus": {**PROMETHEUS, "num_drafts": 2}})) == [
        "prometheus-vs-stat-logger"
    ]
    assert invariants_of(engine_run(notes={"stat_logger_matches_scheduler": False})) == [
        "stat-logger-vs-scheduler"
    ]


def test_prometheus_per_position_vector_is_padded_and_missing_counters_are_flagged() -> None:
    # Prometheus has no sample for a position that never accepted: [1, 1] reads as [1, 1, 0].
    two_accepted = ENGINE_TOTALS.model_copy(
        update={"num_accepted_tokens": 2, "num_accepted_tokens_per_pos": [1, 1, 0]}
    )
    short = {**PROMETHEUS, "num_accepted_tokens": 2, "num_accepted_tokens_per_pos": [1, 1]}
    assert invariants_of(engine_run(totals=two_accepted, notes={"prometheus": short})) == []
    assert invariants_of(
        engine_run(notes={"prometheus": {**PROMETHEUS, "num_accepted_tokens_per_pos": [1, 1]}})
    ) == ["prometheus-vs-stat-logger"]
    run = engine_run()
    del run.notes["prometheus"]
    assert invariants_of(run) == ["prometheus-missing"]


def test_emitted_steps_must_add_up_to_the_output() -> None:
    assert invariants_of(engine_run(outputs={"a": [5, 6, 7, 8]})) == ["emitted-vs-output"]


def test_eos_cut_must_end_as_a_real_eos() -> None:
    cut = {"a": {"kind": "eos", "token": 7, "finish_reason": "stop", "stop_reason": 7}}
    assert invariants_of(engine_run(notes={"truncation": cut})) == ["truncation-applied"]
    cut["a"]["stop_reason"] = None
    assert invariants_of(engine_run(notes={"truncation": cut})) == []


def test_stop_cut_must_end_at_the_first_stop_token() -> None:
    cut = {"a": {"kind": "stop", "token": 6, "finish_reason": "stop", "stop_reason": 6}}
    # The output [5, 6, 7] ends at 7, not at the stop token 6.
    found = check([engine_run(notes={"truncation": cut})])[LABEL]
    assert [v.invariant for v in found] == ["truncation-applied"] and "first stop token 6" in found[
        0
    ].detail


def test_reference_runs_are_checked_but_not_compared_across_orders() -> None:
    reference = engine_run(
        "reference:a", totals=ENGINE_TOTALS.model_copy(update={"num_emitted_tokens": 9})
    )
    found = check([engine_run(), reference])
    assert found[LABEL] == []
    assert "order-independence" not in {v.invariant for v in found["reference:a"]}


def test_branches_must_generate_the_baseline_tokens() -> None:
    base, same, other = engine_run(), engine_run(), engine_run(outputs={"a": [5, 6, 8]})
    found = across_branches({"main": [base], "x": [same], "y": [other]}, "main")
    assert found["x"] == {LABEL: []}
    assert [v.invariant for v in found["y"][LABEL]] == ["generated-tokens-differ"]
    assert "main" not in found


def test_branches_must_finish_the_same_way() -> None:
    found = across_branches(
        {"main": [engine_run()], "x": [engine_run(finish_reasons={"a": "length"})]}, "main"
    )
    assert [v.invariant for v in found["x"][LABEL]] == ["finish-differs"]


def test_unmeasured_runs_are_not_compared_across_branches() -> None:
    failed = engine_run(status="error", error="boom", totals=None, outputs={"a": [1]})
    assert across_branches({"main": [engine_run()], "x": [failed]}, "main") == {"x": {}}
    assert across_branches({"main": [failed], "x": [engine_run()]}, "main") == {"x": {}}


def test_branches_must_choose_the_same_cut() -> None:
    choice = {"kind": "stop", "token": 7, "position": 2, "max_tokens": None, "reference_step": 1}
    moved = {**choice, "token": 8}
    found = across_branches(
        {
            "main": [engine_run(notes={"truncation_choice": choice})],
            "x": [engine_run(notes={"truncation_choice": moved})],
        },
        "main",
    )
    assert [v.invariant for v in found["x"][LABEL]] == ["truncation-differs"]
    # Where the reference run was taken from may differ; the cut itself may not.
    same_cut = {**choice, "reference_step": 4}
    found = across_branches(
        {
            "main": [engine_run(notes={"truncation_choice": choice})],
            "x": [engine_run(notes={"truncation_choice": same_cut})],
        },
        "main",
    )
    assert found["x"][LABEL] == []


def test_order_checks_skip_runs_whose_outputs_differ() -> None:
    a = engine_run("order:a,b")
    b = engine_run(
        "order:b,a",
        outputs={"a": [5, 6, 1]},
        totals=ENGINE_TOTALS.model_copy(update={"num_emitted_tokens": 9}),
    )
    found = check([a, b])
    assert not any(
        v.invariant == "order-independence" for v in found["order:a,b"] + found["order:b,a"]
    )


def test_order_checks_apply_where_outputs_agree() -> None:
    a = engine_run("order:a,b")
    b = engine_run("order:b,a", totals=ENGINE_TOTALS.model_copy(update={"num_emitted_tokens": 9}))
    found = check([a, b])
    assert found["order:a,b"] == []  # a tie: the first listed order is the reference
    assert [(v.invariant, v.counter) for v in found["order:b,a"]] == [
        ("order-independence", "num_emitted_tokens")
    ]


# -- truncation ---------------------------------------------------------------

REFERENCE_STEPS = [
    {"step": 0, "sampled": {"a": [5]}, "emitted": {"a": [5]}},
    {
        "step": 1,
        "drafts": {"a": [5, 6, 7]},
        "sampled": {"a": [5, 6, 7, 9]},
        "emitted": {"a": [5, 6, 7, 9]},
    },
]
REFERENCE_OUTPUT = [5, 5, 6, 7, 9]


def test_cut_is_the_first_new_accepted_draft_never_the_last_accepted() -> None:
    cut = choose("stop", "a", REFERENCE_STEPS, REFERENCE_OUTPUT, avoid=set())
    # 5 occurred before; 7 is the last accepted draft.
    assert (cut["token"], cut["position"], cut["index_in_block"]) == (6, 2, 1)
    assert (
        choose("max_tokens", "a", REFERENCE_STEPS, REFERENCE_OUTPUT, avoid=set())["max_tokens"] == 2
    )
    with pytest.raises(NoTruncationPoint):
        choose(
            "eos", "a", REFERENCE_STEPS, REFERENCE_OUTPUT, avoid={6}
        )  # 6 excluded, 7 the last accepted: no cut


def test_boundary_cut_ends_on_the_last_whole_step() -> None:
    cut = choose("boundary", "a", REFERENCE_STEPS, REFERENCE_OUTPUT, avoid=set())
    assert (cut["token"], cut["max_tokens"], cut["reference_step"]) == (9, 5, 1)
    with pytest.raises(NoTruncationPoint):
        choose("boundary", "a", REFERENCE_STEPS[:1], REFERENCE_OUTPUT[:1], avoid=set())


# -- scenario files -----------------------------------------------------------

ENGINE_A = "statement: a\nk: 3\nrequests: [{id: x, prompt: 'yes no', max_tokens: 8}]\n"


def test_engine_scenarios_must_share_one_engine(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(ENGINE_A)
    (tmp_path / "b.yaml").write_text(ENGINE_A.replace("k: 3", "k: 2"))
    with pytest.raises(ConfigError, match="engine settings differ") as info:
        load_engine_scenarios(tmp_path)
    assert "b.yaml" in str(info.value) and "'k': (3, 2)" in str(info.value)


def test_cuda_only_methods_need_requires_cuda(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(ENGINE_A + "engine: {method: draft_model}\n")
    with pytest.raises(ConfigError, match="requires: cuda"):
        load_engine_scenarios(tmp_path)


@pytest.mark.parametrize(
    "folder", [SCENARIOS_DIR / "engine", SCENARIOS_DIR / "gpu" / "engine"], ids=["cpu", "gpu"]
)
def test_shipped_engine_scenarios_plan_reference_runs_first(folder: Path) -> None:
    scenarios = load_engine_scenarios(folder)
    assert scenarios
    for s in scenarios:
        runs = s.runs()
        roles = [r["role"] for r in runs]
        refs = [i for i, role in enumerate(roles) if role == "reference"]
        assert refs == list(range(len(refs))), roles
        assert len(refs) == sum(r.truncate != "none" for r in s.requests)
        assert all(r["label"].startswith("reference:") for r in runs[: len(refs)])
        assert s.job_scenario()["runs"] == runs


# -- the context check ----------------------------------------------------------


def _engine_scenario(**request: Any) -> dict[str, Any]:
    return {
        "name": "ctx",
        "statement": "x",
        "k": 3,
        "engine": {"max_model_len": 128},
        "requests": [{"id": "a", "prompt": "abcd", "max_tokens": 200, **request}],
    }


def test_a_request_vllm_would_cap_is_refused_unless_it_is_meant_to_end_there() -> None:
    from pydantic import ValidationError

    from difftest.tiers.engine.scenario import EngineScenario

    with pytest.raises(
        ValidationError, match=r"requests\.a: may need 209 tokens.*until_max_model_len: true"
    ):
        EngineScenario.model_validate(_engine_scenario())
    scenario = EngineScenario.model_validate(_engine_scenario(until_max_model_len=True))
    assert scenario.requests[0].until_max_model_len


# -- serving conditions ---------------------------------------------------------
#
# Two requests with one 33-token prompt: alone, each prefills it (33 tokens), samples 5, then
# verifies [6, 7, 8], all accepted plus bonus 9. In a batch the one scheduled second finds the
# first block cached and is a new decode padded with [-1, -1, -1] (#50518), which main counts.

PAD = [-1, -1, -1]
ROW = {
    "num_drafts": 1,
    "num_draft_tokens": 3,
    "num_accepted_tokens": 3,
    "num_accepted_tokens_per_pos": [1, 1, 1],
    "num_draft_tokens_per_pos": [1, 1, 1],
}


def _sum(*rows: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for row in rows:
        for name, value in row.items():
            if isinstance(value, list):
                out[name] = [
                    a + b for a, b in zip(out.get(name) or [0] * len(value), value, strict=True)
                ]
            else:
                out[name] = out.get(name, 0) + value
    return {**out, "num_spec_tokens": K}


#: What main reports for a padded step: a draft round with 3 drafted, 0 accepted.
PAD_ROW = {**ROW, "num_accepted_tokens": 0, "num_accepted_tokens_per_pos": [0, 0, 0]}


def serving_run(label: str, steps: list[StepRecord], **notes: Any) -> ProbeRun:
    """A run whose totals, Prometheus counters and outputs are what its steps say (main's
    reading: emitted implied as accepted + rows)."""
    summed = _sum(*[s.stats.model_dump() for s in steps if s.stats is not None])
    totals = make_totals(
        **{k: summed[k] for k in ROW},
        num_emitted_tokens=summed["num_accepted_tokens"] + summed["num_drafts"],
        emitted_source="implied",
        mean_acceptance_length=None,
    )
    outputs: dict[str, list[int]] = {}
    for s in steps:
        for rid, toks in s.emitted.items():
            outputs.setdefault(rid, []).extend(toks)
    prometheus = {k: summed[k] for k in PROMETHEUS}
    return make_run(
        label,
        tier="engine",
        steps=steps,
        totals=totals,
        outputs=outputs,
        finish_reasons={rid: "length" for rid in outputs},
        notes={"prometheus": prometheus, "stat_logger_matches_scheduler": True, **notes},
    )


def revise(step: StepRecord, **update: Any) -> StepRecord:
    """A copy of `step` with fields replaced, validated again (stats become StepStats)."""
    return StepRecord.model_validate({**step.model_dump(), **update})


def first_steps(rids: list[str], padded: str | None = None) -> list[StepRecord]:
    """Prefill (or, for `padded`, a padded new decode), then one decode that verifies [6, 7, 8]."""
    tokens = {rid: (1 + K if rid == padded else 33) for rid in rids}
    step0 = make_step(
        0,
        scheduled=rids,
        tokens=tokens,
        drafts={padded: PAD} if padded else {},
        sampled={rid: [5] for rid in rids},
        emitted={rid: [5] for rid in rids},
        stats=_sum(PAD_ROW) if padded else None,
    )
    step1 = make_step(
        1,
        scheduled=rids,
        tokens={rid: 1 + K for rid in rids},
        drafts={rid: [6, 7, 8] for rid in rids},
        sampled={rid: [6, 7, 8, 9] for rid in rids},
        emitted={rid: [6, 7, 8, 9] for rid in rids},
        stats=_sum(*[ROW] * len(rids)),
    )
    return [step0, step1]


def test_a_new_decodes_padding_is_no_row_under_either_reading() -> None:
    batch = serving_run("order:a,b", first_steps(["a", "b"], padded="b"))
    (padded,) = verifications(batch.steps[0])
    assert (padded.request, padded.real_drafts, padded.scheduled_drafts) == ("b", 0, 0)
    readings: tuple[Reading, ...] = ("strict", "lenient")
    for reading in readings:
        expected = expected_totals(K, batch, reading)
        assert (expected.num_drafts, expected.num_draft_tokens) == (2, 6)
    # main counts the padding: one row and k draft tokens too many, and nothing else is wrong.
    assert (batch.totals.num_drafts, batch.totals.num_draft_tokens) == (3, 9)
    assert invariants_of(batch) == []


def test_a_padded_run_is_not_compared_with_its_requests_alone() -> None:
    alone = [serving_run(f"alone:{r}", first_steps([r])) for r in ("a", "b")]
    padded = serving_run("order:a,b", first_steps(["a", "b"], padded="b"))
    assert not any(check([padded, *alone]).values())
    # Scheduled alike, the same batch must still add up.
    unpadded = serving_run("order:a,b", first_steps(["a", "b"]))
    assert not any(check([unpadded, *alone]).values())
    off = unpadded.model_copy(
        update={"totals": unpadded.totals.model_copy(update={"num_emitted_tokens": 9})}
    )
    assert {v.invariant for v in check([off, *alone])["order:a,b"]} == {"additivity"}


def test_a_preempted_request_is_not_compared_with_itself_alone() -> None:
    alone = [serving_run(f"alone:{r}", first_steps([r])) for r in ("a", "b")]
    steps = first_steps(["a", "b"])
    # b is preempted while step 1 is scheduled, resumes in step 2 (recomputes 34 tokens, samples
    # 6, no drafts) and verifies [7, 8] in step 3 (bonus 9): the same tokens as alone, but one
    # draft fewer; the preemption moved b's schedule, so the batch is judged on its own.
    steps[1] = revise(
        steps[1],
        scheduled=["a"],
        tokens={"a": 1 + K},
        preempted=["b"],
        **{f: {"a": getattr(steps[1], f)["a"]} for f in ("drafts", "sampled", "emitted")},
        stats=_sum(ROW),
    )
    resume = make_step(
        2,
        scheduled=["b"],
        tokens={"b": 34},
        drafts={},
        sampled={"b": [6]},
        emitted={"b": [6]},
        stats=None,
    )
    verify = make_step(
        3,
        scheduled=["b"],
        tokens={"b": 1 + K},
        drafts={"b": [7, 8]},
        sampled={"b": [7, 8, 9]},
        emitted={"b": [7, 8, 9]},
        stats=_sum(
            {
                **ROW,
                "num_draft_tokens": 2,
                "num_accepted_tokens": 2,
                "num_accepted_tokens_per_pos": [1, 1, 0],
                "num_draft_tokens_per_pos": [1, 1, 0],
            }
        ),
    )
    run = serving_run("order:a,b", [*steps[:2], resume, verify])
    assert run.outputs == alone[0].outputs | alone[1].outputs
    assert not any(check([run, *alone]).values())
    expected = expected_totals(K, run, "strict")
    assert (expected.num_drafts, expected.num_draft_tokens) == (2, 5)


def test_a_step_that_uses_the_whole_budget_is_compared_only_without_a_budget() -> None:
    alone = [serving_run(f"alone:{r}", first_steps([r])) for r in ("a", "b")]
    off = serving_run("order:a,b", first_steps(["a", "b"]))
    off = off.model_copy(
        update={"totals": off.totals.model_copy(update={"num_emitted_tokens": 99})}
    )
    # Step 1 schedules 2 x (1 + k) = 8 tokens: under an 8-token budget, how many drafts each
    # request verified there was the batch's doing (a cut block), so nothing is compared.
    assert not any(check([off, *alone], budget=8).values())
    assert "additivity" in {v.invariant for v in check([off, *alone], budget=9)["order:a,b"]}
    assert "additivity" in {v.invariant for v in check([off, *alone])["order:a,b"]}


def aborted_run(label: str = "order:gone,stays", **abort: Any) -> ProbeRun:
    """`gone` is aborted after step 1 (its 2nd sampling step); `stays` decodes once more."""
    steps = first_steps(["gone", "stays"])
    tail = make_step(
        2,
        scheduled=["stays"],
        tokens={"stays": 1 + K},
        drafts={"stays": [9, 9, 9]},
        sampled={"stays": [1]},
        emitted={"stays": [1]},
        stats=_sum({**ROW, "num_accepted_tokens": 0, "num_accepted_tokens_per_pos": [0, 0, 0]}),
    )
    notes = {"gone": {"after_steps": 2, "applied": True, "after_step": 1, **abort}}
    run = serving_run(label, [*steps, tail], abort=notes)
    return run.model_copy(update={"finish_reasons": {"gone": "abort", "stays": "length"}})


def test_an_aborted_requests_rows_end_at_its_abort() -> None:
    run = aborted_run()
    assert invariants_of(run) == []
    expected = expected_totals(K, run, "strict")
    assert (expected.num_drafts, expected.num_draft_tokens, expected.num_accepted_tokens) == (
        3,
        9,
        6,
    )
    # An abort that lands while the step is in flight (pipelining, the scheduler tier): no row.
    in_flight = revise(run.steps[1], aborted=["gone"])
    assert [v.request for v in verifications(in_flight)] == ["stays"]


def test_an_aborted_request_must_not_be_scheduled_again() -> None:
    """(An abort that never lands fails the run in the probe: the scenario's to fix.)"""
    run = aborted_run(after_step=0)
    found = check([run])[run.label]
    assert [v.invariant for v in found] == ["abort-applied"]
    assert "scheduled after its abort" in found[0].detail


def test_the_aborted_batch_adds_up_to_its_requests_alone() -> None:
    batch = aborted_run()
    gone = serving_run("alone:gone", first_steps(["gone"]), abort=batch.notes["abort"])
    gone = gone.model_copy(update={"finish_reasons": {"gone": "abort"}})
    only = {"scheduled": ["stays"]}
    stays = serving_run(
        "alone:stays",
        [
            revise(
                s,
                **only,
                **{
                    f: {r: v for r, v in getattr(s, f).items() if r == "stays"}
                    for f in ("tokens", "drafts", "sampled", "emitted")
                },
                stats=None if s.step == 0 else (_sum(ROW) if s.step == 1 else s.stats),
            )
            for s in batch.steps
        ],
    )
    assert not any(check([batch, gone, stays]).values())
    wrong = batch.model_copy(
        update={"totals": batch.totals.model_copy(update={"num_emitted_tokens": 1})}
    )
    assert "additivity" in {v.invariant for v in check([wrong, gone, stays])[wrong.label]}


# -- serving settings in scenario files -------------------------------------------------


def _with(engine: dict[str, Any] | None = None, **request: Any) -> dict[str, Any]:
    scenario = _engine_scenario(**{"max_tokens": 8, **request})
    scenario["engine"] = {"max_model_len": 128, **(engine or {})}
    return scenario


@pytest.mark.parametrize(
    "engine, request_keys, words",
    [
        ({"kv_blocks": 8}, {}, "needs engine.block_size"),
        ({"kv_blocks": 3, "block_size": 32}, {}, "cannot hold one request"),
        ({"block_size": 40}, {}, "multiple of 16"),
        ({"max_num_batched_tokens": 16, "max_num_seqs": 32}, {}, "below engine.max_num_seqs"),
        ({}, {"abort": 8}, "must be below max_tokens"),
        ({}, {"abort": 2, "truncate": "eos"}, "cannot be combined"),
        ({}, {"abort_after_steps": 2}, "is now `abort`"),
        ({}, {"abort": 0}, "greater than or equal to 1"),
    ],
    ids=[
        "pool-without-block",
        "pool-too-small",
        "odd-block",
        "budget",
        "abort-late",
        "abort-cut",
        "abort-old-key",
        "abort-0",
    ],
)
def test_serving_settings_are_validated(
    engine: dict[str, Any], request_keys: dict[str, Any], words: str
) -> None:
    from pydantic import ValidationError

    from difftest.tiers.engine.scenario import EngineScenario

    with pytest.raises(ValidationError, match=words):
        EngineScenario.model_validate(_with(engine, **request_keys))


def test_serving_settings_reach_the_probe_and_are_shared_by_the_folder(tmp_path: Path) -> None:
    from difftest.tiers.engine.scenario import EngineScenario

    engine = {
        "prefix_caching": True,
        "block_size": 32,
        "kv_blocks": 10,
        "max_num_batched_tokens": 64,
    }
    scenario = EngineScenario.model_validate(_with(engine, abort=3))
    data = scenario.probe_data()
    assert {k: data["engine"][k] for k in engine} == engine
    assert data["requests"][0]["abort"] == 3
    (tmp_path / "a.yaml").write_text(ENGINE_A + "engine: {prefix_caching: true}\n")
    (tmp_path / "b.yaml").write_text(ENGINE_A)
    with pytest.raises(ConfigError, match="prefix_caching"):
        load_engine_scenarios(tmp_path)


def test_the_shipped_engine_folder_turns_the_serving_conditions_on() -> None:
    (engine,) = {s.engine for s in load_engine_scenarios(SCENARIOS_DIR / "engine")}
    assert engine.prefix_caching and engine.kv_blocks and engine.max_num_batched_tokens
    names = {s.name for s in load_engine_scenarios(SCENARIOS_DIR / "engine")}
    assert {
        "engine-prefix-hit",
        "engine-preemption",
        "engine-chunked-prefill",
        "engine-abort",
    } <= names


# -- stop strings (#49) ----------------------------------------------------------
#
# The default run's request: the scheduler emitted [5] then [6, 7] (its stop handling knows
# nothing of stop strings); a stop string completed by 6 leaves the response [5, 6].


def _stop_string_run(
    outputs: list[int],
    text: str | None,
    include: bool = False,
    reason: Any = "six",
    steps: list[StepRecord] | None = None,
) -> ProbeRun:
    """The stop string "six" completed by token 6 at position 1; the reference run's text read
    "fivesixseven"."""
    cut = {
        "kind": "stop_string",
        "token": 6,
        "position": 1,
        "stop_string": "six",
        "finish_reason": "stop",
        "stop_reason": reason,
        "text": text,
        "reference_text": "fivesixseven",
        "include_stop_str_in_output": include,
    }
    return engine_run(
        steps=steps,
        outputs={"a": outputs},
        notes={"truncation": {"a": cut}, "stop_reasons": {"a": reason}},
    )


def test_the_oracle_counts_what_the_request_returned() -> None:
    """A row keeps only the tokens of its step that the response holds."""
    run = _stop_string_run([5, 6], "five")
    expected = expected_totals(K, run, "strict")
    assert expected.num_emitted_tokens == 1 and expected.num_drafts == 1
    assert expected.num_accepted_tokens == 3  # what was verified is not what was returned
    assert invariants_of(run) == []


def test_a_step_past_the_end_of_the_response_is_no_row_and_breaks_the_run() -> None:
    """#49 review: a branch that went on scheduling after the stop string: its extra step is no
    row of the oracle's, and only the step holding the response's last token may be trimmed."""
    later = make_step(2, drafts={"a": [8, 9, 10]}, sampled={"a": [8, 11]}, emitted={"a": [8, 11]})
    decode = make_step(
        1, drafts={"a": [6, 7, 8]}, sampled={"a": [6, 7, 8, 9]}, emitted={"a": [6, 7]}
    )
    run = _stop_string_run([5, 6], "five", steps=[prefill(), decode, later])
    expected = expected_totals(K, run, "strict")
    assert (expected.num_drafts, expected.num_emitted_tokens) == (1, 1)
    assert "emitted-vs-output" in invariants_of(run)


def test_a_response_that_disagrees_with_itself_at_a_stop_string_is_broken() -> None:
    # Tokens past the one completing the string were returned.
    found = check([_stop_string_run([5, 6, 7], "five")])[LABEL]
    assert [v.invariant for v in found] == ["truncation-applied"]
    assert "did not end the response on token 6 at position 1" in found[0].detail
    # The text keeps the stop string although it should not, and the other way round.
    assert invariants_of(_stop_string_run([5, 6], "fivesix")) == ["response-at-stop"]
    assert invariants_of(_stop_string_run([5, 6], "five", include=True)) == ["response-at-stop"]
    assert invariants_of(_stop_string_run([5, 6], "fivesix", include=True)) == []
    assert invariants_of(_stop_string_run([5, 6], None)) == ["response-at-stop"]
    # Only a stop string may end the response before the scheduler's last token.
    assert "emitted-vs-output" in invariants_of(_stop_string_run([5, 6], "five", reason=None))


def test_a_stop_string_is_cut_where_the_response_first_completes_it() -> None:
    """The string is the chosen tokens' text, new in the response's text (whatever the
    detokenizer wrote before the output's own text: an echoed prompt), completed by an accepted
    draft that is not its block's last."""
    words = {5: "ab", 6: "cd", 7: "ef", 9: "gh"}

    def decode(ids: list[int]) -> str:
        return "".join(words[i] for i in ids)

    text = decode(REFERENCE_OUTPUT)
    cut = choose("stop_string", "a", REFERENCE_STEPS, REFERENCE_OUTPUT, set(), decode, 1, text)
    # "ab" (5) first completes at position 0; "cd" (6) is new at position 2, index 1 of its block.
    assert (cut["stop_string"], cut["position"], cut["spans_steps"]) == ("cd", 2, False)
    cut = choose("stop_string", "a", REFERENCE_STEPS, REFERENCE_OUTPUT, set(), decode, 2, text)
    # Two tokens: the prefill's "ab" and the first accepted draft's, across the two steps.
    assert (cut["stop_string"], cut["position"], cut["spans_steps"]) == ("abab", 1, True)
    # A reference run that a limit ended after the block's first draft: only returned tokens.
    short = [REFERENCE_STEPS[0], {**REFERENCE_STEPS[1], "emitted": {"a": [5]}}]
    with pytest.raises(NoTruncationPoint):
        choose("stop_string", "a", short, REFERENCE_OUTPUT[:2], set(), decode, 1, "abab")
    # A prompt echoed into the text that already holds "cd": no cut there.
    with pytest.raises(NoTruncationPoint):
        choose("stop_string", "a", REFERENCE_STEPS, REFERENCE_OUTPUT, set(), decode, 1, "cd" + text)


def test_stop_string_options_belong_to_a_stop_string_cut() -> None:
    from pydantic import ValidationError

    from difftest.tiers.engine.scenario import EngineScenario

    raw = _engine_scenario(stop_string_tokens=2)
    raw["requests"][0]["max_tokens"] = 20
    with pytest.raises(ValidationError, match="apply to `truncate: stop_string` only"):
        EngineScenario.model_validate(raw)
    raw["requests"][0]["truncate"] = "stop_string"
    assert EngineScenario.model_validate(raw).requests[0].stop_string_tokens == 2
    raw["requests"][0]["max_tokens"] = 2
    with pytest.raises(ValidationError, match="stop_string_tokens 2 needs max_tokens above it"):
        EngineScenario.model_validate(raw)


def test_an_ignored_eos_must_end_nothing() -> None:
    """#49: with ignore_eos the chosen EOS stays in the response, which runs on to its limit."""
    cut = {"kind": "eos", "token": 6, "position": 1, "ignore_eos": True}
    ended = {**cut, "finish_reason": "stop", "stop_reason": None}
    found = check([engine_run(outputs={"a": [5, 6]}, notes={"truncation": {"a": ended}})])[LABEL]
    applied = [v.detail for v in found if v.invariant == "truncation-applied"]
    assert len(applied) == 2 and "its ignored EOS 6 at position 1 ended it" in applied[1]
    ran_on = {**cut, "finish_reason": "length", "stop_reason": None}
    assert invariants_of(engine_run(notes={"truncation": {"a": ran_on}})) == []


def test_ignore_eos_belongs_to_an_eos_cut() -> None:
    from pydantic import ValidationError

    from difftest.tiers.engine.scenario import EngineScenario

    raw = _engine_scenario(ignore_eos=True)
    raw["requests"][0]["max_tokens"] = 20
    with pytest.raises(ValidationError, match="ignore_eos applies to `truncate: eos` only"):
        EngineScenario.model_validate(raw)
    raw["requests"][0]["truncate"] = "eos"
    assert EngineScenario.model_validate(raw).requests[0].ignore_eos


def test_min_tokens_is_refused_where_it_cannot_hold_back_the_cut() -> None:
    from pydantic import ValidationError

    from difftest.tiers.engine.scenario import EngineScenario

    raw = _engine_scenario(truncate="eos", min_tokens=30)
    raw["requests"][0]["max_tokens"] = 20
    with pytest.raises(ValidationError, match="min_tokens 30 is above max_tokens 20"):
        EngineScenario.model_validate(raw)
    raw["requests"][0]["min_tokens"] = 8
    assert EngineScenario.model_validate(raw).requests[0].min_tokens == 8
    for cut in ("none", "stop_string", "max_tokens", "boundary"):
        raw["requests"][0]["truncate"] = cut
        with pytest.raises(ValidationError, match="min_tokens holds back EOS and stop token ids"):
            EngineScenario.model_validate(raw)
    raw["requests"][0].update(truncate="eos", ignore_eos=True)
    with pytest.raises(ValidationError, match="and ignore_eos"):
        EngineScenario.model_validate(raw)


def test_min_tokens_must_hold_back_the_token_it_covers() -> None:
    """#49: with min_tokens 4 past a stop token 6 drafted at position 1, the token may end the
    request only from position 4 on, and the request may not end before 4 tokens."""
    cut = {"kind": "stop", "token": 6, "position": 1, "min_tokens": 4}
    held = {**cut, "finish_reason": "stop", "stop_reason": 6}
    ok = engine_run(outputs={"a": [5, 7, 8, 9, 6]}, notes={"truncation": {"a": held}})
    assert "min-tokens-held" not in invariants_of(ok)
    ran_on = {**cut, "finish_reason": "length", "stop_reason": None}
    long = engine_run(outputs={"a": [5, 7, 8, 9, 1]}, notes={"truncation": {"a": ran_on}})
    assert "min-tokens-held" not in invariants_of(long)
    # Stopped on the token inside the window: both the emission and the early stop are named.
    early = engine_run(outputs={"a": [5, 6]}, notes={"truncation": {"a": held}})
    found = [v.detail for v in check([early])[LABEL] if v.invariant == "min-tokens-held"]
    assert len(found) == 2 and "emitted its stop token 6 at position 1" in found[0]
    assert "stopped after 2 tokens" in found[1]
    short = engine_run(outputs={"a": [5, 7]}, notes={"truncation": {"a": ran_on}})
    assert "ended (length) after 2 tokens" in str(check([short])[LABEL])


def test_a_bonus_placement_needs_a_stop_rule() -> None:
    from pydantic import ValidationError

    from difftest.tiers.engine.scenario import EngineScenario

    raw = _engine_scenario(truncate="max_tokens", place="bonus")
    raw["requests"][0]["max_tokens"] = 20
    with pytest.raises(ValidationError, match="use `truncate: boundary`"):
        EngineScenario.model_validate(raw)
    for rule in ("eos", "stop", "stop_string"):
        raw["requests"][0]["truncate"] = rule
        assert EngineScenario.model_validate(raw).requests[0].place == "bonus"
