"""The engine tier's oracle and invariants on hand-made runs (pure, no vLLM)."""

from __future__ import annotations

from types import SimpleNamespace

from difftest.tiers.engine.invariants import check_engine_invariants, cross_branch_violations
from difftest.tiers.engine.oracle import expected_engine_totals
from difftest.core.records import ProbeRun, StepRecord, Totals

SCENARIO = SimpleNamespace(k=3)


def _run(label="order:a", outputs=None, steps=None, totals=None, notes=None, order=("a",)) -> ProbeRun:
    steps = steps or [
        # prefill: no drafts
        StepRecord(step=0, scheduled=["a"], sampled={"a": [5]}, emitted={"a": [5]}),
        # drafts [6, 7, 8] all accepted + bonus 9; a stop at 7 keeps [6, 7]
        StepRecord(
            step=1, scheduled=["a"], drafts={"a": [6, 7, 8]}, sampled={"a": [6, 7, 8, 9]}, emitted={"a": [6, 7]},
            finished={"a": "stop"},
            stats={"num_drafts": 1, "num_draft_tokens": 3, "num_accepted_tokens": 3,
                   "num_accepted_tokens_per_pos": [1, 1, 1], "num_draft_tokens_per_pos": [1, 1, 1]},
        ),
    ]
    totals = totals or Totals(num_drafts=1, num_draft_tokens=3, num_accepted_tokens=3,
                              num_accepted_tokens_per_pos=[1, 1, 1], num_draft_tokens_per_pos=[1, 1, 1],
                              num_emitted_tokens=4)
    prom = {"num_drafts": 1, "num_draft_tokens": 3, "num_accepted_tokens": 3, "num_accepted_tokens_per_pos": [1, 1, 1]}
    return ProbeRun(
        scenario="s", tier="engine", order=list(order), label=label, steps=steps, totals=totals,
        outputs=outputs or {"a": [5, 6, 7]}, finish_reasons={"a": "stop"},
        notes={"prometheus": prom, "stat_logger_matches_scheduler": True, **(notes or {})},
    )


def test_emitted_comes_from_the_step_after_stop_handling():
    expected = expected_engine_totals(SCENARIO, _run(), "strict")
    assert (expected.num_drafts, expected.num_draft_tokens, expected.num_accepted_tokens) == (1, 3, 3)
    assert expected.num_accepted_tokens_per_pos == [1, 1, 1]
    assert expected.num_emitted_tokens == 2 and expected.mean_acceptance_length == 2.0
    assert expected.emitted_source == "oracle"


def test_rejected_drafts_and_steps_without_drafts():
    steps = [
        StepRecord(step=0, scheduled=["a"], sampled={"a": [5]}, emitted={"a": [5]}),
        StepRecord(step=1, scheduled=["a"], drafts={"a": [6, 7]}, sampled={"a": [6, 1]}, emitted={"a": [6, 1]}),
        StepRecord(step=2, scheduled=["a"], sampled={"a": [2]}, emitted={"a": [2]}),
    ]
    expected = expected_engine_totals(SCENARIO, _run(steps=steps), "strict")
    assert (expected.num_drafts, expected.num_draft_tokens, expected.num_accepted_tokens) == (1, 2, 1)
    assert expected.num_draft_tokens_per_pos == [1, 1, 0]
    assert expected.num_accepted_tokens_per_pos == [1, 0, 0]
    assert expected.num_emitted_tokens == 2


def test_all_invalid_drafts_depend_on_the_reading():
    steps = [StepRecord(step=0, scheduled=["a"], drafts={"a": [-1, -1]}, invalid={"a": 2}, sampled={"a": [4]}, emitted={"a": [4]})]
    assert expected_engine_totals(SCENARIO, _run(steps=steps), "strict").num_drafts == 0
    lenient = expected_engine_totals(SCENARIO, _run(steps=steps), "lenient")
    assert (lenient.num_drafts, lenient.num_draft_tokens, lenient.num_emitted_tokens) == (1, 0, 1)


def test_consistent_run_has_no_violations():
    assert check_engine_invariants(SCENARIO, [_run()]) == {"order:a": []}


def test_prometheus_disagreeing_with_the_stat_logger_is_a_violation():
    run = _run(notes={"prometheus": {"num_drafts": 2, "num_draft_tokens": 3, "num_accepted_tokens": 3,
                                     "num_accepted_tokens_per_pos": [1, 1, 1]}})
    found = check_engine_invariants(SCENARIO, [run])["order:a"]
    assert [v.invariant for v in found] == ["prometheus-vs-stat-logger"]
    run = _run(notes={"stat_logger_matches_scheduler": False})
    assert [v.invariant for v in check_engine_invariants(SCENARIO, [run])["order:a"]] == ["stat-logger-vs-scheduler"]


def test_emitted_steps_must_add_up_to_the_output():
    found = check_engine_invariants(SCENARIO, [_run(outputs={"a": [5, 6, 7, 8]})])["order:a"]
    assert [v.invariant for v in found] == ["emitted-vs-output"]


def test_eos_cut_must_end_as_a_real_eos():
    cut = {"a": {"kind": "eos", "token": 7, "finish_reason": "stop", "stop_reason": 7}}
    found = check_engine_invariants(SCENARIO, [_run(notes={"truncation": cut})])["order:a"]
    assert [v.invariant for v in found] == ["truncation-applied"]
    cut["a"]["stop_reason"] = None
    assert check_engine_invariants(SCENARIO, [_run(notes={"truncation": cut})])["order:a"] == []


def test_branches_must_generate_the_baseline_tokens():
    base, same, other = _run(), _run(), _run(outputs={"a": [5, 6, 8]})
    found = cross_branch_violations(SCENARIO, {"main": [base], "x": [same], "y": [other]}, "main")
    assert found["x"] == {"order:a": []}
    assert [v.invariant for v in found["y"]["order:a"]] == ["generated-tokens-differ"]
    assert "main" not in found


def test_branches_must_choose_the_same_cut():
    choice = {"kind": "stop", "token": 7, "position": 2, "max_tokens": None, "reference_step": 1}
    moved = {**choice, "token": 8}
    found = cross_branch_violations(
        SCENARIO,
        {"main": [_run(notes={"truncation_choice": choice})], "x": [_run(notes={"truncation_choice": moved})]},
        "main",
    )
    assert [v.invariant for v in found["x"]["order:a"]] == ["truncation-differs"]


def test_order_checks_skip_runs_whose_outputs_differ():
    a = _run(label="order:a,b", order=("a", "b"))
    b = _run(label="order:b,a", order=("b", "a"), outputs={"a": [5, 6, 1]},
             totals=Totals(num_drafts=1, num_draft_tokens=3, num_accepted_tokens=3,
                           num_accepted_tokens_per_pos=[1, 1, 1], num_draft_tokens_per_pos=[1, 1, 1], num_emitted_tokens=9))
    found = check_engine_invariants(SCENARIO, [a, b])
    assert not any(v.invariant == "order-independence" for v in found["order:a,b"] + found["order:b,a"])


def test_cut_is_the_first_new_accepted_draft_never_the_last_accepted():
    from difftest.probe.engine_truncation import NoTruncationPoint, choose

    steps = [
        {"step": 0, "sampled": {"a": [5]}, "emitted": {"a": [5]}},
        {"step": 1, "drafts": {"a": [5, 6, 7]}, "sampled": {"a": [5, 6, 7, 9]}, "emitted": {"a": [5, 6, 7, 9]}},
    ]
    cut = choose("stop", "a", steps, [5, 5, 6, 7, 9], avoid=set())
    assert (cut["token"], cut["position"], cut["index_in_block"]) == (6, 2, 1)  # 5 occurred before; 7 is the last accepted
    assert choose("max_tokens", "a", steps, [5, 5, 6, 7, 9], avoid=set())["max_tokens"] == 2
    try:
        choose("eos", "a", steps, [5, 5, 6, 7, 9], avoid={6})
    except NoTruncationPoint:
        pass
    else:
        raise AssertionError("6 is excluded and 7 is the last accepted draft: no cut")


def test_engine_scenarios_must_share_one_engine(tmp_path):
    import pytest

    from difftest.tiers.engine.scenario import load_engine_scenarios
    from difftest.core.errors import ConfigError

    (tmp_path / "a.yaml").write_text("statement: a\nk: 3\nrequests: [{id: x, prompt: 'yes no', max_tokens: 8}]\n")
    (tmp_path / "b.yaml").write_text("statement: b\nk: 2\nrequests: [{id: x, prompt: 'yes no', max_tokens: 8}]\n")
    with pytest.raises(ConfigError, match="engine settings differ"):
        load_engine_scenarios(tmp_path)


def test_shipped_engine_scenarios_plan_reference_runs_first():
    from pathlib import Path

    from difftest.tiers.scheduler.scenario import load_scenarios

    scenarios = load_scenarios(Path(__file__).resolve().parents[1] / "scenarios", "engine")
    for s in scenarios:
        labels = [r["label"] for r in s.runs()]
        refs = [i for i, label in enumerate(labels) if label.startswith("reference:")]
        assert refs == list(range(len(refs))), labels
        assert s.probe_data()["runs"] == s.runs()
