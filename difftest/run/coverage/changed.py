"""Which of the lines a branch changes its own probes executed.

The changed lines are the branch's file's lines that differ from the baseline's (`git diff -U0`,
`refs.diff.changed_lines`; a pure deletion counts the lines on both sides of it). Which of them can
run at all, and where a changed branch point (`if`, `while`) can go, comes from coverage.py's parser
run here, on the branch's file as git holds it: the probe, which runs the branch's code, reports
only the lines and arcs it executed (`probe.tracing`), summed over the branch's probes of every
tier. A changed `def` line (its decorators, its signature) counts as reached only when the function
was entered, not when the module that defines it was imported.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass, field

from coverage.exceptions import CoverageException
from coverage.parser import PythonParser

from difftest.core.evidence import ChangedFileCoverage
from difftest.core.records import ProbeCoverage
from difftest.core.stats_path import GPU, unreached_reason


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
            if coverage is not None:
                executed.add(tier, coverage)
        return executed

    def add(self, tier: str, coverage: ProbeCoverage) -> bool:
        """Add one probe's (or fuzz example's) coverage; whether it executed anything new."""
        self.traced_probes += 1
        if coverage.status != "ok":
            self.unknown.append(f"{tier} tier: {coverage.why}")
            return False
        grew = False
        for path, data in coverage.files.items():
            lines = self.lines.setdefault(path, set())
            arcs = self.arcs.setdefault(path, set())
            before = len(lines) + len(arcs)
            lines.update(data.lines)
            arcs.update((a, b) for a, b in data.arcs)
            grew |= len(lines) + len(arcs) > before
        return grew


def file_coverage(
    branch: str,
    path: str,
    source: str,
    changed: set[int],
    executed: Executed,
) -> ChangedFileCoverage:
    """One changed Python file of `branch`: its changed statements, those executed and not, and
    the arcs out of its changed branch points that no run took (`FileAnalysis`, once)."""
    return FileAnalysis(path, source, changed).judge(branch, executed)


class FileAnalysis:
    """One changed file's text, parsed once, judged against what ran as often as asked (`fuzz`
    judges after every example that ran something new).

    A file the host cannot analyse (it does not parse here, or breaks the parser) reads "not
    traced", with why; so does a file that cannot run on this platform (GPU-only in
    `core.stats_path.UNREACHED`) and did not: its lines are named as such, not as unreached."""

    def __init__(self, path: str, source: str, changed: set[int]) -> None:
        self.path = path
        self.source = source
        self.changed = changed
        self._parsed: _Parsed | None = None
        self._problem = ""

    def judge(self, branch: str, executed: Executed) -> ChangedFileCoverage:
        path = self.path
        platform = unreached_reason(path)
        if platform.startswith(GPU) and not executed.lines.get(path):
            return ChangedFileCoverage(
                branch=branch, file=path, status="not traced", why=f"{platform}; cannot run here"
            )
        parsed = self._parse()
        if parsed is None:
            return ChangedFileCoverage(
                branch=branch, file=path, status="not traced", why=self._problem
            )
        try:
            return parsed.judge(branch, path, executed)
        except Exception as exc:  # noqa: BLE001 - one odd file must not lose the run's evidence
            why = f"could not be analysed ({type(exc).__name__}: {_first_line(exc)})"
        return ChangedFileCoverage(branch=branch, file=path, status="not traced", why=why)

    def targets(self) -> tuple[set[int], set[tuple[int, int]]]:
        """The changed statements and the arcs out of its changed branch points (what a guided
        fuzz search tries to run); empty where the file cannot be analysed."""
        parsed = self._parse()
        if parsed is None:
            return set(), set()
        lines = set(parsed.lines)
        arcs = {
            arc for n in lines if parsed.exits.get(n, 0) > 1 for arc in parsed.out_of.get(n, [])
        }
        return lines, arcs

    def _parse(self) -> _Parsed | None:
        if self._parsed is None and not self._problem:
            try:
                self._parsed = _Parsed.of(self.path, self.source, self.changed)
            except (CoverageException, SyntaxError, ValueError) as exc:
                self._problem = f"does not parse ({type(exc).__name__}: {_first_line(exc)})"
            except Exception as exc:  # noqa: BLE001 - one odd file must not lose the evidence
                self._problem = f"could not be analysed ({type(exc).__name__}: {_first_line(exc)})"
        return self._parsed


@dataclass(frozen=True)
class _Parsed:
    """What coverage.py's parser says of a changed file, independent of what ran."""

    parser: PythonParser
    #: The changed lines that are statements.
    lines: list[int]
    #: A function's definition lines -> the line its code object starts at.
    starts: dict[int, int]
    exits: dict[int, int]
    out_of: dict[int, list[tuple[int, int]]]

    @classmethod
    def of(cls, path: str, source: str, changed: set[int]) -> _Parsed:
        parser = PythonParser(text=source, filename=path)
        parser.parse_source()
        statements = parser.statements
        out_of: dict[int, list[tuple[int, int]]] = {}
        for arc in parser.arcs():
            out_of.setdefault(arc[0], []).append(arc)
        return cls(
            parser=parser,
            lines=sorted({parser.first_line(n) for n in changed if n > 0} & statements),
            starts=_function_starts(source),
            exits=parser.exit_counts(),
            out_of=out_of,
        )

    def judge(self, branch: str, path: str, executed: Executed) -> ChangedFileCoverage:
        ran = self.parser.translate_lines(executed.lines.get(path, set()))
        taken = self.parser.translate_arcs(executed.arcs.get(path, set()))
        entered = {-a for a, _b in taken if a < 0}
        starts = self.starts
        reached = [n for n in self.lines if n in ran and (n not in starts or starts[n] in entered)]
        missing = sorted(
            arc
            for n in reached
            if self.exits.get(n, 0) > 1
            for arc in self.out_of.get(n, [])
            if arc not in taken
        )
        return ChangedFileCoverage(
            branch=branch,
            file=path,
            status="traced",
            lines=self.lines,
            reached=reached,
            unreached=[n for n in self.lines if n not in reached],
            arcs_missing=missing,
        )


def _function_starts(source: str) -> dict[int, int]:
    """Each line of a function's definition that coverage.py counts as a statement (its decorators,
    its `def`) -> the line its code object starts at (the first decorator's, as CPython numbers
    it): the function ran when an arc enters it from there."""
    starts: dict[int, int] = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            first = min([d.lineno for d in node.decorator_list] + [node.lineno])
            for line in [node.lineno, *(d.lineno for d in node.decorator_list)]:
                starts[line] = first
    return starts


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [""])[0][:120]


def untraced_file(branch: str, path: str, why: str) -> ChangedFileCoverage:
    return ChangedFileCoverage(branch=branch, file=path, status="not traced", why=why)


def unknown_file(branch: str, path: str, why: str) -> ChangedFileCoverage:
    return ChangedFileCoverage(branch=branch, file=path, status="unknown", why=why)
