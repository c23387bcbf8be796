"""The tests tier's cross matrix: the tests of X (rows) on the code of Y (columns), from the
evidence.

Two views every report shows:

- the matrix: one row per test source (`upstream`: the selection, from the
  baseline's tree; `from:<branch>`: the tests that branch adds or changes), one
  column per branch's code, each cell a count of how its tests fared there;
- per source, the tests that do not simply pass everywhere, with the outcome on
  each branch's code and the failing assertion. Tests that pass on every branch
  are counted, not listed.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from rich import box
from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from difftest.core.evidence import Evidence
from difftest.core.records import TestJudgement, TestRecord, Verdict
from difftest.core.suites import UPSTREAM
from difftest.reports.format import md_escape
from difftest.reports.views import Cell, branch_names

#: How a test outcome reads in a cell.
OUTCOME_WORDS: dict[str, str] = {
    "passed": "pass",
    "failed": "FAIL",
    "error": "ERROR",
    "skipped": "skip",
    "xfailed": "xfail",
    "not-collected": "not collected",
    "not-run": "not run",
}
#: The verdict colour a judgement stands out with (None: plain).
JUDGEMENT_STYLE: dict[str, Verdict | None] = {
    "pass": None,
    "fixed": None,
    "regression": "broken",
    "fails-on-baseline": "diverge",
    "skipped": None,
    "unmeasured": "error",
}
LEGEND = (
    "cells: the test's outcome on that branch's code; red: passes on the baseline, fails here "
    "(the branch is broken); yellow: does not pass on the baseline either (judged by nobody); "
    "magenta: could not be measured"
)
#: Listed tests per source before the rest are counted.
MAX_ROWS = 25


@dataclass(frozen=True)
class TestRow:
    __test__ = False  # not a pytest test class, despite the name

    test: str
    cells: list[Cell]
    #: The first failure message among the branches, for the detail line.
    message: str


@dataclass(frozen=True)
class SourceMatrix:
    source: str
    title: str
    branches: list[str]
    #: Per branch: how this source's tests fared on its code, e.g. `85 pass, 1 fails on baseline
    #: too`.
    counts: list[Cell]
    rows: list[TestRow]
    #: Tests not listed (they pass on every branch, or beyond MAX_ROWS), in words.
    hidden: str
    note: str = ""


def source_title(evidence: Evidence, source: str) -> str:
    info = evidence.test_sources.get(source)
    if source == UPSTREAM:
        origin = f" (from {info.origin}'s tree)" if info else ""
        return f"upstream selection{origin}"
    branch = source.removeprefix("from:")
    also = f" (same tests in {', '.join(info.same_as)})" if info and info.same_as else ""
    return f"tests added or changed by {branch}{also}"


def tests_matrices(evidence: Evidence) -> list[SourceMatrix]:
    """One matrix per test source, in the order the sources were planned."""
    if not evidence.tests:
        return []
    branches = [b for b in branch_names(evidence) if any(r.code == b for r in evidence.tests)]
    sources = list(dict.fromkeys([*evidence.test_sources, *(r.source for r in evidence.tests)]))
    return [_matrix(evidence, source, branches) for source in sources]


def _matrix(evidence: Evidence, source: str, branches: list[str]) -> SourceMatrix:
    mine = [r for r in evidence.tests if r.source == source]
    by_test: dict[str, dict[str, TestRecord]] = {}
    for record in mine:
        by_test.setdefault(record.test, {})[record.code] = record
    interesting = [
        t
        for t, per in by_test.items()
        if any(r.judgement != "pass" for r in per.values()) or len(per) < len(branches)
    ]
    rows = [_row(test, by_test[test], branches) for test in interesting[:MAX_ROWS]]
    quiet = len(by_test) - len(interesting)
    hidden = []
    if quiet:
        hidden.append(f"{quiet} test{'s' if quiet != 1 else ''} pass on every branch")
    if len(interesting) > MAX_ROWS:
        hidden.append(f"{len(interesting) - MAX_ROWS} more not listed (see evidence.json)")
    info = evidence.test_sources.get(source)
    return SourceMatrix(
        source=source,
        title=(
            f"{source_title(evidence, source)}: {len(by_test)} "
            f"test{'s' if len(by_test) != 1 else ''}"
        ),
        branches=branches,
        counts=[_counts([r for r in mine if r.code == b]) for b in branches],
        rows=rows,
        hidden="; ".join(hidden),
        note=info.note if info else "",
    )


def _row(test: str, per: dict[str, TestRecord], branches: list[str]) -> TestRow:
    cells = []
    for branch in branches:
        record = per.get(branch)
        if record is None:
            cells.append(Cell("-", "error"))
        else:
            cells.append(Cell(OUTCOME_WORDS[record.outcome], JUDGEMENT_STYLE[record.judgement]))
    failing = [r for r in per.values() if r.judgement == "regression"] or [
        r for r in per.values() if r.outcome not in ("passed",) and r.message
    ]
    return TestRow(
        test=test,
        cells=cells,
        message=f"{failing[0].code}: {failing[0].message}" if failing else "",
    )


def _counts(records: list[TestRecord]) -> Cell:
    """How one source's tests fared on one branch's code, most severe first."""
    if not records:
        return Cell("not run", "error")
    counts = Counter(r.judgement for r in records)
    words: list[tuple[TestJudgement, str, str]] = [
        ("regression", "regression", "regressions"),
        ("unmeasured", "could not measure", "could not measure"),
        ("pass", "pass", "pass"),
        ("fixed", "pass (fails on baseline)", "pass (fail on baseline)"),
        ("fails-on-baseline", "fails on baseline", "fail on baseline"),
        ("skipped", "skipped", "skipped"),
    ]
    parts = [
        f"{counts[key]} {one if counts[key] == 1 else many}"
        for key, one, many in words
        if counts.get(key)
    ]
    verdict: Verdict | None = (
        "broken" if counts.get("regression") else "error" if counts.get("unmeasured") else None
    )
    return Cell(", ".join(parts), verdict)


# -- rendering: one function per format, called once by each report ---------------------------

#: Terminal styles of the cells (as the verdict tables use them).
_STYLES: dict[str, str] = {
    "broken": "bold white on red",
    "diverge": "yellow",
    "error": "magenta",
    "pass": "green",
}
_ICONS: dict[str, str] = {"broken": "❌", "diverge": "▫️", "error": "⛔"}


def cross_matrix(matrices: list[SourceMatrix]) -> tuple[list[str], list[tuple[str, list[Cell]]]]:
    """(code branches, [(source title, one cell per branch)]): the tests of X on the code of Y."""
    branches = matrices[0].branches if matrices else []
    return branches, [(m.title, m.counts) for m in matrices]


def terminal_renderables(evidence: Evidence) -> list[RenderableType]:
    """The cross matrix, then per source the tests that do not pass everywhere."""
    matrices = tests_matrices(evidence)
    if not matrices:
        return []
    branches, rows = cross_matrix(matrices)
    table = Table(
        title=Text("tests of X (rows) on the code of Y (columns)", style="bold"),
        caption=Text(LEGEND, style="dim"),
        box=box.SIMPLE_HEAD,
        title_justify="left",
        caption_justify="left",
    )
    table.add_column("tests")
    for branch in branches:
        table.add_column(Text(branch))
    for title, cells in rows:
        table.add_row(Text(title), *(_text(c) for c in cells))
    out: list[RenderableType] = [table]
    for matrix in matrices:
        if not matrix.rows:
            continue
        detail = Table(
            title=Text(matrix.title, style="bold"),
            box=box.SIMPLE_HEAD,
            title_justify="left",
            caption=Text(matrix.hidden, style="dim") if matrix.hidden else None,
            caption_justify="left",
        )
        detail.add_column("test", overflow="fold")
        for branch in matrix.branches:
            detail.add_column(Text(branch))
        for row in matrix.rows:
            detail.add_row(Text(row.test), *(_text(c) for c in row.cells))
        out.append(detail)
        out += [
            Text(f"  {row.test.rsplit('::', 1)[-1]}: {row.message}", style="dim")
            for row in matrix.rows
            if row.message
        ]
    return out


def _text(cell: Cell) -> Text:
    return Text(cell.text, style=_STYLES.get(cell.verdict or "", ""))


def markdown_lines(evidence: Evidence) -> list[str]:
    """The cross matrix and the per-source tables, as Markdown (every value escaped)."""
    matrices = tests_matrices(evidence)
    if not matrices:
        return []
    branches, rows = cross_matrix(matrices)
    lines = [
        "### Tests of X on the code of Y",
        "",
        "| tests \\ code | " + " | ".join(md_escape(b) for b in branches) + " |",
        "|---|" + "---|" * len(branches),
    ]
    for title, cells in rows:
        lines.append(f"| {md_escape(title)} | " + " | ".join(_md(c) for c in cells) + " |")
    lines += ["", f"_{md_escape(LEGEND)}_", ""]
    for matrix in matrices:
        if not matrix.rows:
            continue
        lines += [
            f"**{md_escape(matrix.title)}**"
            + (f" ({md_escape(matrix.hidden)})" if matrix.hidden else ""),
            "",
        ]
        lines += [
            "| test | " + " | ".join(md_escape(b) for b in branches) + " | why |",
            "|---|" + "---|" * (len(branches) + 1),
        ]
        for row in matrix.rows:
            lines.append(
                f"| {md_escape(row.test)} | "
                + " | ".join(_md(c) for c in row.cells)
                + f" | {md_escape(row.message)} |"
            )
        lines.append("")
    return lines


def _md(cell: Cell) -> str:
    icon = _ICONS.get(cell.verdict or "", "")
    return f"{icon} {md_escape(cell.text)}".strip()
