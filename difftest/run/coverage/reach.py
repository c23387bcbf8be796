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
    """Every Python file of the stats path (`vllm/...`; `parts`: the config's `stats_paths`)
    under `vllm_root`'s parent, sorted."""
    top = vllm_root.parent
    found: set[str] = set()
    for part in parts if parts is not None else [p.path for p in STATS_PATH]:
        target = top / part
        if part.endswith("/"):
            found.update(str(p.relative_to(top)) for p in target.rglob("*.py"))
        elif target.is_file() and part.endswith(".py"):
            found.add(part)
    return sorted(found)


def reach_of(
    vllm_root: Path, executed: Executed, files: Iterable[str], parts: Iterable[str] | None = None
) -> list[FileReach]:
    """Each of `files` (`vllm/...`), read from `vllm_root`'s parent, against `executed`; a file
    that cannot be read or parsed is named with its problem (never left out silently)."""
    top = vllm_root.parent
    chosen = list(parts) if parts is not None else [p.path for p in STATS_PATH]
    found = []
    for path in files:
        try:
            blob = (top / path).read_bytes()
        except OSError as exc:
            found.append(
                FileReach(
                    file=path,
                    part=part_of(path, chosen),
                    problem=f"could not be read ({exc.strerror or type(exc).__name__})",
                )
            )
            continue
        found.append(_file(path, blob, executed, part_of(path, chosen)))
    return found


def part_of(path: str, parts: Iterable[str]) -> str:
    """The stats-path part (a file, or a folder ending in `/`) a file belongs to."""
    for part in parts:
        if path == part or (part.endswith("/") and path.startswith(part)):
            return part
    return ""


def _file(path: str, blob: bytes, executed: Executed, part: str) -> FileReach:
    reach = FileReach(file=path, part=part)
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


#: A function or method node, as `functions_of` lists them.
Function = ast.FunctionDef | ast.AsyncFunctionDef


def functions_of(tree: ast.AST) -> list[tuple[str, Function]]:
    """(qualified name, node) of every function and method, wherever it is defined (under an `if`,
    a `try`, a class, another function), in source order."""
    found: list[tuple[str, Function]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                found.append((name, child))
                visit(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(tree, "")
    return found


def _functions(source: str, statements: set[int], ran: set[int]) -> list[FunctionReach]:
    """Every function with its own statements: not those of a function or class defined inside
    it, not its `def` line (which runs when its module or outer function does)."""
    found: list[FunctionReach] = []
    for name, node in functions_of(ast.parse(source)):
        inner = _nested_lines(node)
        first, last = node.body[0].lineno, node.end_lineno or node.lineno
        body = {n for n in statements if first <= n <= last and n not in inner and n != node.lineno}
        found.append(FunctionReach(name, node.lineno, len(body), len(body & ran)))
    return found


def _nested_lines(function: Function) -> set[int]:
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
