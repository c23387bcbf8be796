"""`difftest coverage`'s outputs: what the scenarios reach of the stats path, for a person (80
columns), for scripts (`coverage.json`) and as pages (`coverage/index.html`, one page per stats-path
file the scenarios imported, its lines marked as coverage.py's HTML marks them: run, missed,
partly taken)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined
from rich.console import Console
from rich.table import Table

from difftest.core.coverage import line_ranges
from difftest.core.reach import FileReach

#: coverage.json's own schema (its keys are documented in docs/commands.md).
COVERAGE_SCHEMA = 1
#: The folder, under --out, of the HTML pages.
PAGES = "coverage"


@dataclass
class CoverageReport:
    """One branch's reach over the stats path, and where it came from."""

    branch: str
    sha: str
    base: Mapping[str, Any]
    tiers: list[str]
    scenarios: int
    traced: list[str]
    #: "ok", or "unknown" with `why` (a probe could not vouch for its coverage, or none was traced).
    status: str
    why: str
    files: list[FileReach]
    #: The stats path's parts (the config's `stats_paths`), each with what it decides where the
    #: built-in table knows.
    parts: list[tuple[str, str]] = field(default_factory=list)
    #: Every traced file (`vllm/...`) -> the lines the runs executed: the base's map, which the
    #: gate's skip rule reads.
    executed: dict[str, list[int]] = field(default_factory=dict)
    #: Probe failures, per tier (coverage of a tier whose probe failed is partial).
    failures: dict[str, str] = field(default_factory=dict)

    def totals(self, part: str | None = None) -> tuple[int, int]:
        chosen = [f for f in self.files if part is None or f.part == part]
        return sum(f.statements for f in chosen), sum(len(f.reached) for f in chosen)


def percent(reached: int, statements: int) -> str:
    return f"{100 * reached / statements:.0f} %" if statements else "-"


def page_name(path: str) -> str:
    """`vllm/v1/core/sched/scheduler.py` -> `v1--core--sched--scheduler.py.html` (`--` is in no
    Python module's path, so no two files share a page)."""
    return path.removeprefix("vllm/").replace("/", "--") + ".html"


def render_terminal(report: CoverageReport, console: Console) -> None:
    """Each stats-path part's statements reached, the files no scenario imports by reason, at 80
    columns."""
    console.print(
        f"[bold]difftest coverage[/bold]: {report.branch} ({report.sha[:10]}), "
        f"{report.scenarios} scenario(s) on {', '.join(report.tiers) or 'no tier'}"
    )
    if report.status != "ok":
        console.print(f"[bold yellow]coverage unknown[/bold yellow]: {report.why}")
        return
    table = Table(box=None, pad_edge=False, show_edge=False)
    table.add_column("stats path", overflow="fold", max_width=34)
    table.add_column("files run", justify="right")
    table.add_column("statements", justify="right")
    table.add_column("reached", justify="right")
    for part, _decides in report.parts:
        files = [f for f in report.files if f.part == part]
        if not files:
            continue
        statements, reached = report.totals(part)
        imported = sum(1 for f in files if f.imported)
        table.add_row(
            part.removeprefix("vllm/"),
            f"{imported}/{len(files)}",
            str(statements),
            f"{reached} ({percent(reached, statements)})",
        )
    statements, reached = report.totals()
    table.add_row("all", "", str(statements), f"{reached} ({percent(reached, statements)})")
    console.print(table)
    kinds: dict[str, int] = {}
    for f in report.files:
        if not f.imported and f.statements:
            kind = f.reason.split(":", 1)[0]
            kinds[kind] = kinds.get(kind, 0) + 1
    if kinds:
        console.print(f"files not run, by reason (each named in {PAGES}/index.html):")
        for kind, count in sorted(kinds.items(), key=lambda kv: -kv[1]):
            console.print(f"  {kind:<32} {count:>5}")
    broken = [f for f in report.files if f.problem]
    if broken:
        console.print(
            f"[yellow]not counted[/yellow]: {len(broken)} file(s), e.g. {broken[0].file} "
            f"({broken[0].problem})"
        )
    for tier, failure in report.failures.items():
        console.print(f"[yellow]partial[/yellow]: the {tier} tier's probe failed ({failure})")


def render_json(report: CoverageReport) -> str:
    """coverage.json: the figures, per file and function, and the map of executed lines."""
    statements, reached = report.totals()
    body = {
        "schema": COVERAGE_SCHEMA,
        "branch": report.branch,
        "sha": report.sha,
        "base": dict(report.base),
        "tiers": report.tiers,
        "scenarios": report.scenarios,
        "traced": report.traced,
        "status": report.status,
        "why": report.why,
        "failures": report.failures,
        "totals": {"statements": statements, "reached": reached},
        "parts": [
            {"path": part, "decides": decides, "statements": total, "reached": hit}
            for part, decides in report.parts
            for total, hit in [report.totals(part)]
        ],
        "files": [
            {
                **{k: v for k, v in asdict(f).items() if k not in ("reached", "functions")},
                "reached": len(f.reached),
                "unreached": f.unreached,
                "partial": [list(arc) for arc in f.partial],
                "functions": [asdict(fn) for fn in f.functions],
            }
            for f in report.files
        ],
        "executed": report.executed,
    }
    return json.dumps(body, indent=1, sort_keys=False) + "\n"


def render_pages(report: CoverageReport, sources: Mapping[str, str]) -> dict[str, str]:
    """`coverage/index.html` and a page per file in `sources` (path -> text): name -> HTML."""
    env = Environment(
        loader=PackageLoader("difftest.reports", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    index = env.get_template("coverage_index.html.j2")
    page = env.get_template("coverage_file.html.j2")
    statements, reached = report.totals()
    parts = [(part, decides, *report.totals(part)) for part, decides in report.parts]
    pages = {
        f"{PAGES}/index.html": index.render(
            report=report,
            parts=parts,
            statements=statements,
            reached=reached,
            percent=percent,
            page_name=page_name,
            has_page=set(sources),
            line_ranges=line_ranges,
        )
    }
    for f in report.files:
        if f.file in sources:
            pages[f"{PAGES}/{page_name(f.file)}"] = page.render(
                report=report, file=f, lines=_marked(f, sources[f.file]), percent=percent
            )
    return pages


def _marked(reach: FileReach, source: str) -> list[tuple[int, str, str, str]]:
    """(number, class, text, note) per line: `run`, `mis`, `par` (a branch point left one way)
    or "" for a line that is not a statement."""
    ran, missed = set(reach.reached), set(reach.unreached)
    one_way: dict[int, list[int]] = {}
    for a, b in reach.partial:
        one_way.setdefault(a, []).append(b)
    marked = []
    # Lines as Python numbers them: at newlines only (a form feed or U+2028 is no line end).
    for number, text in enumerate(source.split("\n"), start=1):
        if number in one_way:
            targets = ", ".join("exit" if b < 0 else str(b) for b in one_way[number])
            marked.append((number, "par", text, f"never went to {targets}"))
        elif number in ran:
            marked.append((number, "run", text, ""))
        elif number in missed:
            marked.append((number, "mis", text, ""))
        else:
            marked.append((number, "", text, ""))
    return marked
