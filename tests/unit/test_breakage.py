"""A crash or a hang where the baseline completes is `broken`; setup failures stay `error`.

Hand-built runs and results: the decision is pure (the CLI-level cases, with
real faulty branches, are in tests/e2e/test_breakage_cli.py).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from difftest.core.breakage import COMPLETES, EXITS, judge_against_baseline
from difftest.core.outcome import ProcessOutcome, clean_outcome
from difftest.core.records import Failure
from difftest.core.verdicts import exit_code, first_reason
from tests.factories import BRANCH, LABEL, SCENARIO, make_result, make_run

HEAD = "head"
WHERE = "/env/overlay/vllm/v1/core/sched/scheduler.py:42 in update_from_output"


def failed(
    kind: str = "exception", origin: str = "vllm", summary: str = "ValueError: bad rollback"
):
    return make_run(
        status="timeout" if kind == "timeout" else "error",
        totals=None,
        failure=Failure(
            kind=kind, type=summary.split(":")[0], summary=summary, where=WHERE, origin=origin
        ),
    )


def probe(*runs, outcome=None):
    """One branch's probe as the door sees it: runs and the process outcome (clean unless given)."""
    return SimpleNamespace(runs=list(runs), outcome=outcome or clean_outcome(1.5))


def judge(head_run, base_run=None, head_outcome=None):
    base_run = base_run or make_run()
    results = [make_result("pass"), make_result("error", branch=HEAD, error="error: whatever")]
    return judge_against_baseline(
        results, {BRANCH: probe(base_run), HEAD: probe(head_run, outcome=head_outcome)}, BRANCH
    )


@pytest.mark.parametrize(
    "kind, origin, reason",
    [
        ("exception", "vllm", f"crashed in vLLM: ValueError: bad rollback at {WHERE}"),
        ("did-not-finish", "probe", f"did not finish: ValueError: bad rollback at {WHERE}"),
        ("timeout", "other", f"did not finish: ValueError: bad rollback at {WHERE}"),
    ],
)
def test_the_branch_s_own_crash_or_hang_is_broken_naming_where(kind, origin, reason):
    base, head = judge(failed(kind, origin))
    assert base.verdict == "pass"
    assert head.verdict == "broken" and head.error is None
    (violation,) = head.violations
    assert violation.invariant == COMPLETES and violation.label == LABEL
    assert violation.detail == f"{reason} ({BRANCH} completes this run)"
    assert first_reason(head).startswith(f"{COMPLETES}: {reason}")
    assert exit_code([base, head]) == 1


@pytest.mark.parametrize("origin", ["probe", "other"])
def test_an_exception_outside_vllm_stays_error(origin):
    """The probe could not drive the branch's API (origin probe), or a library failed by itself."""
    _, head = judge(failed("exception", origin))
    assert head.verdict == "error"


def test_a_failure_the_baseline_shares_stays_error():
    _, head = judge(failed(), base_run=failed())
    assert head.verdict == "error"


def test_a_run_without_a_failure_record_stays_error():
    """Import errors, dead probes, rejected records: the host's reason, no probe failure."""
    _, head = judge(
        make_run(status="error", totals=None, error="probe exited with code 3: ImportError: x")
    )
    assert head.verdict == "error"


def test_the_baseline_itself_is_never_turned():
    results = [make_result("error")]
    assert judge_against_baseline(results, {BRANCH: probe(failed())}, BRANCH) == results


def test_a_run_cut_by_a_broken_reference_run_is_broken_too():
    """Engine runs are cut where their reference run says;
    a reference that hangs leaves them unplayable."""
    reference = failed("did-not-finish", "probe").model_copy(
        update={"label": "reference:a", "role": "reference"}
    )
    cut = make_run(
        status="error",
        totals=None,
        failure=Failure(
            kind="exception",
            type="RuntimeError",
            summary="RuntimeError: no truncation point",
            origin="probe",
        ),
    )
    base_runs = [make_run("reference:a", role="reference"), make_run()]
    results = [make_result("pass"), make_result("error", branch=HEAD)]
    _, head = judge_against_baseline(
        results, {BRANCH: probe(*base_runs), HEAD: probe(reference, cut)}, BRANCH
    )
    assert head.verdict == "broken"
    assert head.violations[0].detail.startswith("its reference run reference:a did not finish: ")


HUNG = ProcessOutcome(
    exit_code=-9,
    trailer=True,
    started=True,
    exit_overdue=True,
    stuck="non-daemon thread 'flusher' running vllm.v1.metrics.loggers.flush",
    duration_s=12.0,
)


def test_a_probe_that_hangs_after_its_last_run_makes_every_run_broken_naming_the_thread():
    """Every record is there and would pass: the process's end decides (defect 1 of issue 19)."""
    results = [make_result("pass"), make_result("pass", branch=HEAD)]
    base, head = judge_against_baseline(
        results, {BRANCH: probe(make_run()), HEAD: probe(make_run(), outcome=HUNG)}, BRANCH
    )
    assert base.verdict == "pass"
    assert head.verdict == "broken" and exit_code([base, head]) == 1
    (violation,) = head.violations
    assert violation.invariant == EXITS
    assert "did not exit after its last run" in violation.detail and "'flusher'" in violation.detail
    assert f"{BRANCH}'s probe reports the same runs and exits cleanly, in 1.5 s" in violation.detail


@pytest.mark.parametrize(
    "outcome",
    [
        ProcessOutcome(exit_code=1, trailer=True, started=True),
        ProcessOutcome(exit_code=-9, trailer=False, started=True, timed_out=True),
        ProcessOutcome(exit_code=0, trailer=False, started=True),
    ],
    ids=["exit-1-after-trailer", "killed-at-limit", "exit-0-no-trailer"],
)
def test_every_unclean_end_after_all_runs_never_reads_pass(outcome):
    results = [make_result("pass"), make_result("diverge", branch=HEAD)]
    _, head = judge_against_baseline(
        results, {BRANCH: probe(make_run()), HEAD: probe(make_run(), outcome=outcome)}, BRANCH
    )
    assert head.verdict == "broken" and head.violations[-1].invariant == EXITS


def test_an_unclean_end_with_no_clean_baseline_is_error_never_pass():
    results = [make_result("pass"), make_result("pass", branch=HEAD)]
    base, head = judge_against_baseline(
        results,
        {BRANCH: probe(make_run(), outcome=HUNG), HEAD: probe(make_run(), outcome=HUNG)},
        BRANCH,
    )
    assert base.verdict == "error" and "no baseline" not in (base.error or "")
    assert head.verdict == "error" and (head.error or "").endswith(
        f"{BRANCH}, the baseline, did not exit after its last run ({HUNG.stuck}) too"
    )
    assert exit_code([base, head]) == 3


def test_runs_a_dead_process_never_reported_are_broken_where_the_baseline_completes_them():
    """The process died (exit 7) during the run: the runs it reported before keep their verdicts."""
    died = ProcessOutcome(exit_code=7, started=True, unreported=[[SCENARIO, LABEL]])
    missing = make_run(status="error", totals=None, error="probe exited with code 7: planted crash")
    _, head = judge(missing, head_outcome=died)
    assert head.verdict == "broken"
    assert head.violations[0].detail.startswith(
        "its probe exited with code 7 before reporting this run"
    )


def test_runs_of_a_probe_that_never_started_its_session_stay_error():
    """An import that fails or hangs is setup: could not measure,
    even where the baseline completes."""
    never = ProcessOutcome(exit_code=3, started=False, unreported=[[SCENARIO, LABEL]])
    _, head = judge(
        make_run(status="error", totals=None, error="probe exited with code 3"), head_outcome=never
    )
    assert head.verdict == "error"


def test_output_difftest_could_not_read_stays_error():
    unreadable = ProcessOutcome(exit_code=0, host_error="IndexError: list index out of range")
    _, head = judge(
        make_run(status="error", totals=None, error="could not read"), head_outcome=unreadable
    )
    assert head.verdict == "error"
