"""The tests tier's pure decisions: which tests a branch brings, how sessions are planned, how
outcomes are judged. The inputs are what git and pytest give (file texts, outcomes), written out
here."""

from __future__ import annotations

from collections import Counter

import pytest

from difftest.core.suites import UPSTREAM, BranchTests, ChangedFile, RawOutcome, source_label
from difftest.tiers.tests.judge import judge_records, judgement, summary, verdicts
from difftest.tiers.tests.sources import changed_tests, graft_path, is_test_module, plan

MODULE = "tests/v1/core/test_sched.py"
OLD = """import os

from .utils import create_scheduler

LIMIT = 3


def helper():
    return LIMIT


def test_a():
    assert helper() == 3


class TestB:
    def test_c(self):
        pass
"""
NEW_TEST = "\n\ndef test_new():\n    assert create_scheduler()\n"


@pytest.mark.parametrize(
    "new, expected",
    [
        (OLD + NEW_TEST, [f"{MODULE}::test_new"]),
        (
            "import sys\n" + OLD + "\n\ndef new_helper():\n    pass\n" + NEW_TEST,
            [f"{MODULE}::test_new"],
        ),
        (OLD.replace("assert helper() == 3", "assert helper() == 3  # same test, a comment"), []),
        (OLD.replace("assert helper() == 3", "assert helper() >= 3"), [f"{MODULE}::test_a"]),
        (OLD.replace("        pass", "        assert True"), [f"{MODULE}::TestB"]),
        (
            OLD.replace("LIMIT = 3", "LIMIT = 4"),
            [MODULE],
        ),  # a changed constant may change every test
        (OLD.replace("    return LIMIT", "    return LIMIT + 0"), [MODULE]),
        (OLD + "\npytestmark = []\n", [MODULE]),
        (OLD + "\n\n@pytest.fixture(autouse=True)\ndef everywhere():\n    yield\n", [MODULE]),
        (OLD + "\nprint('side effect at import')\n", [MODULE]),
        ("def broken(:\n", [MODULE]),
    ],
    ids=[
        "new-test",
        "new-import-and-helper",
        "comment-only",
        "changed-test",
        "changed-class",
        "changed-constant",
        "changed-helper",
        "pytestmark",
        "autouse-fixture",
        "module-code",
        "syntax-error",
    ],
)
def test_changed_tests(new: str, expected: list[str]) -> None:
    assert changed_tests(MODULE, OLD, new) == expected


def test_a_new_module_is_the_branchs_whole() -> None:
    assert changed_tests(MODULE, None, OLD) == [MODULE]


def test_test_modules_and_graft_names() -> None:
    assert is_test_module(MODULE) and is_test_module("tests/x/sched_test.py")
    assert not is_test_module("tests/v1/core/utils.py") and not is_test_module("tests/conftest.py")
    assert not is_test_module("vllm/test_x.py")
    assert graft_path(MODULE, 2) == "tests/v1/core/test_sched__difftest2.py"
    assert graft_path("tests/x/sched_test.py", 1) == "tests/x/sched__difftest1_test.py"


def branch(name: str, *changes: ChangedFile) -> BranchTests:
    return BranchTests(name=name, sha=name[0] * 40, changes=list(changes))


def change(path: str = MODULE, new: str = OLD + NEW_TEST, status: str = "M") -> ChangedFile:
    return ChangedFile(
        status=status,
        path=path,
        old=None if status == "A" else OLD,
        new=None if status == "D" else new,
    )  # type: ignore[arg-type]


SELECT = ["tests/v1/core/test_sched.py", "tests/v1/metrics"]


def test_the_plan_grafts_test_module_changes_into_one_session() -> None:
    both = plan(
        branch("main"),
        [
            branch("main"),
            branch("pr-a", change()),
            branch("pr-b", change()),
            branch("pr-c", change(new=OLD + "\n\ndef test_other():\n    pass\n")),
            branch("docs"),
        ],
        SELECT,
        "spec",
        ["tests/v1/metrics/test_x.py::test_flaky", f"{MODULE}::test_new"],
    )
    assert [s.label for s in both.sources] == [UPSTREAM, source_label("pr-a"), source_label("pr-c")]
    assert both.sources[1].same_as == ("pr-b",), "identical test changes run once"
    (shared,) = both.sessions
    assert shared.sha == "m" * 40 and shared.default_source == UPSTREAM
    first, second = (
        "tests/v1/core/test_sched__difftest1.py",
        "tests/v1/core/test_sched__difftest2.py",
    )
    assert shared.grafts == {first: ("p" * 40, MODULE), second: ("p" * 40, MODULE)}
    assert shared.owners[first] == (source_label("pr-a"), MODULE)
    assert shared.allowed_grafts == [f"{first}::test_new", f"{second}::test_other"]
    args = shared.args
    assert args[: len(SELECT)] == SELECT and f"{first}::test_new" in args
    assert args[args.index("-k") + 1] == "(spec) or __difftest", (
        "the selection's keyword never drops a branch's tests"
    )
    deselected = [args[i + 1] for i, a in enumerate(args) if a == "--deselect"]
    assert f"{first}::test_new" in deselected and f"{MODULE}::test_new" in deselected


def test_a_branch_that_changes_helpers_gets_a_session_on_its_own_tree() -> None:
    helpers = change(path="tests/v1/core/utils.py", new="def create_scheduler(): ...\n")
    found = plan(
        branch("main"),
        [branch("pr-a", change(), helpers), branch("pr-h", helpers)],
        SELECT,
        None,
        [],
    )
    labels = {s.label: s for s in found.sources}
    assert (
        not labels[source_label("pr-a")].graftable
        and "tests/v1/core/utils.py" in labels[source_label("pr-a")].note
    )
    assert labels[source_label("pr-a")].tests == (f"{MODULE}::test_new",)
    assert labels[source_label("pr-h")].tests == tuple(SELECT), (
        "no changed test: the selection runs from its tree"
    )
    assert [s.name for s in found.sessions] == ["shared", "tree-1", "tree-2"]
    own = found.sessions[1]
    assert own.sha == "p" * 40 and own.grafts == {} and own.default_source == source_label("pr-a")


def test_deleted_tests_and_non_test_changes_bring_no_source() -> None:
    removed = change(status="D")
    found = plan(branch("main"), [branch("pr-d", removed), branch("pr-v")], SELECT, None, [])
    assert [s.label for s in found.sources] == [UPSTREAM, source_label("pr-d")]
    assert found.sources[1].tests == tuple(SELECT) and not found.sources[1].graftable


# -- judgement -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "outcome, baseline, expected",
    [
        ("passed", "passed", "pass"),
        ("passed", "failed", "fixed"),
        ("passed", None, "fixed"),
        ("failed", "passed", "regression"),
        ("error", "passed", "regression"),
        ("failed", "failed", "fails-on-baseline"),
        ("failed", "not-collected", "fails-on-baseline"),
        ("failed", "skipped", "fails-on-baseline"),
        ("skipped", "passed", "skipped"),
        ("xfailed", "passed", "skipped"),
        ("not-collected", "not-collected", "fails-on-baseline"),
        ("not-collected", "passed", "unmeasured"),
        ("not-collected", "failed", "unmeasured"),
        ("not-run", "passed", "unmeasured"),
    ],
)
def test_judgement_against_the_baseline(outcome: str, baseline: str | None, expected: str) -> None:
    assert judgement(outcome, baseline, is_baseline=False) == expected


def test_the_baseline_is_never_judged_against_itself() -> None:
    assert [
        judgement(o, o, is_baseline=True) for o in ("passed", "failed", "not-collected", "not-run")
    ] == ["pass", "fails-on-baseline", "fails-on-baseline", "unmeasured"]


def outcome(
    code: str, result: str, test: str = "t1", source: str = UPSTREAM, message: str = ""
) -> RawOutcome:
    return RawOutcome(source=source, code=code, test=test, outcome=result, message=message)  # type: ignore[arg-type]


def test_verdicts_per_branch_and_source() -> None:
    pr = source_label("pr-a")
    raw = [
        outcome("main", "passed"),
        outcome("pr-a", "passed"),
        outcome("pr-b", "failed", message="assert 3 == 6"),
        outcome("main", "failed", "t2"),
        outcome("pr-a", "failed", "t2"),
        outcome("pr-b", "failed", "t2"),
        outcome("main", "failed", source=pr),
        outcome("pr-a", "passed", source=pr),
        outcome("pr-b", "not-collected", source=pr),
    ]
    records = judge_records(raw, baseline="main")
    results = {
        (r.branch, r.label): r
        for r in verdicts(
            records, ["main", "pr-a", "pr-b"], [UPSTREAM, pr], "repo-tests", "tests", "strict"
        )
    }
    assert results[("main", UPSTREAM)].verdict == "pass" and results[("main", pr)].verdict == "pass"
    broken = results[("pr-b", UPSTREAM)]
    assert broken.verdict == "broken" and broken.violations[0].detail == "t1: assert 3 == 6"
    assert "1 fail on the baseline too" in broken.statement
    assert (
        results[("pr-a", pr)].verdict == "pass"
        and "pass where the baseline does not" in results[("pr-a", pr)].statement
    )
    # the baseline failed it as well, but collected it: a branch that cannot collect it could not be
    # measured
    assert results[("pr-b", pr)].verdict == "error" and "could not measure 1 test" in (
        results[("pr-b", pr)].error or ""
    )


def test_a_branch_without_an_environment_could_not_be_measured() -> None:
    (result,) = verdicts(
        [], ["pr-x"], [UPSTREAM], "repo-tests", "tests", "strict", {"pr-x": "patch does not apply"}
    )
    assert result.verdict == "error" and result.error == "patch does not apply"


def test_summary_words() -> None:
    assert (
        summary(Counter({"pass": 83, "fails-on-baseline": 3}), 86)
        == "86 tests: 83 passed, 3 fail on the baseline too"
    )


# -- verify ----------------------------------------------------------------------------------


def test_verify_names_every_test_whose_outcome_changed() -> None:
    from difftest.core.reproduction import evidence_differences
    from tests.factories import make_evidence, make_test_record

    def with_tests(records):
        return make_evidence(tests=records)

    recorded = [make_test_record(), make_test_record(code="pr-b")]
    rerun = [
        make_test_record(outcome="failed", judgement="regression"),
        make_test_record(code="pr-c"),
    ]
    assert evidence_differences(with_tests(recorded), with_tests(rerun)) == [
        "main/from:pr-56137-style/tests/v1/core/test_scheduler.py::test_stats_survive: "
        "test outcome passed (pass) -> failed (regression)",
        "pr-b/from:pr-56137-style/tests/v1/core/test_scheduler.py::test_stats_survive: "
        "test not re-run",
        "pr-c/from:pr-56137-style/tests/v1/core/test_scheduler.py::test_stats_survive: "
        "test not in the evidence",
    ]
    assert evidence_differences(with_tests(recorded), with_tests(recorded)) == []
