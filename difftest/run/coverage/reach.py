"""What the scenarios reach of the stats path (`difftest coverage`): per file and per function, the
statements executed and not, and the branch points taken one way only, from what one branch's
probes executed (summed over its tiers) and the branch's own files, parsed here by coverage.py's
parser as `changed` parses a changed file.

Every unreached file is given a reason: one from `core.stats_path.UNREACHED` (GPU-only, a
condition no scenario models, dead code) where the table knows it, else "no scenario reaches it"
(never silence).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

from coverage.exceptions import CoverageException
from coverage.parser import PythonParser

from difftest.build.workspace import Workspace
from difftest.core.reach import FileReach, FunctionReach
from difftest.core.stats_path import STATS_PATH, unreached_reason
from difftest.run.coverage.changed import Executed

#: The reason of an unreached file that `core.stats_path.UNREACHED` does not name.
NO_SCENARIO = "no scenario reaches it"


def stats_path_files(vllm_root: Path, parts: Iterable[str] | None = None) -> list[str]:
    """Every Python file of the stats path (`vllm/...`) under `vllm_root`'s parent, sorted."""
    top = vllm_root.parent
    found: set[str] = set()
    for part in parts if parts is not None else [p.path for p in STATS_PATH]:
        target = top / part
        if part.endswith("/"):
            found.update(str(p.relative_to(top)) for p in target.rglob("*.py"))
        elif target.is_file() and part.endswith(".py"):
            found.add(part)
    return sorted(found)


def reach_of(vllm_root: Path, executed: Executed, files: Iterable[str]) -> list[FileReach]:
    """Each of `files` (`vllm/...`), read from `vllm_root`'s parent, against `executed`."""
    top = vllm_root.parent
    return [_file(path, (top / path).read_bytes(), executed) for path in files]


def part_of(path: str) -> str:
    """The stats-path part (`core.stats_path.STATS_PATH`) a file belongs to."""
    for part in STATS_PATH:
        if path == part.path or (part.path.endswith("/") and path.startswith(part.path)):
            return part.path
    return ""


def _file(path: str, blob: bytes, executed: Executed) -> FileReach:
    reach = FileReach(file=path, part=part_of(path))
    try:
        source = blob.decode("utf-8").removeprefix("\ufeff")
        parser = PythonParser(text=source, filename=path)
        parser.parse_source()
    except (CoverageException, SyntaxError, ValueError, UnicodeDecodeError) as exc:
        reach.problem = f"does not parse ({type(exc).__name__})"
        return reach
    statements = parser.statements
    ran = parser.translate_lines(executed.lines.get(path, set())) & statements
    taken = parser.translate_arcs(executed.arcs.get(path, set()))
    reach.statements = len(statements)
    reach.reached = sorted(ran)
    reach.unreached = sorted(statements - ran)
    exits = parser.exit_counts()
    reach.partial = sorted(
        arc
        for arc in parser.arcs()
        if arc[0] in ran and exits.get(arc[0], 0) > 1 and arc not in taken
    )
    reach.functions = _functions(source, statements, ran)
    if reach.unreached:
        reach.reason = unreached_reason(path) or NO_SCENARIO
    return reach


def _functions(source: str, statements: set[int], ran: set[int]) -> list[FunctionReach]:
    """Every function and method with its own statements (those of a nested function are its
    own), outermost first in source order."""
    found: list[FunctionReach] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                inner = _nested_lines(child)
                body = {
                    n
                    for n in statements
                    if child.body[0].lineno <= n <= (child.end_lineno or n) and n not in inner
                }
                found.append(FunctionReach(name, child.lineno, len(body), len(body & ran)))
                visit(child, f"{name}.")

    visit(ast.parse(source), "")
    return found


def _nested_lines(function: ast.FunctionDef | ast.AsyncFunctionDef) -> set[int]:
    """The bodies of the functions and classes defined inside `function` (their `def` and
    `class` lines run with it)."""
    lines: set[int] = set()
    for node in ast.walk(function):
        if node is not function and isinstance(
            node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
        ):
            lines.update(range(node.body[0].lineno, (node.end_lineno or node.lineno) + 1))
    return lines


def vllm_root(workspace: Workspace, env_path: Path) -> Path:
    """A branch's `vllm/` as its probes imported it: the environment's overlay (the base's own
    where the environment has none)."""
    overlay = env_path / "overlay" / "vllm"
    return overlay if overlay.is_dir() else workspace.base.vllm_dir
