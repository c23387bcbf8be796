"""The tests tier's cross matrix in every report, from hand-built test records
(judged by the real rules).

A branch name and a failure message are hostile (Markdown and HTML syntax): test
output comes from the code under test and must never change a report's structure.
"""

from __future__ import annotations

import io
import xml.etree.ElementTree as ET

from rich.console import Console

from difftest.core.evidence import BranchEvidence, Evidence, ScenarioEvidence
from difftest.core.suites import UPSTREAM, RawOutcome, source_label
from difftest.reports.html import render_html
from difftest.reports.junit import render_junit
from difftest.reports.markdown import render_markdown
from difftest.reports.terminal import render_terminal
from difftest.reports.tests_matrix import tests_matrices as matrices_of
from difftest.tiers.tests.judge import judge_records, verdicts
from tests.factories import make_evidence, make_test_source

EVIL = "pr|<b>evil</b>"
XSS_MESSAGE = "assert '<script>x</script>' | 1 == 2"
PR = source_label("pr-fix")
REGRESSION_TEST = "tests/v1/core/test_scheduler.py::test_stats_survive"


def matrix_evidence() -> Evidence:
    """upstream: 3 tests pass everywhere and one fails everywhere;
    pr-fix's test fails on EVIL's code."""
    codes = ["main", "pr-fix", EVIL]
    raw = []
    for code in codes:
        raw += [
            RawOutcome(UPSTREAM, code, f"tests/test_a.py::test_{i}", "passed") for i in range(3)
        ]
        raw.append(
            RawOutcome(
                UPSTREAM, code, "tests/test_a.py::test_llava", "failed", "ImportError: torchvision"
            )
        )
        failing = code == EVIL
        raw.append(
            RawOutcome(
                PR,
                code,
                REGRESSION_TEST,
                "failed" if failing else "passed",
                XSS_MESSAGE if failing else "",
            )
        )
    records = judge_records(raw, baseline="main")
    results = verdicts(records, codes, [UPSTREAM, PR], "repo-tests", "tests", "strict")
    return make_evidence(
        branches={name: BranchEvidence(ref=name) for name in codes},
        scenarios={
            "repo-tests": ScenarioEvidence(
                file="branches.yaml#tests",
                sha256="0" * 64,
                seed=0,
                tier="tests",
                statement="the repository's own tests",
            )
        },
        results=results,
        runs=None,
        tests=records,
        test_sources={
            UPSTREAM: make_test_source(origin="main", selection=["tests/test_a.py"]),
            PR: make_test_source(origin="pr-fix"),
        },
    )


def test_the_matrix_counts_each_source_on_each_branchs_code() -> None:
    upstream, pr = matrices_of(matrix_evidence())
    assert upstream.title == "upstream selection (from main's tree): 4 tests"
    assert [c.text for c in upstream.counts] == ["3 pass, 1 fails on baseline"] * 3
    assert [row.test for row in upstream.rows] == ["tests/test_a.py::test_llava"], (
        "tests passing everywhere are counted"
    )
    assert upstream.hidden == "3 tests pass on every branch"
    assert [(c.text, c.verdict) for c in pr.counts] == [
        ("1 pass", None),
        ("1 pass", None),
        ("1 regression", "broken"),
    ]
    (row,) = pr.rows
    assert [c.text for c in row.cells] == [
        "pass",
        "pass",
        "FAIL",
    ] and row.message == f"{EVIL}: {XSS_MESSAGE}"


def test_markdown_shows_the_matrix_escaped() -> None:
    text = render_markdown(matrix_evidence())
    assert "### Tests of X on the code of Y" in text
    assert "❌ 1 regression" in text and "<script>" not in text and "<b>" not in text
    table = [
        line
        for line in text.splitlines()
        if line.startswith(f"| {REGRESSION_TEST.replace('_', chr(92) + '_')}")
    ]
    assert len(table) == 1 and table[0].count(" | ") == 4, "the hostile message stays in its cell"


def test_html_shows_the_matrix_escaped() -> None:
    page = render_html(matrix_evidence())
    assert "Tests of X on the code of Y" in page and "1 regression" in page
    assert "<script>x" not in page and "&lt;script&gt;" in page and "<b>evil" not in page
    # A counter table printed as escaped text would hide from the check below:
    # every table is markup.
    assert "&lt;table" not in page and "&lt;th&gt;" not in page, "a table printed as text"
    assert "<th>counter</th>" not in page and "<th>oracle</th>" not in page, (
        "a tier without counters shows no counter table"
    )
    assert "the other 1 run(s)" not in page and "Values of run" not in page, "nor a word about one"
    # Verdict grid, branches, the cross matrix, the two sources' matrices and EVIL's violation.
    assert page.count("<table") == 6


def test_terminal_shows_the_matrix() -> None:
    stream = io.StringIO()
    render_terminal(matrix_evidence(), Console(file=stream, width=200, color_system=None))
    text = stream.getvalue()
    assert "tests of X (rows) on the code of Y (columns)" in text
    assert "1 regression" in text and "tests/test_a.py::test_llava" in text and XSS_MESSAGE in text


def test_junit_has_one_case_per_branch_and_source() -> None:
    root = ET.fromstring(render_junit(matrix_evidence()))
    names = {(case.get("classname"), case.get("name")) for case in root.iter("testcase")}
    assert (EVIL, f"repo-tests[{PR}]") in names and ("main", "repo-tests[upstream]") in names
    failures = [case for case in root.iter("testcase") if case.find("failure") is not None]
    assert [(c.get("classname"), c.get("name")) for c in failures] == [(EVIL, f"repo-tests[{PR}]")]
