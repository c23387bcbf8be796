"""Invariants on hand-made runs: lost stats and order dependence must be flagged (pure, fast)."""

from __future__ import annotations

from typing import Any

from difftest.tiers.common.invariants import check_invariants
from difftest.core.records import ProbeRun, StepRecord, Totals


def _totals(drafts: int, tokens: int, accepted: int, emitted: int | None = None, k: int = 3) -> Totals:
    per_tok = [drafts if tokens >= drafts * (i + 1) else 0 for i in range(k)]
    per_acc = [min(drafts, max(0, accepted - i * drafts)) for i in range(k)]
    return Totals(
        num_drafts=drafts, num_draft_tokens=tokens, num_accepted_tokens=accepted,
        num_accepted_tokens_per_pos=per_acc, num_draft_tokens_per_pos=per_tok,
        num_emitted_tokens=drafts + accepted if emitted is None else emitted,
        emitted_source="implied" if emitted is None else "counter:num_emitted_tokens",
    )


def _plus(*parts: Totals) -> Totals:
    """What a batch of these requests must report: the field-wise sum."""
    def add(name: str) -> Any:
        values = [getattr(p, name) for p in parts]
        return [sum(col) for col in zip(*values)] if isinstance(values[0], list) else sum(values)
    names = ("num_drafts", "num_draft_tokens", "num_accepted_tokens", "num_accepted_tokens_per_pos",
             "num_draft_tokens_per_pos", "num_emitted_tokens")
    return Totals(**{n: add(n) for n in names})


def _stats(drafts: int, tokens: int, accepted: int, **extra: Any) -> dict[str, Any]:
    t = _totals(drafts, tokens, accepted)
    return {"num_spec_tokens": 3, **t.model_dump(include={"num_drafts", "num_draft_tokens", "num_accepted_tokens",
                                                          "num_accepted_tokens_per_pos", "num_draft_tokens_per_pos"}), **extra}


def _run(label: str, order: list[str], totals: Totals, steps: list[StepRecord] | None = None) -> ProbeRun:
    return ProbeRun(scenario="s", tier="scheduler", order=order, label=label, totals=totals, steps=steps or [])


def test_consistent_runs_have_no_violations() -> None:
    a, b = _totals(1, 3, 3), _totals(2, 6, 3)
    both = _plus(a, b)
    runs = [_run("order:a,b", ["a", "b"], both), _run("order:b,a", ["b", "a"], both),
            _run("alone:a", ["a"], a), _run("alone:b", ["b"], b)]
    assert check_invariants(None, runs) == {r.label: [] for r in runs}


def test_order_dependence_flags_only_the_deviating_order() -> None:
    a, b = _totals(1, 3, 3), _totals(2, 6, 3)
    runs = [_run("order:a,b", ["a", "b"], _plus(a, b)), _run("order:b,a", ["b", "a"], _totals(1, 3, 3)),
            _run("alone:a", ["a"], a), _run("alone:b", ["b"], b)]
    found = check_invariants(None, runs)
    assert found["order:a,b"] == []
    kinds = {v.invariant for v in found["order:b,a"]}
    assert kinds == {"order-independence", "additivity"}
    detail = next(v for v in found["order:b,a"] if v.counter == "num_drafts").detail
    assert "b,a" in detail and "sum of the requests run alone" in detail


def test_majority_is_the_reference_without_alone_runs() -> None:
    same = _totals(3, 9, 6)
    runs = [_run("order:a,b,c", list("abc"), same), _run("order:b,a,c", list("bac"), same),
            _run("order:c,b,a", list("cba"), _totals(2, 6, 4))]
    found = check_invariants(None, runs)
    assert found["order:a,b,c"] == [] and found["order:b,a,c"] == []
    assert {v.invariant for v in found["order:c,b,a"]} == {"order-independence"}
    assert "2 of 3 orders agree" in found["order:c,b,a"][0].detail


def test_lost_stats_in_a_step_are_flagged() -> None:
    # two requests verified real drafts; the step reports one row (the first was dropped)
    step = StepRecord(step=1, scheduled=["p", "g", "q"], drafts={"p": [1, 2, 3], "g": [-1, -1, -1], "q": [4, 5, 6]},
                      invalid={"g": 3}, sampled={"p": [1, 2, 3, 9], "g": [7], "q": [4, 5, 6, 9]},
                      stats=_stats(1, 3, 3))
    nothing = StepRecord(step=2, scheduled=["p", "g"], drafts={"p": [1, 2, 3], "g": [-1, -1, -1]}, invalid={"g": 3},
                         sampled={"p": [1, 9], "g": [7]}, stats=None)
    run = _run("order:p,g,q", ["p", "g", "q"], _totals(1, 3, 3), [step, nothing])
    found = check_invariants(None, [run])["order:p,g,q"]
    lost = [v for v in found if v.invariant == "stats-lost"]
    assert [v.measured for v in lost] == [1, 0]
    assert "no spec stats at all" in lost[1].detail and "p, q" in lost[0].detail


def test_all_invalid_row_is_not_required() -> None:
    step = StepRecord(step=1, scheduled=["g"], drafts={"g": [-1, -1, -1]}, invalid={"g": 3}, sampled={"g": [7]}, stats=None)
    assert check_invariants(None, [_run("order:g", ["g"], _totals(0, 0, 0), [step])]) == {"order:g": []}


def test_accepted_above_drafts_and_per_pos_mismatch() -> None:
    bad = Totals(num_drafts=1, num_draft_tokens=2, num_accepted_tokens=3,
                 num_accepted_tokens_per_pos=[1, 1, 0], num_draft_tokens_per_pos=[1, 1, 0], num_emitted_tokens=4)
    kinds = [v.invariant for v in check_invariants(None, [_run("order:a", ["a"], bad)])["order:a"]]
    assert kinds == ["accepted-le-drafts", "per-pos-sum"]


def test_emitted_counter_bounds_per_step() -> None:
    step = StepRecord(step=1, scheduled=["a"], drafts={"a": [1, 2, 3]}, sampled={"a": [1, 2, 3, 4]},
                      stats=_stats(1, 3, 3, num_emitted_tokens=5))
    found = check_invariants(None, [_run("order:a", ["a"], _totals(1, 3, 3, emitted=5), [step])])["order:a"]
    assert [v.invariant for v in found] == ["emitted-bounds"]
