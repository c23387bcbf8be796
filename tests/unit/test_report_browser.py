"""The HTML report in headless Chromium at 420 and 1400 px: no page-level sideways scroll, the grid in view.

Rendered from hand-built evidence with twelve long branch names and a
hostile unbroken one, the widest case a report meets; the shipped run's own
report is checked the same way in tests/e2e/test_run_shipped.py. Skips only
where chromium is not installed.
"""

from __future__ import annotations

import pytest

from difftest.core.verdicts import unmeasured
from difftest.reports.html import render_html
from tests.browser import measure
from tests.factories import make_evidence, make_result

HOSTILE = "x" * 120 + "<b>unbroken</b>"


@pytest.mark.parametrize("width", [420, 1400])
def test_no_page_overflow_and_the_grid_is_visible(tmp_path, width):
    branches = [f"pr-{56100 + i}-style-with-a-long-name" for i in range(12)] + [HOSTILE]
    results = [make_result("diverge" if i % 2 else "pass", branch=b) for i, b in enumerate(branches)]
    results += unmeasured(HOSTILE, "eos", "scheduler", HOSTILE, ["order:b"], "Error: " + "y" * 400, "strict")
    report = tmp_path / "report.html"
    report.write_text(render_html(make_evidence(results=results, branches={})))
    seen = measure(report, width)
    assert seen["innerWidth"] == width
    assert seen["scrollWidth"] <= seen["innerWidth"], seen
    assert seen["shown"] and seen["grid"]["width"] > 0 and seen["grid"]["height"] > 0
    assert 0 <= seen["box"]["left"] and seen["box"]["right"] <= width
    assert seen["tablesOutsideScrollBoxes"] == 0
