"""A crash or a hang where the baseline completes is `broken`; setup failures stay `error`.

Hand-built runs and results: the decision is pure (the CLI-level cases, with
real faulty branches, are in tests/e2e/test_breakage_cli.py).
"""

from __future__ import annotations

import pytest

from difftest.core.breakage import COMPLETES, judge_against_baseline
from difftest.core.records import Failure
from difftest.core.verdicts import exit_code, first_reason
from tests.factories import BRANCH, LABEL, make_result, make_run

HEAD = "head"
WHERE = "/env/overlay/vllm/v1/core/sched/scheduler.py:42 in update_from_output"


def failed(kind: str = "exception", origin: str = "vllm", summary: str = "ValueError: bad rollback"):
    return make_run(
        status="timeout" if kind == "timeout" else "error",
        totals=None,
        failure=Failure(kind=kind, type=summary.split(":")[0], summary=summary, where=WHERE, origin=origin),
    )


def judge(head_run, base_run=None):
    base_run = base_run or make_run()
    results = [make_result("pass"), make_result("error", branch=HEAD, error="error: whatever")]
    return judge_against_baseline(results, {BRANCH: [base_run], HEAD: [head_run]}, BRANCH)


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
    _, head = judge(make_run(status="error", totals=None, error="probe exited with code 3: ImportError: x"))
    assert head.verdict == "error"


def test_the_baseline_itself_is_never_turned():
    results = [make_result("error")]
    assert judge_against_baseline(results, {BRANCH: [failed()]}, BRANCH) == results


def test_a_run_cut_by_a_broken_reference_run_is_broken_too():
    """Engine runs are cut where their reference run says; a reference that hangs leaves them unplayable."""
    reference = failed("did-not-finish", "probe").model_copy(update={"label": "reference:a", "role": "reference"})
    cut = make_run(status="error", totals=None, failure=Failure(
        kind="exception", type="RuntimeError", summary="RuntimeError: no truncation point", origin="probe"))
    base_runs = [make_run("reference:a", role="reference"), make_run()]
    results = [make_result("pass"), make_result("error", branch=HEAD)]
    _, head = judge_against_baseline(results, {BRANCH: base_runs, HEAD: [reference, cut]}, BRANCH)
    assert head.verdict == "broken"
    assert head.violations[0].detail.startswith("its reference run reference:a did not finish: ")
