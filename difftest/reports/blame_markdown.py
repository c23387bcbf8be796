"""`difftest blame`'s report in Markdown (blame.md), for a pull request comment.

The same sections as the terminal report (`reports.blame_view`): per finding, a
table of the hunks that make it and what the finding became without each, the
hunks left out and why, where the stats first part from the oracle, the command
that measures it again, and the culprit hunks as `diff` blocks. A comment holds
at most 65,536 characters, so hunks are cut to `HUNK_LINES` lines and, past
`BUDGET`, left to the evidence (and counted).
"""

from __future__ import annotations

from difftest.core.blame import listed
from difftest.reports.blame_view import BOUND, FindingView, HunkLine, made_by, summary, views
from difftest.reports.format import fenced, md_code, md_escape
from difftest.reports.sources import BlameReport

#: Characters of hunk text the whole comment may carry; the rest is in evidence.json.
BUDGET = 40_000
#: Lines of one hunk shown before "... N more lines".
HUNK_LINES = 60


def render_blame_markdown(report: BlameReport) -> str:
    blame = report.evidence.blame
    assert blame is not None
    lines = [
        f"## difftest blame: {md_escape(blame.branch)} against {md_escape(blame.against)}",
        "",
        f"{md_escape(summary(blame))} · {report.evidence.reading} reading",
        "",
    ]
    budget = [BUDGET]
    for view in views(report):
        lines += _finding(view, budget)
    return "\n".join(lines).rstrip() + "\n"


def _finding(view: FindingView, budget: list[int]) -> list[str]:
    finding = view.finding
    lines = [
        f"### {md_escape(finding.scenario)} ({md_escape(finding.tier)})",
        "",
        f"**{md_escape(finding.verdict)}** "
        + md_escape(view.headline.removeprefix(finding.verdict).strip()),
        "",
    ]
    if view.problem:
        return [*lines, f"No set of hunks found: {md_escape(view.problem)}", ""]
    count = len(view.culprits)
    numbers = listed([e.hunk.number for e in view.culprits])
    plural = "s" if count != 1 else ""
    said = made_by(view)
    lines += [
        f"Made by **{count} hunk{plural}** ({numbers}, try {finding.culprit}){md_escape(said)}:",
        "",
        *(
            [
                f"Bound ({md_escape(BOUND.removeprefix('bound: '))}): "
                f"{listed([e.hunk.number for e in view.bound])}.",
                "",
            ]
            if view.bound
            else []
        ),
        "| hunk | file | lines | without it |",
        "|---|---|---|---|",
        *(_row(entry) for entry in view.culprits),
        "",
        "Left out:",
        "",
        "| hunk | file | lines | why |",
        "|---|---|---|---|",
        *(_row(entry) for entry in view.left_out),
        "",
        f"The rest of the change without them: {md_escape(view.rest)}",
        "",
        f"Where the stats first part from the oracle, run {md_escape(view.label)}:",
        "",
        *(f"- {md_escape(p.who)}: {md_escape(p.where)}" for p in view.partings),
        "",
        f"Reproduce: {md_code(view.reproduce)}",
        "",
        "<details><summary>The hunks that make it</summary>",
        "",
    ]
    left = 0
    for entry in view.culprits:
        text = _hunk_text(entry)
        if len(text) > budget[0]:
            left += 1
            continue
        budget[0] -= len(text)
        lines += [f"#{entry.hunk.number} {md_escape(entry.hunk.file)}", "", text, ""]
    if left:
        lines += [f"{left} more hunk(s) left out of this comment: evidence.json holds them.", ""]
    return [*lines, "</details>", ""]


def _row(entry: HunkLine) -> str:
    why = entry.why + (f" (try {entry.proof})" if entry.proof else "")
    hunk = entry.hunk
    return (
        f"| #{hunk.number} | {md_escape(hunk.file)} | {hunk.lines} (+{hunk.added} "
        f"-{hunk.removed}) | {md_escape(why)} |"
    )


def _hunk_text(entry: HunkLine) -> str:
    lines = entry.hunk.text.splitlines()
    shown = "\n".join(lines[:HUNK_LINES])
    if len(lines) > HUNK_LINES:
        shown += f"\n... {len(lines) - HUNK_LINES} more lines (evidence.json holds them)"
    return fenced(shown, "diff")
