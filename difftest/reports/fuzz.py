"""The fuzz summary, rendered from a `FuzzReport` only: per branch, each kind found, its minimal
scenario file and a one-line reason, and what the examples ran of the branch's changed lines
(terminal and Markdown, `fuzz.md`). "Nothing found" on a branch whose changed code the examples did
not all run reads "nothing found, not verified", as a gate's pass does."""

from __future__ import annotations

import shlex
from pathlib import Path

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from difftest.core.fuzz import FuzzReport
from difftest.reports.format import md_code, md_escape, printable
from difftest.reports.terminal import VERDICT_STYLES

NOTHING = "nothing found"
COULD_NOT = "could not measure"
#: What "nothing found" adds where the examples did not run all of a branch's changed code.
UNSEEN = {"not verified": ", not verified", "unknown": ", coverage unknown"}


def rows(report: FuzzReport) -> list[tuple[str, str, str, str, str]]:
    """(branch, verdict, what, scenario file, reason) per kind found; a row per branch with
    nothing."""
    out = []
    for branch, found in report.by_branch().items():
        if branch in report.unmeasured:
            out.append((branch, "error", COULD_NOT, "", report.unmeasured[branch]))
        elif not found:
            standing = report.coverage_of(branch)
            status = standing.status if standing is not None else ""
            out.append((branch, "", NOTHING + UNSEEN.get(status, ""), "", ""))
        for obs, finding in found:
            out.append((branch, obs.kind.verdict, obs.kind.what, finding.file, obs.reason))
    return out


def headline(report: FuzzReport) -> str:
    """What was searched, in one line."""
    asked = []
    if report.examples is not None:
        asked.append(f"{report.examples} examples per round")
    if report.time_s is not None:
        asked.append(f"{report.time_s:g} s")
    compared = (
        f"against {report.against}" if report.against else f"oracle, {report.reading} reading"
    ) + (", guided toward the changed code" if report.guided else "")
    stopped = {
        "time": ", stopped by --time",
        "interrupted": ", interrupted",
        "flaky": f", stopped: {report.stop_reason}",
    }.get(report.stopped or "", "")
    return (
        f"difftest fuzz: {report.tier} tier, seed {report.seed}, {' / '.join(asked)} ({compared}): "
        f"{report.searched} examples in the last of {report.rounds} round(s), {report.probed} "
        f"scenarios probed, {report.elapsed_s:.1f} s{stopped}"
    )


def throughput(report: FuzzReport) -> str:
    first = report.first_finding_s
    rate = report.probed / report.elapsed_s if report.elapsed_s else 0.0
    return f"{rate:.1f} scenarios probed per second on every branch; first finding after " + (
        f"{first:.1f} s" if first is not None else "-"
    )


def coverage_lines(report: FuzzReport) -> list[tuple[str, str]]:
    """(style, line) per fuzzed branch whose changed lines were judged: what the examples ran of
    them, and when the last of those reached was first reached."""
    out = []
    for branch in report.branches:
        standing = report.coverage_of(branch)
        if standing is None or standing.status == "unchanged":
            continue
        firsts = [r for r in report.first_reached if r.branch == branch]
        last = max(firsts, key=lambda r: r.example, default=None)
        when = (
            f" (the last first reached by example {last.example}, after {last.after_s:.1f} s)"
            if last is not None
            else ""
        )
        style = "dim" if standing.status == "verified" else "yellow"
        out.append((style, f"{branch}: {standing.summary}{when}"))
    return out


def render_fuzz_terminal(report: FuzzReport, console: Console) -> None:
    console.print(Text(headline(report), style="bold"))
    table = Table(box=box.SIMPLE_HEAD, show_edge=False)
    folders = sorted({str(Path(report.out) / Path(f.file).parent) for f in report.findings})
    for column in (
        "branch",
        "kind",
        f"minimal scenario (in {', '.join(folders)})" if folders else "minimal scenario",
        "reason",
    ):
        table.add_column(column, overflow="fold")
    for branch, verdict, what, file, reason in rows(report):
        kind = Text(f"{verdict} " if verdict else "", style=VERDICT_STYLES.get(verdict, "")) + Text(
            printable(what)
        )
        table.add_row(
            Text(branch), kind, Text(Path(file).name if file else ""), Text(printable(reason))
        )
    console.print(table)
    for style, line in coverage_lines(report):
        console.print(Text(printable(line), style=style))
    console.print(Text(throughput(report), style="dim"))
    for finding in report.findings:
        if not finding.reproduced:
            console.print(
                Text(
                    f"{finding.name}: did not show every kind again when its file was probed",
                    style="magenta",
                )
            )
    if report.findings:
        console.print(Text(f"Reproduce: {reproduce_command(report)} (add -k NAME for one finding)"))
    for command in blame_commands(report):
        console.print(Text(f"Which hunks make it: {command}"))


def reproduce_command(report: FuzzReport) -> str:
    return shlex.join(["difftest", "run", "-c", str(Path(report.out) / "found" / "branches.yaml")])


def blame_commands(report: FuzzReport) -> list[str]:
    """The `difftest blame` command of each (branch, finding) that diverges or is broken: which of
    the branch's hunks make that minimal scenario fail, on the config written beside it."""
    config = str(Path(report.out) / "found" / "branches.yaml")
    base = report.against or report.baseline
    commands: list[str] = []
    for finding in report.findings:
        # What the base shows too is no finding of the branch's: blame would answer "no finding
        # to blame" (`core.blame.finding_of`).
        shared = {
            (o.kind.verdict, o.kind.what) for o in finding.observations if o.kind.branch == base
        }
        for obs in finding.observations:
            branch = obs.kind.branch
            if obs.kind.verdict not in ("broken", "diverge") or branch in (report.baseline, base):
                continue
            if (obs.kind.verdict, obs.kind.what) in shared:
                continue
            words = ["difftest", "blame", branch, "--finding", str(Path(report.out) / finding.file)]
            words += ["-c", config, "--reading", report.reading]
            words += ["--against", report.against] if report.against else []
            command = shlex.join(words)
            if command not in commands:
                commands.append(command)
    return commands


def render_fuzz_markdown(report: FuzzReport) -> str:
    lines = [
        f"## {md_escape(headline(report))}",
        "",
        "| branch | kind | minimal scenario | reason |",
        "|---|---|---|---|",
    ]
    for branch, verdict, what, file, reason in rows(report):
        kind = f"**{verdict}** {md_escape(what)}" if verdict else md_escape(what)
        scenario = f"`{file}`" if file else ""
        lines.append(f"| {md_escape(branch)} | {kind} | {scenario} | {md_escape(reason)} |")
    changed = coverage_lines(report)
    if changed:
        lines += ["", "Changed code the examples ran:", ""]
        lines += [f"- {md_escape(line)}" for _style, line in changed]
    lines += ["", md_escape(throughput(report)), ""]
    if report.findings:
        lines += [
            f"`{reproduce_command(report)}` re-runs every finding (`-k NAME` one of them).",
            "",
        ]
    blames = blame_commands(report)
    if blames:
        lines += ["Which hunks make each finding:", "", *(f"- {md_code(c)}" for c in blames), ""]
    return "\n".join(lines)
