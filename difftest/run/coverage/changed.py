"""Which of the lines a branch changes its own probes executed.

The changed lines are the branch's file's lines that differ from the baseline's (difflib over the
two blobs git holds; a pure deletion counts the line that now follows it). Which of them can run at
all, and where a changed branch point (`if`, `while`, a boolean expression) can go, comes from
coverage.py's parser run here, on the branch's file as git holds it: the probe, which runs the
branch's code, reports only the lines and arcs it executed (`probe.tracing`), summed over the
branch's probes of every tier.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass, field

from coverage.exceptions import CoverageException
from coverage.parser import PythonParser

from difftest.core.evidence import ChangedFileCoverage
from difftest.core.records import ProbeCoverage


def changed_line_numbers(old: str | None, new: str) -> set[int]:
    """1-based lines of `new` that differ from `old` (every line when the file is new)."""
    new_lines = new.splitlines()
    if old is None:
        return set(range(1, len(new_lines) + 1))
    matcher = difflib.SequenceMatcher(None, old.splitlines(), new_lines, autojunk=False)
    changed: set[int] = set()
    for tag, _i1, _i2, j1, j2 in matcher.get_opcodes():
        if tag in ("replace", "insert"):
            changed.update(range(j1 + 1, j2 + 1))
        elif tag == "delete" and j1 < len(new_lines):
            changed.add(j1 + 1)  # what runs now where the removed lines ran
    return changed


@dataclass
class Executed:
    """What a branch's probes executed of its traced files, summed; `unknown` lists why a probe
    could not vouch for its part."""

    lines: dict[str, set[int]] = field(default_factory=dict)
    arcs: dict[str, set[tuple[int, int]]] = field(default_factory=dict)
    unknown: list[str] = field(default_factory=list)
    traced_probes: int = 0

    @classmethod
    def of(cls, probes: Iterable[tuple[str, ProbeCoverage | None]]) -> Executed:
        """Summed over `(tier, coverage)` pairs; a probe that was not traced adds nothing."""
        executed = cls()
        for tier, coverage in probes:
            if coverage is None:
                continue
            executed.traced_probes += 1
            if coverage.status != "ok":
                executed.unknown.append(f"{tier} tier: {coverage.why}")
                continue
            for path, data in coverage.files.items():
                executed.lines.setdefault(path, set()).update(data.lines)
                executed.arcs.setdefault(path, set()).update((a, b) for a, b in data.arcs)
        return executed


def file_coverage(
    branch: str,
    path: str,
    source: str,
    changed: set[int],
    executed: Executed,
) -> ChangedFileCoverage:
    """One changed Python file of `branch`: its changed statements, those executed and not, and
    the arcs out of its changed branch points that no run took."""
    try:
        parser = PythonParser(text=source, filename=path)
        parser.parse_source()
    except (CoverageException, SyntaxError, ValueError) as exc:
        why = f"does not parse ({type(exc).__name__}: {str(exc).splitlines()[0][:120]})"
        return ChangedFileCoverage(branch=branch, file=path, status="not traced", why=why)
    statements = parser.statements
    lines = sorted({parser.first_line(n) for n in changed} & statements)
    ran = parser.translate_lines(executed.lines.get(path, set()))
    taken = parser.translate_arcs(executed.arcs.get(path, set()))
    reached = [n for n in lines if n in ran]
    exits = parser.exit_counts()
    possible = parser.arcs()
    missing = sorted(
        arc
        for n in reached
        if exits.get(n, 0) > 1
        for arc in possible
        if arc[0] == n and arc not in taken
    )
    return ChangedFileCoverage(
        branch=branch,
        file=path,
        status="traced",
        lines=lines,
        reached=reached,
        unreached=[n for n in lines if n not in ran],
        arcs_missing=missing,
    )


def untraced_file(branch: str, path: str, why: str) -> ChangedFileCoverage:
    return ChangedFileCoverage(branch=branch, file=path, status="not traced", why=why)


def unknown_file(branch: str, path: str, why: str) -> ChangedFileCoverage:
    return ChangedFileCoverage(branch=branch, file=path, status="unknown", why=why)
