"""The scheduler tier on the three shipped branches, in their real environments (slow).

Encodes what the tier must show: main overcounts emitted tokens on truncation
and passes the controls; pr-56137-style matches the oracle on truncation, its
residual (an all-invalid request still counted as a draft row) shows under the
strict reading only; pr-56195-style matches on truncation but, in the mixed
batch, loses the other requests' stats depending on where the invalid request
sits, which the invariants flag.
"""

from __future__ import annotations

import pytest

from difftest.core.records import ProbeRun
from difftest.tiers.common.invariants import COMPARED
from difftest.tiers.scheduler.invariants import check as check_invariants
from difftest.tiers.scheduler.oracle import expected_outputs, expected_totals
from difftest.tiers.scheduler.scenario import Scenario, load_scenarios
from difftest.tiers.scheduler.tier import SchedulerTier
from tests.factories import ROOT

pytestmark = pytest.mark.slow

SCENARIOS = {s.name: s for s in load_scenarios(ROOT / "scenarios" / "scheduler")}
TRUNCATION = ("eos-in-accepted-drafts", "stop-token-in-accepted-drafts", "max-tokens-mid-block")
CONTROLS = ("eos-on-bonus", "grammar-trim-sync", "partial-invalid-async")
MIXED = "mixed-batch-invalid-async"


@pytest.fixture(scope="session")
def runs_of(probe_runs):
    def get(branch: str) -> dict[str, list[ProbeRun]]:
        by_scenario: dict[str, list[ProbeRun]] = {}
        for run in probe_runs("scheduler", branch):
            by_scenario.setdefault(run.scenario, []).append(run)
        return by_scenario

    return get


def _matches(scenario: Scenario, run: ProbeRun, reading: str) -> list[str]:
    expected = expected_totals(scenario, run, reading)  # type: ignore[arg-type]
    return [c for c in COMPARED if getattr(run.totals, c) != getattr(expected, c)]


def _batch(runs: list[ProbeRun]) -> list[ProbeRun]:
    return [r for r in runs if r.role == "batch"]


@pytest.mark.parametrize("branch", ["main", "pr-56137-style", "pr-56195-style", "pr-50518-style"])
def test_every_run_ok_and_outputs_follow_the_script(runs_of, branch: str) -> None:
    runs = runs_of(branch)
    assert set(SCENARIOS) <= set(runs)
    for name, scenario_runs in runs.items():
        for run in scenario_runs:
            assert run.status == "ok", run.error
            assert run.outputs == expected_outputs(SCENARIOS[name], run), run.label


@pytest.mark.parametrize("name", TRUNCATION)
def test_main_overcounts_emitted_on_truncation(runs_of, name: str) -> None:
    for run in _batch(runs_of("main")[name]):
        expected = expected_totals(SCENARIOS[name], run.order)
        assert run.totals.emitted_source == "implied"
        assert run.totals.num_emitted_tokens > expected.num_emitted_tokens
        assert _matches(SCENARIOS[name], run, "strict") == ["num_emitted_tokens"]


@pytest.mark.parametrize("branch", ["main", "pr-56137-style", "pr-56195-style"])
@pytest.mark.parametrize("name", CONTROLS)
def test_controls_pass_everywhere(runs_of, branch: str, name: str) -> None:
    for run in runs_of(branch)[name]:
        assert _matches(SCENARIOS[name], run, "strict") == []


@pytest.mark.parametrize("branch", ["main", "pr-56137-style"])
def test_order_independent_and_no_violations(runs_of, branch: str) -> None:
    for name, runs in runs_of(branch).items():
        assert all(v == [] for v in check_invariants(SCENARIOS[name], runs).values()), name


@pytest.mark.parametrize("branch", ["pr-56137-style", "pr-56195-style"])
@pytest.mark.parametrize(
    "name", TRUNCATION + ("long-random-k1", "long-random-k3", "long-random-k5")
)
def test_fixes_match_oracle_on_truncation(runs_of, branch: str, name: str) -> None:
    for run in runs_of(branch)[name]:
        assert run.totals.emitted_source.startswith("counter:")
        assert _matches(SCENARIOS[name], run, "strict") == []
        assert run.totals.mean_acceptance_length == pytest.approx(
            expected_totals(SCENARIOS[name], run.order).mean_acceptance_length, abs=1e-9
        )


def test_56137_residual_strict_only(runs_of) -> None:
    for name in ("grammar-all-invalid-async", MIXED, "async-short-drafts"):
        for run in runs_of("pr-56137-style")[name]:
            if run.label in ("alone:plain1", "alone:plain2", "alone:short", "alone:full"):
                continue
            assert _matches(SCENARIOS[name], run, "lenient") == []
            assert "num_drafts" in _matches(SCENARIOS[name], run, "strict")


#: The batches where one request's drafts are all invalid in a step: by its grammar, or (#49) an
#: async drafter that proposed nothing, so every placeholder is -1 padding.
ALL_INVALID = {MIXED: "grammar", "async-short-drafts": "empty"}


@pytest.mark.parametrize("name", ALL_INVALID)
def test_56195_loses_stats_by_order(runs_of, name: str) -> None:
    runs = runs_of("pr-56195-style")[name]
    violations = check_invariants(SCENARIOS[name], runs)
    for run in _batch(runs):
        position = run.order.index(ALL_INVALID[name])
        kinds = {v.invariant for v in violations[run.label]}
        if position == 0:  # invalid request first: nothing lost
            assert _matches(SCENARIOS[name], run, "strict") == []
            assert kinds == set()
        else:
            assert {"stats-lost", "order-independence", "additivity"} <= kinds
            # Lost rows are named where one choice of kept rows explains the step's counts (in
            # the first decode step, always), and always among the requests scheduled before the
            # invalid one.
            lost = [v for v in violations[run.label] if v.invariant == "stats-lost"]
            assert lost[0].requests, lost[0].detail
            for v in lost:
                # The grammar request's only invalid step is its first decode: always named.
                assert v.requests or name != MIXED, v.detail
                assert set(v.requests) <= set(run.order[:position]), v.detail
        if position == len(run.order) - 1:  # last: the step reports no spec stats at all
            first_decode = next(s for s in run.steps if s.drafts)
            assert first_decode.stats is None
        if position == 1:  # middle: the earlier request is lost, the later one kept
            first_decode = next(s for s in run.steps if s.drafts)
            assert first_decode.stats is not None and first_decode.stats.num_drafts == 1


SKIP = "drafter-skip"
#: The branches carrying #54054's approach: alone, and stacked on #56137's.
SKIP_FIXES = ("pr-54054-style", "pr-56137-plus-54054")


@pytest.mark.parametrize("branch", ["main", "pr-56137-style", "pr-56195-style"])
def test_without_the_flag_the_zero_fill_is_scheduled_and_counted(runs_of, branch: str) -> None:
    for run in _batch(runs_of(branch)[SKIP]):
        skipped = [s for s in run.steps if s.skipped]
        assert [s.skipped for s in skipped] == [["long"], ["long"]], run.label
        assert all(s.drafts["long"] == [0, 0, 0] for s in skipped)  # k zeros, verified and rejected
        assert {"num_drafts", "num_draft_tokens"} <= set(_matches(SCENARIOS[SKIP], run, "strict"))
        assert "num_accepted_tokens" not in _matches(SCENARIOS[SKIP], run, "strict")


@pytest.mark.parametrize("branch", SKIP_FIXES)
def test_the_runner_flag_keeps_the_zero_fill_out(runs_of, branch: str) -> None:
    """The probe sets `drafting_skipped` because these branches define it; their scheduler schedules
    none."""
    for run in runs_of(branch)[SKIP]:
        skipped = [s for s in run.steps if s.skipped]
        assert bool(skipped) == ("long" in run.order) and all(
            "long" not in s.drafts for s in skipped
        ), run.label
        assert _matches(SCENARIOS[SKIP], run, "strict") == []
        assert run.outputs == expected_outputs(SCENARIOS[SKIP], run.order)


@pytest.mark.parametrize("name", TRUNCATION)
def test_54054_alone_still_overcounts_truncation_and_the_stack_does_not(runs_of, name: str) -> None:
    for run in _batch(runs_of("pr-54054-style")[name]):
        assert _matches(SCENARIOS[name], run, "strict") == ["num_emitted_tokens"]
    for run in runs_of("pr-56137-plus-54054")[name]:
        assert _matches(SCENARIOS[name], run, "strict") == []


# -- serving conditions ---------------------------------------------------------------------------

PADDING = ("prefix-cache-hit", "pd-decode-node", "one-token-prompt")


def _padded(run: ProbeRun) -> list[tuple[int, str]]:
    """(step, request) of every new decode the scheduler padded with -1 placeholders."""
    return [
        (step.step, rid)
        for step in run.steps
        for rid, drafts in step.drafts.items()
        if drafts and all(d == -1 for d in drafts) and not step.invalid.get(rid)
    ]


def test_each_condition_reaches_the_real_scheduler(runs_of) -> None:
    """What each condition is for really happens in main's scheduler (else its scenario would test
    nothing): padding, aborts, a discarded in-flight step, preemption, chunks, cut draft blocks."""
    runs = {name: {r.label: r for r in found} for name, found in runs_of("main").items()}
    hit = runs["prefix-cache-hit"]["order:first,hit,partial"]
    assert {rid for _, rid in _padded(hit)} == {"hit"}
    assert not _padded(runs["prefix-cache-hit"]["alone:hit"])  # a cold cache: a plain prefill
    assert {rid for _, rid in _padded(runs["pd-decode-node"]["order:long,short"])} == {
        "long",
        "short",
    }
    assert {rid for _, rid in _padded(runs["one-token-prompt"]["order:decoding,one"])} == {"one"}
    assert not _padded(runs["one-token-prompt"]["alone:one"])
    aborted = runs["abort-in-flight"]["alone:aborted"]
    assert sum(s.aborted == ["aborted"] for s in aborted.steps) == 1
    assert aborted.finish_reasons == {"aborted": "abort"}
    in_flight = runs["two-steps-in-flight"]["alone:stops"]
    stop_step = next(s.step for s in in_flight.steps if "stops" in s.finished)
    assert any(s.step > stop_step and s.sampled.get("stops") for s in in_flight.steps)
    for name in ("preemption-sync", "preemption-pipelined"):
        assert any(s.preempted for r in runs[name].values() for s in r.steps), name
    chunked = runs["chunked-prefill"]["order:decoding,chunked,one"]
    assert sum(1 for s in chunked.steps if "chunked" in s.sampled and not s.sampled["chunked"]) > 1
    cut = runs["token-budget-cut"]["order:a,b"]
    assert any(0 < len(s.drafts.get(r, [])) < 3 for s in cut.steps for r in s.drafts)
    off = runs["spec-decoding-off"]
    assert all(s.stats is None and not s.drafts for r in off.values() for s in r.steps)
    # An asynchronous KV load parks the request (no step schedules it) until the runner reports
    # the load finished; it is then admitted as a padded new decode.
    waited = runs["pd-async-kv-load"]["alone:first"]
    first = next(s for s in waited.steps if "first" in s.scheduled)
    assert first.step >= 1 and _padded(waited)[0] == (first.step, "first")
    # The context cuts a draft block to the positions that still fit, and ends the request.
    capped = runs["max-model-len-cut"]["alone:capped"]
    assert [len(s.drafts.get("capped", [])) for s in capped.steps] == [0, 4, 2]
    assert capped.finish_reasons["capped"] == "length" and len(capped.outputs["capped"]) == 14 - 5
    # An async proposal shorter than k: its empty slots are -1 padding counted as invalid.
    short = runs["async-short-drafts"]["alone:empty"]
    assert any(s.invalid.get("empty") == 3 and s.drafts["empty"] == [-1] * 3 for s in short.steps)
    assert any(s.invalid.get("short") == 2 for s in runs["async-short-drafts"]["alone:short"].steps)


@pytest.mark.parametrize("name", PADDING)
def test_main_counts_the_padding_and_pr_50518_style_does_not(runs_of, name: str) -> None:
    for main, fixed in zip(runs_of("main")[name], runs_of("pr-50518-style")[name], strict=True):
        padded = len(_padded(main))
        expected = expected_totals(SCENARIOS[name], main)
        assert main.totals.num_drafts == expected.num_drafts + padded, main.label
        assert main.totals.num_draft_tokens == expected.num_draft_tokens + 3 * padded
        assert _matches(SCENARIOS[name], fixed, "strict") == [], fixed.label


@pytest.mark.parametrize("branch", ["main", "pr-56137-style", "pr-56195-style"])
def test_per_request_metrics_count_the_tokens_a_cut_dropped_on_every_branch(
    runs_of, branch: str
) -> None:
    """With `per_request_spec_decode_metrics: detailed`, every finished request returns its own
    figures; under the lenient reading they match the oracle's but for the mean of a request that
    max_tokens cut inside accepted drafts: vLLM reports accepted + 1 per step (neither fix touches
    the per-request path), the oracle the tokens received."""
    scenario = SCENARIOS["per-request-metrics"]
    tier = SchedulerTier()
    for run in runs_of(branch)["per-request-metrics"]:
        returned = run.notes["request_metrics"]
        assert set(returned) == set(run.order), run.label
        found = tier.response_differences(scenario, run, "lenient")
        cut = {"capped", "plain"} & set(run.order)
        assert {(d.counter, d.measured) for d in found} == {
            ("request_metrics.mean_acceptance_length", returned[rid]["mean_acceptance_length"])
            for rid in cut
        }, run.label
        if "capped" in run.order:
            # Accepted b c d, but max_tokens=3 kept b c: vLLM's mean 1 + 3, the oracle's 2.
            assert returned["capped"]["per_step_accepted"] == [3]
            assert returned["capped"]["mean_acceptance_length"] == 4.0
        if "grammar" in run.order:
            assert returned["grammar"]["acceptance_histogram"] == [3, 0, 0, 0]
            # Under the strict reading its all-invalid steps are no rows: the histogram differs.
            strict = {d.counter for d in tier.response_differences(scenario, run, "strict")}
            assert {
                "request_metrics.acceptance_histogram",
                "request_metrics.num_spec_steps",
            } <= strict


def test_each_logging_interval_is_judged_on_its_own_steps(runs_of) -> None:
    """With `log_every: 2`, the branch's own logger prints one line per interval of 2 engine steps
    (none where no step verified a draft); a fix matches the oracle in every interval, main's
    mean differs only in the intervals holding the steps max_tokens cut."""
    scenario = SCENARIOS["log-intervals"]
    tier = SchedulerTier()
    for run in runs_of("pr-56137-style")["log-intervals"]:
        lines = run.notes["log_intervals"]
        assert len(lines) == -(-run.notes["steps"] // 2) and lines[0] is not None
        assert tier.response_differences(scenario, run, "strict") == [], run.label
    capped = {r.label: r for r in runs_of("main")["log-intervals"]}["alone:capped"]
    found = tier.response_differences(scenario, capped, "strict")
    assert [d.counter for d in found] == ["log_interval.mean_acceptance_length"]
    assert found[0].explanation.startswith("interval 2 (steps 2-3)")


def test_a_prefix_cache_reset_drops_the_step_in_flight_and_the_fixes_count_what_was_kept(
    runs_of,
) -> None:
    """`reset_prefix_cache: 3` with two steps in flight: the reset preempts every running request,
    the scheduler drops the output of the step still in flight for them and resumes them with a
    recompute. The oracle leaves the dropped step out; both fixes match it in every order, main
    is off only by its truncation overcount (#56101), not by the reset."""
    scenario = SCENARIOS["prefix-cache-reset-in-flight"]
    for branch in ("pr-56137-style", "pr-56195-style"):
        for run in runs_of(branch)[scenario.name]:
            assert run.notes["reset_prefix_cache"], run.label  # the reset landed, preempting
            assert _matches(scenario, run, "strict") == [], (branch, run.label)
    for run in runs_of("main")[scenario.name]:
        dropped = [(s.step, rid) for s in run.steps for rid in s.dropped]
        reset = next(s for s in run.steps if s.reset)
        assert reset.step == 3 and set(reset.reset) == set(run.notes["reset_prefix_cache"])
        # The step scheduled before the reset was in flight: dropped, nothing emitted from it.
        assert dropped and all(step == 4 for step, _ in dropped), run.label
        assert all(not s.emitted.get(rid) for s in run.steps for rid in s.dropped)
        assert run.outputs == expected_outputs(scenario, run), run.label
        assert set(_matches(scenario, run, "strict")) <= {"num_emitted_tokens"}, run.label
