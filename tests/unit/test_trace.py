"""Step traces on hand-made runs: the recorded row beside the oracle's,
the first disagreement, folding.

The oracle's rows come from a tier (`ProbeTier.expected_steps`); here a small tier
stands in that returns given rows, because what is under test is how a trace
sets them beside the recorded stats. The real tiers' rows are checked against
real probe runs in tests/tiers/test_expected_steps.py.
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from difftest.core.records import ProbeRun, Reading, Totals
from difftest.reports.html import render_html
from difftest.reports.trace import Elided, build_trace, traces_for
from difftest.reports.trace_terminal import render_trace
from tests.factories import (
    SCENARIO,
    K,
    make_evidence,
    make_probe_files,
    make_result,
    make_run,
    make_step,
    make_step_stats,
    make_totals,
)


class RowsTier:
    """Returns the oracle rows it was given, one per step (all a trace asks of a probe tier)."""

    name = "rows"

    def __init__(self, rows: list[Totals | None]) -> None:
        self.rows = rows

    def expected_steps(self, scenario, run: ProbeRun, reading: Reading) -> list[Totals | None]:
        return self.rows


class Scenario:
    k = K


def row(rows: int, drafts: int, accepted: int, emitted: int) -> Totals:
    per_draft = [rows if drafts >= rows * (i + 1) else 0 for i in range(K)]
    per_acc = [min(rows, max(0, accepted - i * rows)) for i in range(K)]
    return make_totals(
        num_drafts=rows,
        num_draft_tokens=drafts,
        num_accepted_tokens=accepted,
        num_accepted_tokens_per_pos=per_acc,
        num_draft_tokens_per_pos=per_draft,
        num_emitted_tokens=emitted,
    )


def two_request_run() -> tuple[ProbeRun, list[Totals | None]]:
    """Step 1 agrees; step 2 lost request a's row; step 3 reported no stats at all."""
    both = dict(
        scheduled=["a", "b"],
        drafts={"a": [1, 2, 3], "b": [4, 5, 6]},
        sampled={"a": [1, 2, 3, 9], "b": [4, 9]},
        emitted={"a": [1, 2, 3, 9], "b": [4, 9]},
    )
    steps = [
        make_step(
            1,
            **both,
            stats=make_step_stats(
                num_drafts=2,
                num_draft_tokens=6,
                num_accepted_tokens=4,
                num_accepted_tokens_per_pos=[2, 2, 0],
                num_draft_tokens_per_pos=[2, 2, 2],
                num_emitted_tokens=6,
            ),
        ),
        make_step(
            2,
            **both,
            stats=make_step_stats(
                num_drafts=1,
                num_draft_tokens=3,
                num_accepted_tokens=1,
                num_accepted_tokens_per_pos=[1, 0, 0],
                num_draft_tokens_per_pos=[1, 1, 1],
                num_emitted_tokens=2,
            ),
        ),
        make_step(3, **both, stats=None),
    ]
    expected = [row(2, 6, 4, 6), row(2, 6, 4, 6), row(2, 6, 4, 6)]
    return make_run("order:a,b", steps=steps), expected


def test_the_first_disagreeing_step_and_what_differs() -> None:
    run, expected = two_request_run()
    trace = build_trace(RowsTier(expected), Scenario(), run, "strict", "racy")
    assert [s.differs for s in trace.steps][0] == []
    assert trace.first == 1
    assert trace.steps[1].differs == [
        "rows",
        "draft_tokens",
        "accepted",
        "accepted_per_pos",
        "draft_tokens_per_pos",
        "emitted",
    ]
    assert trace.steps[1].recorded.rows == 1 and trace.steps[1].expected.rows == 2
    no_stats = trace.steps[2].recorded
    assert not no_stats.reported and no_stats.rows == 0 and trace.steps[2].differs
    assert [q.request for q in trace.steps[0].requests] == ["a", "b"]


def test_a_branch_without_an_emitted_counter_is_read_as_its_mean_implies() -> None:
    run, expected = two_request_run()
    implied = run.model_copy(update={"totals": make_totals(emitted_source="implied")})
    trace = build_trace(RowsTier(expected), Scenario(), implied, "strict", "old")
    assert trace.steps[0].recorded.emitted == 2 + 4  # rows + accepted, whatever the step emitted
    assert trace.emitted_source == "implied"


def test_a_tier_that_cannot_say_leaves_every_step_unjudged() -> None:
    run, _ = two_request_run()
    trace = build_trace(RowsTier([None] * len(run.steps)), Scenario(), run, "strict", "x")
    assert trace.first is None and all(s.expected is None for s in trace.steps)


def test_segments_fold_agreeing_steps_away_from_a_disagreement() -> None:
    agree = make_step_stats(
        num_drafts=1, num_draft_tokens=3, num_accepted_tokens=3, num_emitted_tokens=4
    )
    steps = [make_step(i, stats=agree) for i in range(20)]
    expected = [row(1, 3, 3, 4)] * 20
    expected[10] = row(2, 6, 4, 6)
    trace = build_trace(RowsTier(expected), Scenario(), make_run(steps=steps), "strict", "x")
    segments = trace.segments(context=1)
    assert segments[0] == Elided(0, 8, 9, True)
    assert [s.step for s in segments[1:4]] == [9, 10, 11]
    assert segments[4] == Elided(12, 19, 8, True)
    limited = trace.segments(context=1, limit=2)
    assert [getattr(s, "step", None) for s in limited[1:3]] == [9, 10]
    assert limited[-1] == Elided(11, 19, 9, False)  # left out by the limit: not claimed to agree
    assert [
        s.step
        for s in build_trace(
            RowsTier([row(1, 3, 3, 4)] * 20), Scenario(), make_run(steps=steps), "strict", "x"
        ).segments()[:3]
    ] == [0, 1, 2]


def test_show_prints_the_step_where_stats_are_lost() -> None:
    run, expected = two_request_run()
    trace = build_trace(RowsTier(expected), Scenario(), run, "strict", "racy")
    console = Console(record=True, width=80)
    render_trace(
        console, trace, make_result("broken", branch="racy"), [make_result("pass", label="alone:a")]
    )
    text = console.export_text()
    assert "step 2  * the first step that disagrees with the oracle: rows" in text
    assert "the branch reported no spec stats for this step" in text
    assert "other runs of racy: alone:a pass" in text
    assert max(len(line) for line in text.splitlines()) <= 80


def test_html_carries_the_trace_of_a_failing_result_collapsed(tmp_path: Path) -> None:
    run, expected = two_request_run()
    result = make_result("broken", branch="main", label=run.label)
    traces = {
        ("main", SCENARIO, run.label): build_trace(
            RowsTier(expected), Scenario(), run, "strict", "main"
        )
    }
    html = render_html(make_evidence(results=[result], probes=[make_probe_files()]), traces)
    assert "step trace: first disagreement at step 2" in html
    assert 'class="first"' in html and 'class="off"' in html
    assert 'href="probe/main-scheduler-runs.jsonl"' in html and 'href="evidence.json"' in html


def test_traces_are_built_only_for_recorded_runs_with_steps() -> None:
    run, _ = two_request_run()
    result = make_result("broken", label=run.label)
    scenario = type("S", (), {"k": K, "name": SCENARIO})()
    assert traces_for([result], {}, {SCENARIO: scenario}, "strict") == {}
    stepless = run.model_copy(update={"steps": []})
    assert (
        traces_for(
            [result], {("main", SCENARIO, run.label): stepless}, {SCENARIO: scenario}, "strict"
        )
        == {}
    )


def test_each_request_step_says_what_a_serving_condition_made_of_it() -> None:
    """Padding, a prefill chunk, a preemption and the recompute after it, an abort in flight and a
    step still in flight after its request finished read as such, beside the finish reason."""
    steps = [
        make_step(
            step=0,
            scheduled=["a", "b", "c"],
            drafts={"b": [-1, -1, -1]},
            sampled={"a": [5], "b": [6], "c": []},
            emitted={"a": [5], "b": [6]},
            finished={"a": "stop"},
            tokens={"a": 2, "b": 4, "c": 8},
            stats=None,
        ),
        make_step(
            step=1,
            scheduled=["a", "b"],
            drafts={"a": [-1, -1, -1], "b": [1, 2, 3]},
            sampled={"a": [9], "b": [1, 2, 3, 4]},
            emitted={},
            preempted=["c"],
            aborted=["b"],
            stats=None,
        ),
        make_step(step=2, scheduled=["c"], drafts={}, sampled={"c": [7]}, emitted={"c": [7]}),
    ]
    run = make_run("order:a,b,c", steps=steps)
    trace = build_trace(RowsTier([None, None, None]), Scenario(), run, "strict", "x")
    notes = [{q.request: q.notes for q in s.requests} for s in trace.steps]
    assert notes == [
        {"a": "stop", "b": "padded new decode", "c": "prefill chunk of 8"},
        {"a": "in flight after its end: discarded", "b": "aborted in flight", "c": "preempted"},
        {"c": "recomputed"},
    ]


def test_one_folded_step_reads_as_one() -> None:
    one, many = Elided(0, 0, 1, True), Elided(2, 5, 4, True)
    assert (one.steps, one.verb, many.steps, many.verb) == (
        "step 0",
        "agrees",
        "steps 2-5 (4)",
        "agree",
    )
