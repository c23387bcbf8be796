"""What counts as a kind of failure in `difftest fuzz` (`core/fuzz.py`), its exit codes, the summary
(`reports/fuzz.py`), and judging one branch against another (`tiers.door.judge_runs`)."""

from __future__ import annotations

from difftest import tiers
from difftest.core.evidence import BranchCoverage, CoverageEvidence
from difftest.core.fuzz import (
    Finding,
    FirstReach,
    FuzzReport,
    Kind,
    Observation,
    fuzz_exit_code,
    observations,
)
from difftest.core.records import Difference, Failure
from difftest.reports.fuzz import coverage_lines, render_fuzz_markdown, rows
from difftest.tiers.door import judge_runs
from difftest.tiers.scheduler.scenario import parse_scenario
from tests.factories import BRANCH, LABEL, make_result, make_run, make_totals, make_violation

EMITTED = Difference(counter="num_emitted_tokens", measured=4, expected=2)
MAL = Difference(counter="mean_acceptance_length", measured=4.0, expected=2.0)


def kinds(results, runs=()) -> list[tuple[str, str, str]]:
    return [(o.kind.branch, o.kind.verdict, o.kind.what) for o in observations(results, list(runs))]


def test_a_divergence_is_one_kind_per_first_counter() -> None:
    results = [
        make_result("diverge", differences=[EMITTED, MAL]),
        make_result("diverge", label="alone:a", differences=[EMITTED]),
    ]
    assert kinds(results) == [(BRANCH, "diverge", "num_emitted_tokens")], (
        "the derived mean is not a kind of its own"
    )
    (obs,) = observations(results, [])
    assert obs.label == LABEL and obs.reason == "num_emitted_tokens: measured 4, oracle 2"
    assert (
        observations(results, [], reference="main")[0].reason
        == "num_emitted_tokens: measured 4, main 2"
    )


def test_a_broken_result_is_one_kind_per_invariant() -> None:
    violations = [
        make_violation(invariant="stats-lost", detail="step 1 lost r0"),
        make_violation(invariant="stats-lost", detail="step 2"),
        make_violation(invariant="additivity", detail="sums differ"),
    ]
    assert kinds([make_result("broken", violations=violations)]) == [
        (BRANCH, "broken", "stats-lost"),
        (BRANCH, "broken", "additivity"),
    ]
    assert (
        observations([make_result("broken", violations=violations)], [])[0].reason
        == "stats-lost: step 1 lost r0"
    )


def test_an_error_is_a_kind_per_failure() -> None:
    raised = make_run(
        status="error",
        totals=None,
        failure=Failure(kind="exception", type="AssertionError", summary="AssertionError"),
    )
    timed_out = make_run(
        label="alone:a",
        status="timeout",
        totals=None,
        failure=Failure(kind="timeout", type="RunTimeout", summary="t"),
    )
    died = make_run(
        label="alone:b", status="error", totals=None, error="probe exited with code 7: boom"
    )
    results = [
        make_result("error", label=r.label, error=r.error or "x") for r in (raised, timed_out, died)
    ]
    assert [what for _, _, what in kinds(results, [raised, timed_out, died])] == [
        "AssertionError",
        "timeout",
        "probe",
    ]


def test_passing_results_show_nothing() -> None:
    assert observations([make_result("pass"), make_result("pass", label="alone:a")], []) == []


def report(*verdicts: str, **extra) -> FuzzReport:
    findings = [
        Finding(
            name=f"fuzz-{i}",
            file=f"found/scheduler/fuzz-{i}.yaml",
            evidence=f"found/evidence/fuzz-{i}.json",
            observations=[
                Observation(
                    kind=Kind(branch="main", verdict=v, what="num_drafts"),
                    label=LABEL,
                    reason="r | <b>",
                )
            ],
            round=i,
            found_after_s=float(i),
        )
        for i, v in enumerate(verdicts, 1)
    ]
    return FuzzReport(
        tier="scheduler",
        seed=0,
        examples=10,
        reading="strict",
        branches=["main", "other"],
        findings=findings,
        **extra,
    )


def test_exit_codes_follow_run() -> None:
    assert fuzz_exit_code(report()) == 0
    assert fuzz_exit_code(report("diverge")) == 1 and fuzz_exit_code(report("broken", "error")) == 1
    assert fuzz_exit_code(report("error")) == 3
    assert fuzz_exit_code(report(unmeasured={"other": "no environment"})) == 3
    assert fuzz_exit_code(report(stopped="interrupted")) == 2
    assert fuzz_exit_code(report("diverge", stopped="interrupted")) == 1


def test_the_summary_lists_each_kind_per_branch_and_the_branches_with_nothing() -> None:
    summary = report("diverge", "broken", unmeasured={"other": "could not start: ImportError"})
    assert rows(summary) == [
        ("main", "diverge", "num_drafts", "found/scheduler/fuzz-1.yaml", "r | <b>"),
        ("main", "broken", "num_drafts", "found/scheduler/fuzz-2.yaml", "r | <b>"),
        ("other", "error", "could not measure", "", "could not start: ImportError"),
    ]
    markdown = render_fuzz_markdown(summary)
    assert "r \\| &lt;b&gt;" in markdown and "<b>" not in markdown, (
        "reasons from branches are escaped"
    )
    assert "`found/scheduler/fuzz-1.yaml`" in markdown and "first finding after 1.0 s" in markdown
    assert "nothing found" in render_fuzz_markdown(report())


def covered(status: str, summary: str, *verdicts: str, **extra) -> FuzzReport:
    """A report with nothing found on `other`, whose changed lines the examples ran as `status`
    says (and main's findings of `verdicts`)."""
    coverage = CoverageEvidence(
        branches=[BranchCoverage(branch="other", status=status, summary=summary)]  # type: ignore[arg-type]
    )
    return report(*verdicts, coverage=coverage, **extra)


def test_nothing_found_where_changed_lines_did_not_run_reads_not_verified() -> None:
    unseen = covered(
        "not verified",
        "changed lines reached 2/3; not reached: scheduler.py 12",
        first_reached=[
            FirstReach(branch="other", file="vllm/s.py", line=10, example=1, after_s=0.5),
            FirstReach(branch="other", file="vllm/s.py", line=11, example=7, after_s=2.25),
        ],
    )
    assert rows(unseen)[-1] == ("other", "", "nothing found, not verified", "", "")
    assert coverage_lines(unseen) == [
        (
            "yellow",
            "other: changed lines reached 2/3; not reached: scheduler.py 12 "
            "(the last first reached by example 7, after 2.2 s)",
        )
    ]
    assert "- other: changed lines reached 2/3" in render_fuzz_markdown(unseen)
    assert unseen.not_verified() == ["other"]
    # As a gate: exit 0 unless coverage is required.
    assert fuzz_exit_code(unseen) == 0 and fuzz_exit_code(unseen, require_coverage=True) == 1
    unknown = covered("unknown", "coverage unknown: the tracer was stopped")
    assert rows(unknown)[-1][2] == "nothing found, coverage unknown"
    assert fuzz_exit_code(unknown, require_coverage=True) == 1
    seen = covered("verified", "changed lines reached 3/3")
    assert rows(seen)[-1][2] == "nothing found" and seen.not_verified() == []
    assert fuzz_exit_code(seen, require_coverage=True) == 0
    # What could not be measured or was interrupted keeps its own exit, as the gate's does.
    assert fuzz_exit_code(covered("unknown", "x", stopped="interrupted"), True) == 2
    assert fuzz_exit_code(covered("not verified", "x", "error"), True) == 3
    # A branch that could not be fuzzed reads could not measure, not its coverage.
    lost = covered("unknown", "coverage unknown: x", unmeasured={"other": "no environment"})
    assert lost.not_verified() == [] and coverage_lines(lost) == []


SCENARIO = parse_scenario(
    {
        "name": "s",
        "statement": "s",
        "k": 3,
        "requests": [
            {
                "id": "a",
                "prompt": "hi",
                "max_tokens": 9,
                "target": "abcdefghij",
                "drafter": {"kind": "scripted", "steps": [], "then": "perfect"},
            }
        ],
    },
    "s",
)


def test_judged_against_a_branch_its_totals_are_the_expected_ones() -> None:
    tier = tiers.get("scheduler")
    theirs, ours = make_totals(num_emitted_tokens=9), make_totals(num_emitted_tokens=7)
    run = make_run(label="order:a", totals=ours, outputs={"a": list(range(9))})
    (result,) = judge_runs(tier, SCENARIO, BRANCH, [run], "strict", expected={"order:a": theirs})
    assert result.expected == theirs and result.differences[0].counter == "num_emitted_tokens"


def test_judged_against_a_branch_its_own_violations_are_not_ours() -> None:
    tier = tiers.get("scheduler")
    run = make_run(
        label="order:a", outputs={"a": [1]}
    )  # not what the script emits: outputs-follow-script breaks
    (alone,) = judge_runs(tier, SCENARIO, BRANCH, [run], "strict", expected={"order:a": run.totals})
    assert alone.verdict == "broken" and {v.invariant for v in alone.violations} == {
        "outputs-follow-script"
    }
    shared = tier.invariants(SCENARIO, [run])
    (result,) = judge_runs(
        tier,
        SCENARIO,
        BRANCH,
        [run],
        "strict",
        expected={"order:a": run.totals},
        baseline_violations=shared,
    )
    assert result.verdict == "pass"
