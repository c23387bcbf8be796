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
from difftest.core.records import ProbeRun, StepRecord
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
