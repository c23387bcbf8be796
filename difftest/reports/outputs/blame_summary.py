"""`difftest blame`'s report in Markdown: blame.md in `--out`, and on stdout (`blame --format
md`), for a pull request comment."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from difftest.reports.sources import BlameReport


def render(report: BlameReport) -> str:
    from difftest.reports.blame_markdown import render_blame_markdown

    return render_blame_markdown(report)


def show(report: BlameReport) -> None:
    print(render(report), end="")
