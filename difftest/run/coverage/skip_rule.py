"""The gate's skip rule outside the stats path: a head may be skipped only when none of the code it
changes can run in the selected scenarios on the base.

A change under `config.stats_paths` is always measured (the table is an explicit override). A file
whose syntax tree is unchanged (comments, blank lines, layout) cannot change a run. For the rest,
the base's probes are run traced over all of `vllm/` (results from and to the result cache, like
`difftest coverage`), and each changed Python file is checked by scope, not by line: a changed
line inside a function (as the base numbers it; an insertion counts the lines on both sides of it)
is measured when any statement of that function ran on the base, a changed line outside every
function (module or class level, a `def` or decorator line) when the module ran at all. Checking
the scope rather than the line itself keeps a change next to a comment, an `else:` turned `elif`,
a new `except` clause or an uncommented line from being cleared by the line's own silence.
Everything that cannot be vouched for is measured: a changed file under `vllm/` that is not
Python (deleted or not), an added Python file (a `try: import` or a folder scan may load it with
no edit elsewhere), a base whose coverage is unknown or partial, a base that resolved to another
commit than the diff's, and any selection with a suite tier (the tests tier: the base's map is
drawn from probes only, never from a test session, whose tests the head may change too).
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from difftest.build.gate_changes import HeadChanges
from difftest.build.refs.diff import Change, changed_lines, read_blob
from difftest.core.coverage import line_ranges
from difftest.core.errors import DifftestError
from difftest.run.coverage.changed import Executed
from difftest.run.coverage.reach import functions_of


@dataclass(frozen=True)
class SkipCheck:
    """Whether the gate may skip, and the clause that says what was checked (or why it
    measures)."""

    skip: bool
    why: str


@dataclass(frozen=True)
class BaseTrace:
    """The base's traced run: what its probes executed, and where it came from."""

    executed: Executed
    #: The tiers whose probes were traced, and the scenarios they ran.
    tiers: list[str]
    scenarios: int
    #: The base's `vllm/` folder, as its probes imported it, and the commit it was built from.
    root: Path
    sha: str


#: Runs the base traced (`run.traced`); raises DifftestError when it cannot.
TraceBase = Callable[[], BaseTrace]


def check_skip(
    head: HeadChanges, base_name: str, trace_base: TraceBase, untraced_tiers: list[str]
) -> SkipCheck:
    """Whether a head that changes nothing on the stats path may be skipped (see the module)."""
    vllm = [c for c in head.changes if c.path.startswith("vllm/")]
    if untraced_tiers and any(c.path.startswith(("vllm/", "tests/")) for c in head.changes):
        tiers = ", ".join(untraced_tiers)
        why = f"the {tiers} tier is selected: the base's map holds no test session"
        return SkipCheck(False, f"{why}, so cannot clear it")
    if not vllm:
        return SkipCheck(True, "changes no file under vllm/")
    other = [c.path for c in vllm if not c.path.endswith(".py")]
    if other:
        return SkipCheck(False, f"{other[0]} is not Python: what runs of it cannot be told")
    added = [c.path for c in vllm if c.status == "A"]
    if added:
        return SkipCheck(False, f"it adds {added[0]}, which an import elsewhere may load")
    code = [c for c in vllm if c.status != "M" or not _layout_only(head, c.path)]
    if not code:
        return SkipCheck(True, "changes only comments and layout in vllm/ (the same syntax tree)")
    try:
        base = trace_base()
    except DifftestError as exc:
        return SkipCheck(False, f"the base's coverage could not be had ({exc.problem})")
    if base.sha != head.base_sha:
        return SkipCheck(False, f"the base resolved to {base.sha[:12]}, not {head.base_sha[:12]}")
    executed = base.executed
    if executed.unknown or not executed.traced_probes:
        why = executed.unknown[0] if executed.unknown else "no probe was traced"
        return SkipCheck(False, f"the base's coverage is unknown ({why})")
    for change in code:
        ran = _ran(head, change, executed, base.root)
        if ran:
            return SkipCheck(False, ran.replace("{base}", base_name))
    shown = ", ".join(c.path for c in code[:4]) + (
        f" and {len(code) - 4} more" if len(code) > 4 else ""
    )
    return SkipCheck(
        True,
        f"none of the code it changes in {shown} ran on {base_name} in {base.scenarios} "
        f"scenario(s) of the {', '.join(base.tiers)} tier(s)",
    )


def _layout_only(head: HeadChanges, path: str) -> bool:
    """Whether both sides parse to the same syntax tree: only comments, blank lines or layout
    changed, which no run can tell apart."""
    try:
        before, after = (
            ast.parse(read_blob(head.repo, sha, path)) for sha in (head.base_sha, head.head_sha)
        )
    except (SyntaxError, ValueError, DifftestError):
        return False
    return ast.dump(before) == ast.dump(after)


def _ran(head: HeadChanges, change: Change, executed: Executed, root: Path) -> str:
    """Why `change` must be measured ("" when no scope it touches ran on the base); `{base}`
    stands for the base's name."""
    ran = executed.lines.get(change.path, set())
    if change.status == "D":
        return f"it deletes {change.path}, which ran on {{base}}" if ran else ""
    try:
        source = (root.parent / change.path).read_text(encoding="utf-8").removeprefix("\ufeff")
        scopes = _function_bodies(ast.parse(source))
        lines = changed_lines(head.repo, head.head_sha, head.base_sha, change.path)
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError, DifftestError) as exc:
        return f"{change.path} could not be checked on {{base}} ({type(exc).__name__})"
    for n in sorted(lines):
        inside = [s for s in scopes if s[0] <= n <= s[1]]
        if not inside:
            if ran:
                return (
                    f"{change.path} line {n} is module-level code of a module that ran on {{base}}"
                )
            continue
        first, last, name = max(inside, key=lambda s: s[0])  # the innermost
        entered = sorted(x for x in ran if first <= x <= last)
        if entered:
            return (
                f"{change.path} line {n} is in {name}, which ran on {{base}} (lines "
                f"{line_ranges(entered[:6])})"
            )
    return ""


def _function_bodies(tree: ast.AST) -> list[tuple[int, int, str]]:
    """(first line of the body, last line, qualified name) of every function, however nested."""
    return [
        (node.body[0].lineno, node.end_lineno or node.lineno, name)
        for name, node in functions_of(tree)
    ]
