"""The terminal report: what a maintainer reads first.

Per scenario, one table: counters as rows, branches and the oracle as columns,
values of the first order run (the canonical one), and a verdict row that
covers every order (`broken (2/6 orders)`). Under it, each distinct reason a
branch failed, with the orders it failed on. Then verdict counts per branch
and the oracle reading.

Every string that comes from a branch or a probe is wrapped in `Text`, so
rich never reads it as markup.
"""

from __future__ import annotations

from collections import Counter

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from difftest.core.evidence import Evidence
from difftest.core.verdicts import SUMMARY_ORDER, summarize
from difftest.reports.tests_matrix import terminal_renderables
from difftest.reports.views import VERDICT_WORDS, Cell, ScenarioView, branch_names, scenario_views, timestamp

STYLES: dict[str, str] = {
    "broken": "bold white on red",
    "diverge": "bold black on yellow",
    "error": "magenta",
    "pass": "green",
}
VERDICT_STYLES: dict[str, str] = {"broken": "bold red", "diverge": "bold yellow", "error": "magenta", "pass": "green"}
MARK = "*"
LEGEND = f"{MARK} differs from the oracle (red: broken, yellow: diverge)"
READINGS = {
    "strict": "strict: a request whose drafts are all grammar-invalid makes no row",
    "lenient": "lenient: a request whose drafts are all grammar-invalid makes a row with 0 draft tokens",
}


def render_terminal(evidence: Evidence, console: Console | None = None) -> None:
    console = console or Console()
    console.print(_header(evidence))
    for view in scenario_views(evidence):
        console.print()
        if view.rows:  # tiers without counter rows (tests) show their own matrix below
            console.print(_scenario_table(view))
        for line in _reason_lines(view):
            console.print(line)
    for renderable in terminal_renderables(evidence):
        console.print()
        console.print(renderable)
    console.print()
    console.print(_summary_table(evidence))
    console.print(Text("reading  ", style="bold") + Text(READINGS.get(evidence.reading, evidence.reading)))


def _header(evidence: Evidence) -> Text:
    text = Text("difftest ", style="bold")
    text.append(f"{evidence.difftest_version}  ")
    text.append("base ", style="dim")
    text.append(evidence.base.requirement)
    text.append("  reading ", style="dim")
    text.append(evidence.reading, style="bold")
    text.append("  ")
    text.append(timestamp(evidence), style="dim")
    return text


def _scenario_table(view: ScenarioView) -> Table:
    n = len(view.labels)
    title = Text(view.name, style="bold")
    title.append(f"  [{view.tier}]", style="dim")
    if view.statement:
        title.append("\n")
        title.append(view.statement, style="italic")
    caption = Text(LEGEND, style="dim") if any(c.verdict in ("broken", "diverge") for r in view.rows for c in r.cells) else Text("")
    if n > 1:
        caption.append("\n" if caption else "")
        caption.append(f"values: run {view.canonical!r} (1 of {n}); the verdict row covers all {n} runs", style="dim")
    table = Table(title=title, caption=caption or None, box=box.SIMPLE_HEAD, title_justify="left", caption_justify="left")
    table.add_column("counter", style="cyan", no_wrap=True)
    for branch in view.branches:
        table.add_column(Text(branch), justify="right")
    table.add_column("oracle", justify="right", style="bold")
    for row in view.rows:
        dim = row.key == "emitted_source"
        table.add_row(
            Text(row.label, style="dim" if dim else ""),
            *(_cell(c, dim) for c in row.cells),
            Text(row.oracle, style="dim" if dim else ""),
        )
    table.add_section()
    table.add_row(Text("verdict", style="bold"), *(_verdict(c) for c in view.verdicts), Text(""))
    return table


def _cell(cell: Cell, dim: bool = False) -> Text:
    if cell.verdict is None:
        return Text(cell.text, style="dim" if dim else "")
    if cell.verdict in ("broken", "diverge"):
        # The marker keeps the finding visible where colours are lost (CI logs, pipes).
        return Text(f"{cell.text} {MARK}", style=STYLES[cell.verdict])
    return Text(cell.text, style=STYLES[cell.verdict])


def _verdict(cell: Cell) -> Text:
    return Text(cell.text, style=VERDICT_STYLES[cell.verdict or "pass"])


def _reason_lines(view: ScenarioView) -> list[Text]:
    lines = []
    for branch in view.branches:
        for reason in view.reasons.get(branch, []):
            line = Text("  ")
            line.append(branch, style="bold")
            line.append(" ")
            line.append(VERDICT_WORDS[reason.verdict], style=VERDICT_STYLES[reason.verdict])
            line.append(": ")
            line.append(reason.text)
            lines.append(line)
            if len(view.labels) > 1:
                shown = "; ".join(reason.labels[:4]) + ("; ..." if len(reason.labels) > 4 else "")
                lines.append(Text(f"    on {len(reason.labels)}/{len(view.labels)} runs: {shown}", style="dim"))
    return lines


def _summary_table(evidence: Evidence) -> Table:
    table = Table(title=Text("summary", style="bold"), box=box.SIMPLE_HEAD, title_justify="left")
    table.add_column("branch")
    for verdict in SUMMARY_ORDER:
        table.add_column(Text(VERDICT_WORDS[verdict], style=VERDICT_STYLES[verdict]), justify="right")
    summary = summarize(evidence.results)
    for branch in branch_names(evidence):
        counts = summary.get(branch, Counter())
        table.add_row(
            Text(branch),
            *(Text(str(counts[v]), style=VERDICT_STYLES[v] if counts[v] and v != "pass" else "") for v in SUMMARY_ORDER),
        )
    return table
