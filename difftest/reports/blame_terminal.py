"""`difftest blame`'s report for a person at a terminal: per finding, the hunks that make it (each
with what the finding became without it), the hunks left out and why, where the stats first part
from the oracle, the command that measures it again, and the culprit hunks themselves.

Every string from a branch or a diff goes in as `Text` (never markup); long lines wrap under
their own indent, so it reads at 80 columns.
"""

from __future__ import annotations

from rich.console import Console
from rich.padding import Padding
from rich.text import Text

from difftest.reports.blame_view import (
    FindingView,
    HunkLine,
    hunk_place,
    made_by,
    summary,
    units,
    views,
)
from difftest.reports.format import printable
from difftest.reports.sources import BlameReport
from difftest.reports.terminal import VERDICT_STYLES

#: Lines of one hunk printed before "... N more lines".
HUNK_LINES = 40


def render_blame_terminal(report: BlameReport, console: Console) -> None:
    blame = report.evidence.blame
    assert blame is not None
    title = Text("difftest blame ", style="bold")
    title.append(blame.branch, style="bold")
    title.append(f" against {blame.against} ({report.evidence.reading} reading)")
    console.print(title)
    console.print(Text(summary(blame), style="dim"))
    for view in views(report):
        console.print()
        _finding(console, view)


def _finding(console: Console, view: FindingView) -> None:
    finding = view.finding
    head = Text(finding.scenario, style="bold")
    head.append(f" [{finding.tier}]", style="dim")
    console.print(head)
    line = Text(finding.verdict, style=VERDICT_STYLES.get(finding.verdict, ""))
    line.append(printable(view.headline.removeprefix(finding.verdict)))
    _at(console, line, 2)
    if view.problem:
        _at(console, Text(f"no set of hunks found: {printable(view.problem)}", style="magenta"), 2)
        return
    count = len(view.culprits)
    made = Text(f"made by {count} hunk{'s' if count != 1 else ''} ", style="bold")
    made.append(f"(try {finding.culprit})", style="dim")
    made.append(made_by(view) + ":")
    _at(console, made, 2)
    for unit, entries in units(view):
        indent = 4
        if unit:
            _at(console, Text(f"{unit}:", style="bold"), 4)
            indent = 6
        for entry in entries:
            _hunk(console, entry, "without it: ", indent)
    _at(console, Text("left out:", style="bold"), 2)
    for entry in view.left_out:
        _hunk(console, entry, "")
    rest = Text("the rest of the change without them: ", style="bold")
    rest.append(printable(view.rest))
    _at(console, rest, 2)
    _at(console, Text(f"where the stats first part from the oracle, run {view.label}:"), 2)
    for parting in view.partings:
        text = Text(f"{parting.who}: ", style="bold")
        text.append(printable(parting.where))
        _at(console, text, 4)
    _at(console, Text(f"reproduce: {view.reproduce}"), 2)
    for entry in view.culprits:
        _diff(console, entry)


def _hunk(console: Console, entry: HunkLine, lead: str, indent: int = 4) -> None:
    text = Text(f"#{entry.hunk.number} ", style="bold")
    text.append(printable(hunk_place(entry.hunk)))
    text.append(": ")
    text.append(printable(lead + entry.why), style="dim")
    if entry.proof:
        text.append(f" (try {entry.proof})", style="dim")
    _at(console, text, indent)


def _diff(console: Console, entry: HunkLine) -> None:
    console.print()
    head = Text(f"#{entry.hunk.number} {printable(entry.hunk.file)}", style="bold")
    console.print(head)
    lines = entry.hunk.text.splitlines()
    for line in lines[:HUNK_LINES]:
        style = "green" if line.startswith("+") else "red" if line.startswith("-") else ""
        style = "cyan" if line.startswith("@@") else style
        console.print(Text(printable(line), style=style), soft_wrap=True)
    if len(lines) > HUNK_LINES:
        more = f"... {len(lines) - HUNK_LINES} more lines (blame.md and evidence.json hold them)"
        console.print(Text(more, style="dim"))


def _at(console: Console, text: Text, indent: int) -> None:
    console.print(Padding(text, (0, 0, 0, indent), expand=False))
