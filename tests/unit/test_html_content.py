"""What report.html holds, read back as a parser sees it: real tables, the right cells flagged.

A browserless companion of tests/unit/test_report_browser.py, so that a counter table printed as
escaped text (issue 19, item 11: the `finalize` hook turned a macro's `Markup` into a plain
string) fails here too where chromium is missing. The evidence is tests/unit/test_reports.py's,
whose hostile branch text must stay escaped while the report's own markup stays markup.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser

from difftest.reports.html import render_html
from tests.unit.test_reports import EOS, EVIL, GRAMMAR, ORDERS, XSS, report_evidence

#: Escaped report markup: what a table printed as text leaves in the file.
ESCAPED_MARKUP = ("&lt;table", "&lt;div", "&lt;tr", "&lt;td", "&amp;lt;")


@dataclass
class Table:
    """One <table>: the heading it sits under and its rows of (tag, class, text) cells."""

    heading: str
    rows: list[list[tuple[str, str, str]]] = field(default_factory=list)

    @property
    def header(self) -> list[str]:
        return [text for _, _, text in self.rows[0]] if self.rows else []

    def cell(self, row_label: str, column: str) -> tuple[str, str, str]:
        """The cell of the row whose first cell reads `row_label`, under the header `column`."""
        index = self.header.index(column)
        (row,) = [r for r in self.rows if r and r[0][2] == row_label]
        return row[index]


class Tables(HTMLParser):
    """Every table of a page, each under the text of the last h2 or h3 before it."""

    def __init__(self, page: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tables: list[Table] = []
        self._heading: list[str] | None = None
        self._last_heading = ""
        self._cell: list[str] | None = None
        self._cell_tag = self._cell_class = ""
        self.feed(page)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("h2", "h3"):
            self._heading = []
        elif tag == "table":
            self.tables.append(Table(self._last_heading))
        elif tag == "tr" and self.tables:
            self.tables[-1].rows.append([])
        elif tag in ("td", "th") and self.tables:
            self._cell, self._cell_tag, self._cell_class = [], tag, dict(attrs).get("class") or ""

    def handle_endtag(self, tag: str) -> None:
        if tag in ("h2", "h3") and self._heading is not None:
            self._last_heading, self._heading = " ".join("".join(self._heading).split()), None
        elif tag in ("td", "th") and self._cell is not None:
            self.tables[-1].rows[-1].append(
                (self._cell_tag, self._cell_class, "".join(self._cell).strip())
            )
            self._cell = None

    def handle_data(self, data: str) -> None:
        for sink in (self._heading, self._cell):
            if sink is not None:
                sink.append(data)


def counter_tables(tables: list[Table]) -> list[Table]:
    """The counter tables (first column `counter`, last `oracle`), not the differences' tables."""
    return [t for t in tables if t.header[:1] == ["counter"] and t.header[-1:] == ["oracle"]]


def test_every_table_is_markup_and_branch_text_stays_text() -> None:
    page = render_html(report_evidence())
    assert not [m for m in ESCAPED_MARKUP if m in page], "a table printed as text"
    tables = Tables(page).tables
    # Verdict grid, branches; eos: its counter table, main's differences; grammar: its counter
    # table, the other run's (order:a,b), racy's violations and differences.
    assert len(tables) == page.count("<table") == 8
    assert [t.heading for t in counter_tables(tables)] == [
        f"{EOS} [scheduler]",
        f"{GRAMMAR} [scheduler]",
        f"run {ORDERS[0]}",
    ]
    assert "<script" not in page and XSS.replace("<", "&lt;").replace(">", "&gt;") in page
    assert EVIL in counter_tables(tables)[0].header, "the hostile name is a column header, as text"


def test_the_flagged_cells_are_the_ones_that_made_the_result_fail() -> None:
    tables = counter_tables(Tables(render_html(report_evidence())).tables)
    eos, grammar, other = tables
    # grammar shows racy's broken run (order:b,a): its num_drafts (2, the oracle says 4) is flagged.
    assert grammar.cell("num_drafts", "racy") == ("td", "num broken", "2")
    assert grammar.cell("num_drafts", "main") == ("td", "num", "4")
    assert grammar.cell("num_drafts", "oracle") == ("td", "num", "4")
    assert grammar.cell("verdict", "racy") == ("td", "text broken", "broken (1/2 runs)")
    assert eos.cell("num_emitted_tokens", "main") == ("td", "num diverge", "13")
    assert eos.cell("num_emitted_tokens", EVIL) == ("td", "num error", "could not measure")
    # The other run of grammar (order:a,b) passes on racy: nothing in it is flagged.
    assert other.cell("num_drafts", "racy") == ("td", "num", "4")
