"""The scheduler tier's oracle on hand-computed truncation examples and on every shipped
scenario (pure, fast).

Each hand-built scenario is one request with a scripted target and drafter,
small enough that the expected counters can be worked out on paper (the
comments say how); the shipped scenarios are checked for the properties a
correct answer must have whatever the numbers are.
"""

from __future__ import annotations

import pytest

from difftest.probe.scheduler import script
from difftest.tiers.common.schedule import RequestSchedule, Sampling
from difftest.tiers.scheduler.oracle import expected_outputs, expected_totals
from difftest.tiers.scheduler.play import ScriptViolation, play_request
from difftest.tiers.scheduler.scenario import Scenario, load_scenarios
from tests.factories import SCENARIOS_DIR

SCENARIOS = SCENARIOS_DIR / "scheduler"


def _one(target: str, steps: list[str], k: int = 3, path: str = "sync", **req: object) -> Scenario:
    """One request `r` (prompt `hi`, max_tokens 20 unless given)
    with a scripted target and drafter."""
    then = "perfect" if path == "async" else "none"
    request = {
        "id": "r",
        "prompt": "hi",
        "max_tokens": 20,
        "target": target,
        "drafter": {"kind": "scripted", "steps": steps, "then": then},
        **req,
    }
    return Scenario.model_validate(
        {"name": "t", "statement": "s", "k": k, "draft_path": path, "requests": [request]}
    )


def test_eos_inside_accepted_drafts_emits_two() -> None:
    # drafts [a, EOS, c] all accepted + bonus d: the request emits [a, EOS]
    totals = expected_totals(_one("xa<eos>cd", ["a<eos>c"]), ["r"])
    assert (totals.num_drafts, totals.num_draft_tokens, totals.num_accepted_tokens) == (1, 3, 3)
    assert totals.num_accepted_tokens_per_pos == [1, 1, 1]
    assert totals.num_emitted_tokens == 2
    assert totals.mean_acceptance_length == 2.0
    assert totals.emitted_source == "oracle"


def test_stop_token_first_accepted_draft_emits_one() -> None:
    totals = expected_totals(_one("x.bcd", [".bc"], stop=["."]), ["r"])
    assert (totals.num_drafts, totals.num_accepted_tokens, totals.num_emitted_tokens) == (1, 3, 1)


def test_max_tokens_mid_block() -> None:
    totals = expected_totals(_one("abcdefgh", ["bcde"], k=4, max_tokens=4), ["r"])
    assert (totals.num_drafts, totals.num_accepted_tokens, totals.num_emitted_tokens) == (1, 4, 3)


def test_eos_on_bonus_counts_accepted_plus_one() -> None:
    totals = expected_totals(_one("xabc<eos>", ["abc"]), ["r"])
    assert totals.num_emitted_tokens == totals.num_accepted_tokens + totals.num_drafts == 4


def test_rejection_keeps_verifier_semantics() -> None:
    # 'a' accepted, 'z' rejected, 'c' never reached; bonus 'b'
    totals = expected_totals(_one("xab<eos>", ["azc"]), ["r"])
    assert totals.num_accepted_tokens_per_pos == [1, 0, 0]
    assert totals.num_draft_tokens_per_pos == [1, 1, 1]
    assert totals.num_emitted_tokens == 2


def test_all_invalid_async_request_depends_on_reading() -> None:
    scenario = _one(
        "yes<eos>", ["zzz", "zzz", "zzz"], path="async", grammar={"choice": ["yes", "no"]}
    )
    strict = expected_totals(scenario, ["r"], "strict")
    lenient = expected_totals(scenario, ["r"], "lenient")
    assert (strict.num_drafts, strict.num_emitted_tokens, strict.mean_acceptance_length) == (
        0,
        0,
        None,
    )
    assert (lenient.num_drafts, lenient.num_draft_tokens, lenient.num_emitted_tokens) == (3, 0, 3)


def test_sync_grammar_trims_before_counting() -> None:
    scenario = _one("green<eos>", ["rzz", "enz"], grammar={"choice": ["red", "green", "blue"]})
    played = play_request(scenario.probe_data(), "r")
    rows = played.verifications
    assert [(r.real_drafts, r.scheduled_drafts, r.accepted, r.emitted) for r in rows] == [
        (1, 1, 1, 2),
        (2, 2, 2, 3),
    ]
    assert played.output == script.tokens("green<eos>") and played.finish == "stop"


def test_async_pads_invalid_drafts_to_k() -> None:
    # k placeholders are scheduled; `zzz` is invalid under the grammar: 0 real drafts, 3 scheduled.
    scenario = _one(
        "yes<eos>", ["zzz", "zzz", "zzz"], path="async", grammar={"choice": ["yes", "no"]}
    )
    rows = play_request(scenario.probe_data(), "r").verifications
    assert {(r.real_drafts, r.scheduled_drafts) for r in rows} == {(0, 3)}


def test_max_tokens_finishes_with_length() -> None:
    played = play_request(_one("abcdefgh", ["bcde"], k=4, max_tokens=4).probe_data(), "r")
    assert played.finish == "length" and played.output == script.tokens("abcd")


def test_expected_outputs_are_the_played_outputs() -> None:
    scenario = _one("xa<eos>cd", ["a<eos>c"])
    assert expected_outputs(scenario, ["r"]) == {"r": script.tokens("xa<eos>")}


def test_a_target_that_breaks_its_grammar_is_a_script_violation() -> None:
    scenario = _one("maybe<eos>", [], grammar={"choice": ["yes"]})
    with pytest.raises(ScriptViolation, match="grammar"):
        play_request(scenario.probe_data(), "r")


@pytest.mark.parametrize("scenario", load_scenarios(SCENARIOS), ids=lambda s: s.name)
def test_every_shipped_scenario_has_consistent_oracle(scenario: Scenario) -> None:
    for reading in ("strict", "lenient"):
        per_order = {repr(expected_totals(scenario, o, reading)) for o in scenario.orders()}
        assert len(per_order) == 1  # the correct answer never depends on batch order
        alone = [expected_totals(scenario, [rid], reading) for rid in scenario.request_ids]
        batch = expected_totals(scenario, scenario.request_ids, reading)
        assert batch.num_drafts == sum(a.num_drafts for a in alone)
        assert batch.num_emitted_tokens == sum(a.num_emitted_tokens for a in alone)
        assert batch.num_accepted_tokens <= batch.num_draft_tokens
        assert sum(batch.num_accepted_tokens_per_pos) == batch.num_accepted_tokens
        assert sum(batch.num_draft_tokens_per_pos) == batch.num_draft_tokens
        assert (
            batch.num_drafts
            <= batch.num_emitted_tokens
            <= batch.num_accepted_tokens + batch.num_drafts
        )


def test_skipped_drafting_is_no_row_and_a_plain_decode_step() -> None:
    # perfect drafts (k=3): prefill x, step 1 abc+d, step 2 SKIPPED (one token e), step 3 fgh+i;
    # max_tokens 10
    scenario = _one("xabcdefghijk", [], max_tokens=10)
    data = scenario.probe_data()
    data["requests"][0]["drafter"] = {
        "kind": "scripted",
        "steps": [],
        "then": "perfect",
        "skipped": [2],
    }
    played = play_request(data, "r")
    rows = [
        (v.real_drafts, v.scheduled_drafts, v.emitted, v.drafting_skipped)
        for v in played.verifications
    ]
    assert rows == [(3, 3, 4, False), (0, 0, 1, True), (3, 3, 4, False)]
    assert played.output == script.tokens("xabcdefghi") and played.finish == "length"


def test_the_runner_zero_fills_k_drafts_with_a_real_token() -> None:
    req = {"id": "r", "drafter": {"kind": "random", "acceptance": 1.0, "skipped": [1]}}
    target = script.tokens("abcdef")
    assert script.runner_drafts(req, 0, 3, target, 1, 0) == ([script.ZERO_FILL] * 3, True)
    assert script.runner_drafts(req, 0, 3, target, 1, 1) == (target[1:4], False)
    # Where the target has token 0, the verifier accepts a zero-fill draft:
    # the scheduler cannot tell padding.
    assert script.VOCAB[script.ZERO_FILL] == "<pad>"
    assert script.verify(script.tokens("<pad>ab"), 0, [0, 0]) == script.tokens("<pad>a")


def test_shipped_drafter_skip_scenario_counts_no_row_for_the_skipped_steps() -> None:
    (scenario,) = [s for s in load_scenarios(SCENARIOS) if s.name == "drafter-skip"]
    totals = expected_totals(scenario, ["long", "short"])
    # long: 3 rows of 3 drafts (steps 1, 4, 5; 2 and 3 skipped); short: 2 rows;
    # every row emits 4 tokens
    assert (totals.num_drafts, totals.num_draft_tokens, totals.num_emitted_tokens) == (5, 15, 20)
    assert expected_totals(scenario, ["long"], "lenient") == expected_totals(
        scenario, ["long"], "strict"
    )


# -- serving conditions: the oracle follows the scheduler's batch-dependent decisions -----------


def _schedule(*samplings: Sampling) -> RequestSchedule:
    return RequestSchedule(tuple(samplings))


def test_a_budget_cut_draft_block_counts_only_the_scheduled_drafts() -> None:
    # x, then drafts "abc" all right (k=3); the budget left room for 1 draft in the 2nd step:
    # it verifies "a" (accepted) and samples the bonus "b": 1 draft, 1 accepted, 2 emitted.
    scenario = _one("xabcdefgh", [], k=3, max_tokens=4, drafter=_PERFECT)
    cut = _schedule(Sampling(0, 0), Sampling(1, 1, budget_cut=True))
    played = play_request(scenario.probe_data(), "r", cut)
    first = played.steps[1]
    assert first is not None
    assert (first.real_drafts, first.scheduled_drafts, first.accepted, first.emitted) == (
        1,
        1,
        1,
        2,
    )
    assert script.text(played.output) == "xabc"


def test_fewer_slots_without_the_budget_are_not_the_oracles_to_follow() -> None:
    """A branch that schedules fewer drafts where the budget did not force it is measured against
    the full proposal (the cut is not a legitimate decision of the batch)."""
    scenario = _one("xabcdefgh", [], k=3, max_tokens=4, drafter=_PERFECT)
    not_forced = _schedule(Sampling(0, 0), Sampling(1, 1, budget_cut=False))
    step = play_request(scenario.probe_data(), "r", not_forced).steps[1]
    assert step is not None and step.real_drafts == 3


def test_a_preempted_request_recomputes_and_samples_one_token_without_a_row() -> None:
    # x; "abc"+d (row); preempted: the recompute samples "e" (no row); then "fgh"+i.
    scenario = _one("xabcdefghijk", [], k=3, max_tokens=10, drafter=_PERFECT)
    preempted = _schedule(Sampling(0, 0), Sampling(1, 3), Sampling(2, 0, restart=True))
    played = play_request(scenario.probe_data(), "r", preempted)
    assert [v is not None for v in played.steps] == [False, True, False, True]
    assert script.text(played.output) == "xabcdefghi"


def test_an_abort_in_flight_ends_the_request_where_it_was() -> None:
    scenario = _one("xabcdefgh", [], k=3, max_tokens=9, drafter=_PERFECT)
    aborted = _schedule(Sampling(0, 0), Sampling(1, 3), Sampling(2, 3, aborted=True))
    played = play_request(scenario.probe_data(), "r", aborted)
    assert played.finish == "abort"
    assert len(played.verifications) == 1
    assert script.text(played.output) == "xabcd"


def test_with_spec_decoding_off_nothing_is_a_row() -> None:
    scenario = Scenario.model_validate(
        {
            "name": "t",
            "statement": "s",
            "k": 3,
            "spec_decoding": False,
            "requests": [
                {"id": "r", "prompt": "hi", "max_tokens": 5, "target": "xabcdefgh",
                 "drafter": _PERFECT},
            ],
        }
    )  # fmt: skip
    totals = expected_totals(scenario, ["r"])
    assert totals.num_drafts == 0 and totals.mean_acceptance_length is None
    assert expected_outputs(scenario, ["r"]) == {"r": script.tokens("xabcd")}


_PERFECT = {"kind": "scripted", "steps": [], "then": "perfect"}
