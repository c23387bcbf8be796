"""`difftest show`: one recorded run, step by step, for a person at a terminal.

Per step: each request's scheduled drafts, invalid drafts, sampled and
emitted tokens, then the stats row the branch recorded above the row the
oracle expects; cells that disagree are marked, and the first step that
disagrees says so. Long runs fold the steps that agree with the oracle and
lie away from any disagreement (`all_steps` prints them all).
"""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from difftest.core.records import Result
from difftest.core.values import format_value
from difftest.core.verdicts import first_reason
from difftest.reports.terminal import MARK, STYLES, VERDICT_STYLES
from difftest.reports.trace import FIELDS, Elided, StatsRow, Trace, TraceStep
from difftest.reports.views import VERDICT_WORDS


def render_trace(
    console: Console,
    trace: Trace,
    result: Result | None,
    others: list[Result],
    all_steps: bool = False,
) -> None:
    title = Text(trace.scenario, style="bold")
    title.append(f" [{trace.tier}]", style="dim")
    title.append(f" · {trace.branch} · run {trace.label}")
    if result is not None:
        title.append(": ")
        title.append(VERDICT_WORDS[result.verdict], style=VERDICT_STYLES[result.verdict])
    console.print(title)
    if result is not None and result.verdict != "pass":
        for line in _reasons(result):
            console.print(_indented(Text(line)))
    if others:
        listed = " · ".join(f"{r.label} {VERDICT_WORDS[r.verdict]}" for r in others)
        console.print(
            _indented(
                Text(f"other runs of {trace.branch}: {listed} (pick one with --order)", style="dim")
            )
        )
    source = trace.emitted_source
    emitted = (
        f"the branch's counter {source.split(':', 1)[1]}"
        if source.startswith("counter:")
        else "implied by the branch's mean acceptance length (rows + accepted)"
    )
    console.print(_indented(Text(f"reading {trace.reading} · emitted: {emitted}", style="dim")))
    first = trace.first
    if first is None:
        console.print(Text("  every step agrees with the oracle", style="green"))
    items = trace.segments(context=1) if not all_steps else list(trace.steps)
    for item in items:
        console.print()
        if isinstance(item, Elided):
            agree = f"{item.verb} with the oracle" if item.agree else "left out"
            console.print(Text(f"{item.steps} {agree}", style="dim"))
            continue
        _step(console, item, first is not None and item is trace.steps[first])


def _indented(text: Text, by: int = 2) -> Padding:
    return Padding(text, (0, 0, 0, by), expand=False)


def _reasons(result: Result) -> list[str]:
    if result.verdict == "error":
        return [first_reason(result)]
    lines = [f"{v.invariant}: {v.detail}" for v in result.violations if v.invariant == "stats-lost"]
    return lines or [first_reason(result)]


def _step(console: Console, step: TraceStep, is_first: bool) -> None:
    head = Text(f"step {step.step}", style="bold")
    if step.differs:
        head.append(f"  {MARK} ", style=STYLES["broken"])
        head.append(
            ("the first step that disagrees with the oracle: " if is_first else "disagrees: ")
            + ", ".join(FIELDS[name] for name in step.differs),
            style="bold red",
        )
    console.print(head)
    if not step.recorded.reported and step.expected is not None and step.expected.rows:
        console.print(
            _indented(Text("the branch reported no spec stats for this step", style="bold red"))
        )
    if step.requests:
        requests = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
        for column in ("request", "drafts", "invalid", "sampled", "emitted"):
            requests.add_column(column, justify="left" if column == "request" else "right")
        for q in step.requests:
            name = Text(q.request)
            if q.notes:
                name.append(f" ({q.notes})", style="dim")
            requests.add_row(
                name,
                _tokens(q.drafts),
                str(q.invalid or "-"),
                _tokens(q.sampled),
                _tokens(q.emitted),
            )
        console.print(Padding(requests, (0, 0, 0, 2)))
    stats = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    stats.add_column("stats")
    for label in FIELDS.values():
        stats.add_column(label, justify="right")
    stats.add_row(*_stats_row("branch", step.recorded, step.differs))
    if step.expected is not None:
        stats.add_row(*_stats_row("oracle", step.expected, []))
    console.print(Padding(stats, (0, 0, 0, 2)))


def _tokens(tokens: list[int]) -> str:
    return " ".join(str(t) for t in tokens) if tokens else "-"


def _stats_row(who: str, row: StatsRow, differs: list[str]) -> list[Text]:
    """One side of a step's stats; a branch that reported none shows `none` (counted as zeros)."""
    label = Text(who if row.reported else f"{who}: none", style="bold" if who == "oracle" else "")
    cells = [label]
    for name in FIELDS:
        value = row.value(name)
        text = " ".join(str(v) for v in value) if isinstance(value, list) else format_value(value)
        if not row.reported:
            text = "-"
        if name in differs:
            cells.append(Text(f"{text} {MARK}", style=STYLES["broken"]))
        else:
            cells.append(Text(text))
    return cells
