"""The terminal report: what a maintainer reads first, summary last (like pytest).

From the top: per scenario where some branch does not pass (every scenario
with `verbose`), a table of counters by branch next to the oracle for the most
severe run (named), and each distinct reason a branch failed; then, at the
end where a terminal leaves the reader, the verdict grid (scenario x branch),
the verdict counts, and the conclusion: one line per branch saying where it
stands and why, and which branch is right.

Everything fits the console's width without cutting a name (`fit`). Every
string that comes from a branch or a probe is wrapped in `Text`, so rich never
reads it as markup.
"""

from __future__ import annotations

import shlex
from collections import Counter
from collections.abc import Mapping

from rich import box
from rich.console import Console
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from difftest.core.evidence import Evidence
from difftest.core.records import ProbeRun, Result
from difftest.core.verdicts import SUMMARY_ORDER, summarize
from difftest.reports.conclusion import Conclusion, RunKey, Standing, conclude
from difftest.reports.fit import fit
from difftest.reports.tests_matrix import terminal_renderables
from difftest.reports.views import (
    VERDICT_WORDS,
    Cell,
    ScenarioView,
    branch_names,
    emitted_source,
    launch_note,
    protection_doubted,
    protection_note,
    reference_note,
    reuse_note,
    scenario_views,
    shard_note,
    timestamp,
    views_from,
)
from difftest.tiers.base import EMITTED_SOURCE
from difftest.tiers.common.scenario import ScenarioBase

STYLES: dict[str, str] = {
    "broken": "bold white on red",
    "diverge": "bold black on yellow",
    "error": "magenta",
    "pass": "green",
}
VERDICT_STYLES: dict[str, str] = {
    "broken": "bold red",
    "diverge": "bold yellow",
    "error": "magenta",
    "pass": "green",
    "unverified": "bold yellow",
}
#: Marks where colours are lost (CI logs, pipes): a flagged cell, a branch's standing.
MARK = "*"
ICONS: dict[str, str] = {
    "broken": "✗",
    "error": "?",
    "diverge": "~",
    "pass": "✓",
    "unverified": "!",
}
LEGEND = f"{MARK} differs from the oracle (red: broken, yellow: diverge)"


def render_terminal(
    evidence: Evidence,
    console: Console | None = None,
    verbose: bool = False,
    scenarios: Mapping[str, ScenarioBase] | None = None,
    recorded: Mapping[RunKey, ProbeRun] | None = None,
) -> None:
    """Scenario tables (failing ones, or all with `verbose`), then grid, counts and conclusion;
    `scenarios` and `recorded` (runs with steps) let the conclusion name the oracle's reading as a
    row count's reason."""
    console = console or Console()
    console.print(_header(evidence))
    views = scenario_views(evidence)
    measured = [v for v in views if not v.skipped]
    shown = [v for v in measured if verbose or not v.passes]
    for view in shown:
        console.print()
        _print_scenario(console, view)
    quiet = len(measured) - len(shown)
    if quiet:
        console.print()
        console.print(
            Text(
                f"{quiet} scenario(s) pass on every branch: tables left out (-v shows them)",
                style="dim",
            )
        )
    for renderable in terminal_renderables(evidence):
        console.print()
        console.print(renderable)
    console.print()
    console.rule(Text("summary", style="bold"), style="dim")
    console.print(_counts_table(evidence))
    console.print()
    print_grid(console, views)
    print_conclusion(console, conclude(evidence, scenarios, recorded))


def render_tier_verdicts(results: list[Result], tier: str, console: Console) -> None:
    """One tier's grid, printed as soon as the tier is judged (the next tier may take minutes)."""
    console.print()
    print_grid(
        console,
        views_from(results),
        title=f"{tier} tier verdicts (the other tiers are still running)",
    )


def _header(evidence: Evidence) -> Text:
    text = Text("difftest ", style="bold")
    text.append(f"{evidence.difftest_version}  ")
    text.append("base ", style="dim")
    text.append(evidence.base.requirement)
    text.append("  reading ", style="dim")
    text.append(evidence.reading, style="bold")
    text.append("  ")
    text.append(timestamp(evidence), style="dim")
    for note in (
        protection_note(evidence) if protection_doubted(evidence) else None,
        reuse_note(evidence),
        launch_note(evidence),
        shard_note(evidence),
        reference_note(evidence),
    ):
        if note:
            text.append("\n" + note, style="dim")
    return text


# -- one scenario --------------------------------------------------------------


def _print_scenario(console: Console, view: ScenarioView) -> None:
    title = Text(view.name, style="bold")
    title.append(f"  [{view.tier}]", style="dim")
    console.print(title)
    if view.statement:
        console.print(Text(view.statement, style="italic"))
    if view.conditions:
        console.print(Text("under: " + ", ".join(view.conditions), style="dim"))
    rows = [row for row in view.rows if row.key != EMITTED_SOURCE]
    if (
        not rows
    ):  # a tier without counter rows (tests): its own matrix is printed after the scenarios
        for line in _reason_lines(view):
            console.print(line)
        return
    widest = max((len(_compact(c.text)) for row in rows for c in row.cells), default=6)

    def build(headers: list[Text], columns: list[int]) -> Table:
        table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
        table.add_column("counter", style="cyan", no_wrap=True)
        for header in headers:
            table.add_column(header, justify="right")
        table.add_column("oracle", justify="right", style="bold")
        for row in rows:
            table.add_row(
                Text(row.label), *(_cell(row.cells[i]) for i in columns), Text(_compact(row.oracle))
            )
        table.add_section()
        table.add_row(
            Text("verdict", style="bold"), *(_verdict(view.short[i]) for i in columns), Text("")
        )
        return table

    _print_fitted(console, fit(console, build, view.branches, widest))
    notes = []
    flagged = {row.key for row in rows for c in row.cells if c.verdict in ("broken", "diverge")}
    if flagged:
        notes.append(LEGEND)
    if "num_emitted_tokens" in flagged:
        sources = [
            f"{b} {emitted_source(view.results[b][0] if view.results[b] else None)}"
            for b in view.branches
        ]
        notes.append("emitted from: " + " · ".join(sources))
    if len(view.labels) > 1:
        why = f"the most severe, {view.shown_why}; " if view.shown_why else ""
        notes.append(
            f"run {view.shown} ({why}1 of {len(view.labels)}; the verdict row covers all; "
            f"others: {shlex.join(['difftest', 'show', view.name])} --order RUN)"
        )
    for note in notes:
        console.print(Text(note, style="dim"))
    for line in _reason_lines(view):
        console.print(line)


def _compact(text: str) -> str:
    """A per-position vector without brackets and commas (`3 3 3`):
    narrow columns wrap it at spaces."""
    return text[1:-1].replace(",", "") if text.startswith("[") and text.endswith("]") else text


def _cell(cell: Cell) -> Text:
    text = _compact(cell.text)
    if cell.verdict is None:
        return Text(text)
    if cell.verdict in ("broken", "diverge"):
        return Text(f"{text} {MARK}", style=STYLES[cell.verdict])
    return Text(text, style=STYLES[cell.verdict])


def _verdict(cell: Cell) -> Text:
    return Text(cell.text, style=VERDICT_STYLES[cell.verdict or "pass"])


def _reason_lines(view: ScenarioView) -> list[Padding]:
    """Each distinct reason a branch failed, and the runs it failed on
    (wrapped lines stay indented)."""
    lines = []
    for branch in view.branches:
        for reason in view.reasons.get(branch, []):
            line = Text(branch, style="bold")
            line.append(" ")
            line.append(VERDICT_WORDS[reason.verdict], style=VERDICT_STYLES[reason.verdict])
            line.append(": ")
            line.append(reason.text)
            lines.append(Padding(line, (0, 0, 0, 2), expand=False))
            if len(view.labels) > 1:
                shown = "; ".join(reason.labels[:4]) + ("; ..." if len(reason.labels) > 4 else "")
                runs = Text(
                    f"on {len(reason.labels)}/{len(view.labels)} runs: {shown}", style="dim"
                )
                lines.append(Padding(runs, (0, 0, 0, 4), expand=False))
    return lines


# -- the summary -----------------------------------------------------------------


def print_grid(console: Console, views: list[ScenarioView], title: str = "verdicts") -> None:
    """Scenario x branch, tier by tier; scenarios this base cannot run are named under it."""
    measured = [v for v in views if not v.skipped]
    branches = measured[0].branches if measured else []
    widest = max((len(c.text) for v in measured for c in v.short), default=4)
    tiers_in = list(dict.fromkeys(v.tier for v in measured))

    def build(headers: list[Text], columns: list[int]) -> Table:
        table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
        table.add_column("scenario", no_wrap=True)
        for header in headers:
            table.add_column(header)
        for tier in tiers_in:
            if len(tiers_in) > 1:
                table.add_row(Text(f"{tier} tier", style="dim italic"))
            for view in (v for v in measured if v.tier == tier):
                table.add_row(Text(view.name), *(_short(view.short[i]) for i in columns))
        return table

    console.print(Text(title, style="bold"))
    _print_fitted(console, fit(console, build, branches, widest))
    for view in views:
        if view.skipped:
            console.print(Text(f"not run on this base: {view.name} ({view.skipped})", style="dim"))


def _print_fitted(console: Console, tables: list[tuple[Table, Text | None]]) -> None:
    for number, (table, legend) in enumerate(tables):
        if number:
            console.print()
        if legend is not None:
            console.print(legend)
        console.print(table)


def _short(cell: Cell) -> Text:
    verdict = cell.verdict or "pass"
    return Text(cell.text, style=VERDICT_STYLES[verdict] if verdict != "pass" else "green")


def _counts_table(evidence: Evidence) -> Table:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    table.add_column("runs")
    for verdict in SUMMARY_ORDER:
        table.add_column(
            Text(VERDICT_WORDS[verdict], style=VERDICT_STYLES[verdict]), justify="right"
        )
    summary = summarize(evidence.results)
    for branch in branch_names(evidence):
        counts = summary.get(branch, Counter())
        table.add_row(
            Text(branch),
            *(
                Text(str(counts[v]), style=VERDICT_STYLES[v] if counts[v] and v != "pass" else "")
                for v in SUMMARY_ORDER
            ),
        )
    return table


def _coverage_line(standing: Standing) -> str:
    """The branch's changed-line coverage: whole for a pass (it decides whether the pass is a
    checked one), its count alone for a branch that does not pass (the conclusion fits one
    screen; report.md and report.html name the lines)."""
    if standing.verdict == "pass" or ";" not in standing.coverage:
        return standing.coverage
    return standing.coverage.split(";", 1)[0] + " (report.md names the rest)"


def print_conclusion(console: Console, conclusion: Conclusion) -> None:
    console.print()
    title = Text("conclusion", style="bold")
    title.append(f" ({conclusion.reading} reading)", style="dim")
    console.print(title)
    # Two columns: the mark, then the text wrapped under itself (a hanging indent).
    lines = Table.grid(padding=(0, 1))
    lines.add_column(no_wrap=True)
    lines.add_column()
    for standing in conclusion.standings:
        text = Text(standing.branch, style="bold")
        text.append(" " + standing.headline)
        if standing.coverage:
            text.append(
                "\n" + _coverage_line(standing), style="yellow" if standing.unverified else "dim"
            )
        for also in standing.also:
            text.append("\n" + also, style="dim")
        lines.add_row(Text(ICONS[standing.mark], style=VERDICT_STYLES[standing.mark]), text)
    for shared in conclusion.shared:
        text = Text(shared.who, style="bold")
        text.append(": " + shared.text, style="dim")
        lines.add_row(Text("=", style="dim"), text)
    lines.add_row(Text("→", style="bold"), Text(conclusion.verdict, style="bold"))
    for n, command in enumerate(conclusion.blame):
        # The question once, then one command a line (each fits 80 columns on its own).
        text = Text("" if n else "which hunks make it:\n")
        text.append(command, style="bold")
        lines.add_row(Text("?", style="dim"), text)
    console.print(lines)
