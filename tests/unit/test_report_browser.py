"""The HTML report in headless Chromium at 420 and 1400 px: no page-level sideways scroll, the grid
in view, and tables that a person sees as tables, not as escaped markup.

Rendered from hand-built evidence with twelve long branch names and a
hostile unbroken one, the widest case a report meets; the shipped run's own
report is checked the same way in tests/e2e/test_run_shipped.py. Counting real
tables alone lets a table printed as text pass (issue 19, item 11), so the
visible text is read too, with every `<details>` open, and a screenshot at
each width is written beside the report and its path printed (`pytest -rP`
shows it) to be looked at. Skips only where chromium is not installed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from difftest.core.verdicts import unmeasured
from difftest.reports.html import render_html
from tests.browser import measure, png_size, screenshot
from tests.factories import make_evidence, make_result

HOSTILE = "x" * 120 + "<b>unbroken</b>"
BRANCHES = [f"pr-{56100 + i}-style-with-a-long-name" for i in range(12)] + [HOSTILE]
#: What a table printed as text shows on screen (the hostile `<b>` is branch text, shown as such).
MARKUP_AS_TEXT = ("<table", "<div", "<tr", "<td", "<th", "&lt;", "&amp;")


def wide_report(tmp_path: Path) -> Path:
    """One scenario, two runs (order:a on every branch, order:b on HOSTILE alone, not measured)."""
    results = [
        make_result("diverge" if i % 2 else "pass", branch=b) for i, b in enumerate(BRANCHES)
    ]
    results += unmeasured(
        HOSTILE, "eos", "scheduler", HOSTILE, ["order:b"], "Error: " + "y" * 400, "strict"
    )
    report = tmp_path / "report.html"
    report.write_text(render_html(make_evidence(results=results, branches={})))
    return report


@pytest.mark.parametrize("width", [420, 1400])
def test_no_page_overflow_and_the_grid_is_visible(tmp_path, width):
    seen = measure(wide_report(tmp_path), width)
    assert seen["innerWidth"] == width
    assert seen["scrollWidth"] <= seen["innerWidth"], seen
    assert seen["scrollWidthOpened"] <= seen["innerWidth"], (
        "sideways scroll once every <details> is open"
    )
    assert seen["shown"] and seen["grid"]["width"] > 0 and seen["grid"]["height"] > 0
    assert 0 <= seen["box"]["left"] and seen["box"]["right"] <= width
    assert seen["tablesOutsideScrollBoxes"] == 0


@pytest.mark.parametrize("width", [420, 1400])
def test_a_person_sees_tables_not_markup(tmp_path, width, record_property):
    report = wide_report(tmp_path)
    seen = measure(report, width)
    shown = [marker for marker in MARKUP_AS_TEXT if marker in seen["text"]]
    at = seen["text"].find(shown[0]) if shown else 0
    assert not shown, f"markup on screen: {shown}: ...{seen['text'][max(at - 80, 0) : at + 160]!r}"
    # Verdict grid, branches, the counter table of the shown run and of the other run (order:a);
    # no failing result has violations or differences, none has a trace.
    headers = seen["tables"]
    assert len(headers) == 4, headers
    assert headers[0][:2] == ["scenario", "tier"] and headers[1][0] == "branch"
    assert [h[0] for h in headers[2:]] == ["counter", "counter"] and headers[2] == headers[3]
    assert headers[2] == ["counter", *BRANCHES, "oracle"], (
        "each branch a column, the hostile name as text"
    )
    assert (
        HOSTILE in seen["text"]
        and "could not measure" in seen["text"]
        and "run order:a" in seen["text"]
    )
    png = screenshot(report, width)
    record_property(f"screenshot-{width}", str(png))
    print(f"screenshot at {width} px: {png}")
    assert png_size(png) == (width, 4000)


@pytest.mark.parametrize("width", [420, 1400])
def test_a_counter_tables_branch_columns_share_one_width(tmp_path, width):
    """#34, case 3: a short name beside a long one no longer wraps to three lines."""
    names = [
        "main",
        "pr-56137-plus-54054",
        "pr-56195-style",
        "a-much-longer-branch-name-than-the-rest",
    ]
    results = [make_result("diverge" if i % 2 else "pass", branch=b) for i, b in enumerate(names)]
    report = tmp_path / "report.html"
    report.write_text(render_html(make_evidence(results=results, branches={})))
    seen = measure(report, width)
    (columns,) = seen["counterColumns"]
    assert len(columns) == len(names) + 1 and max(columns) - min(columns) <= 1, columns
    assert seen["scrollWidth"] <= seen["innerWidth"], seen
