"""Rendering a report in a real browser: Debian's headless `chromium`, no network.

The report is loaded in an iframe of the width under test inside a small
harness page (headless Chromium will not lay a window out narrower than about
500 px, an iframe it will), and a load handler writes what the test asserts
into an attribute that `--dump-dom` returns: the page's scroll width beside
the frame's inner width (page-level horizontal overflow), and where the
verdict grid and its scroll box are. Then it opens every `<details>` (a person
who clicked each) and adds what that person sees: the page's visible text
(`innerText`, where a table printed as escaped markup shows as `<table>...`),
the header row of every real table, and the scroll width with all open.

`screenshot` writes a PNG of the report, every `<details>` open, for a person
to look at; the tests print where.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
#: Without the background-networking flags, a closed network refuses connections en masse.
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--allow-file-access-from-files",
]
HARNESS = """<!DOCTYPE html><html><body style="margin:0">
<iframe id="report" src="{src}" style="width:{width}px;height:900px;border:0"></iframe>
<script>
function opened(d) {{
  d.querySelectorAll("details").forEach(function (x) {{ x.open = true; }});
  var header = function (t) {{
    return t.rows.length ? Array.prototype.map.call(t.rows[0].cells, function (c) {{ \
return c.innerText.trim(); }}) : [];
  }};
  return {{
    scrollWidthOpened: d.documentElement.scrollWidth,
    tables: Array.prototype.map.call(d.querySelectorAll("table"), header),
    text: d.body.innerText
  }};
}}
window.addEventListener("load", function () {{
  var frame = document.getElementById("report"), w = frame.contentWindow, d = w.document;
  var grid = d.getElementById("verdict-grid"), r = grid ? grid.getBoundingClientRect() : null;
  var box = grid ? grid.parentElement.getBoundingClientRect() : null;
  var style = grid ? w.getComputedStyle(grid) : null;
  var loose = Array.prototype.filter.call(d.querySelectorAll("table"), function (t) {{ \
return !t.closest(".scroll"); }});
  var seen = {{
    scrollWidth: d.documentElement.scrollWidth, innerWidth: w.innerWidth,
    grid: r && {{left: r.left, top: r.top, width: r.width, height: r.height}},
    box: box && {{left: box.left, right: box.right, width: box.width}},
    shown: !!style && style.display !== "none" && style.visibility !== "hidden",
    tablesOutsideScrollBoxes: loose.length,
    counterColumns: Array.prototype.map.call(d.querySelectorAll("table.counters"), function (t) {{ \
return Array.prototype.slice.call(t.rows[0].cells, 1).map(function (c) {{ \
return Math.round(c.getBoundingClientRect().width); }}); }})
  }};
  document.body.setAttribute("data-measured", JSON.stringify(Object.assign(seen, opened(d))));  \
// as shown, then opened
}});
</script></body></html>
"""


def require_chromium() -> str:
    if CHROMIUM is None:
        pytest.skip(
            "chromium is not installed (Debian: apt-get install -y chromium; .ci/run installs it)"
        )
    return CHROMIUM


def measure(report: Path, width: int) -> dict:
    """Load `report` at `width` CSS pixels and return what the harness measured."""
    browser = require_chromium()
    harness = report.parent / f"harness-{width}.html"
    harness.write_text(HARNESS.format(src=report.name, width=width))
    with tempfile.TemporaryDirectory() as profile:
        done = subprocess.run(
            [
                browser,
                *FLAGS,
                f"--user-data-dir={profile}",
                f"--window-size={max(width, 500) + 40},1000",
                "--dump-dom",
                harness.as_uri(),
            ],
            check=False,
            capture_output=True,
            text=True,
            timeout=120,
        )
    found = re.search(r'data-measured="([^"]*)"', done.stdout)
    assert found, f"chromium gave no measurement (exit {done.returncode}): {done.stderr[-2000:]}"
    return json.loads(html.unescape(found.group(1)))


def screenshot(report: Path, width: int, height: int = 4000) -> Path:
    """A PNG of `report` at `width` x `height` CSS pixels with every `<details>` open, beside it.

    Taken of a copy (the report itself stays as written) in a window of that size: unlike the
    measurement, nothing is asserted from it but its size; it is there to be looked at.
    """
    browser = require_chromium()
    copy = report.parent / f"opened-{width}-{report.name}"
    copy.write_text(re.sub(r"<details(?![^>]*\bopen\b)", "<details open", report.read_text()))
    png = report.parent / f"{report.stem}-{width}.png"
    with tempfile.TemporaryDirectory() as profile:
        done = subprocess.run(
            [
                browser,
                *FLAGS,
                f"--user-data-dir={profile}",
                f"--window-size={width},{height}",
                f"--screenshot={png}",
                copy.as_uri(),
            ],
            check=False,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert png.is_file(), (
        f"chromium wrote no screenshot (exit {done.returncode}): {done.stderr[-2000:]}"
    )
    return png


def png_size(png: Path) -> tuple[int, int]:
    """(width, height) from a PNG's IHDR chunk."""
    head = png.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{png} is not a PNG"
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
