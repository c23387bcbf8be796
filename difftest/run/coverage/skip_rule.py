"""The gate's skip rule outside the stats path: a head may be skipped only when none of the lines it
changes is executed by the selected scenarios on the base.

A change under `config.stats_paths` is always measured (the table is an explicit override). A file
whose syntax tree is unchanged (comments, blank lines, layout) cannot change a run. For the rest,
the base's probes are run traced over all of `vllm/` (results from and to the result cache, like
`difftest coverage`), and each changed file is checked: a Python file whose changed lines (as the
base numbers them, a pure insertion counting the lines on both sides of it) include a statement the
base's runs executed, a deleted file the runs executed, a changed file that is not Python (what
runs of it cannot be told), or a base whose coverage is unknown, all mean "measure". An added file
cannot run on the base; only an edit to a file that does would import it, and that edit is checked.
Probe tiers are traced; the tests tier's sessions are not, which the skip line says.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from coverage.exceptions import CoverageException
from coverage.parser import PythonParser

from difftest.build.gate_changes import HeadChanges
from difftest.build.refs.diff import Change, changed_lines, read_blob
from difftest.core.coverage import line_ranges
from difftest.core.errors import DifftestError
from difftest.run.coverage.changed import Executed

#: What the base is traced over to decide.
TRACED = ("vllm/",)


@dataclass(frozen=True)
class SkipCheck:
    """Whether the gate may skip, and the line that says what was checked (or what ran)."""

    skip: bool
    why: str


#: Runs the base traced (`run.traced`): what its probes executed, the tiers traced, the scenarios
#: run, the base's `vllm/` folder.
TraceBase = Callable[[], tuple[Executed, list[str], int, Path]]


def check_skip(head: HeadChanges, base_name: str, trace_base: TraceBase) -> SkipCheck:
    """Whether a head that changes nothing on the stats path may be skipped (see the module)."""
    vllm = [c for c in head.changes if c.path.startswith("vllm/")]
    if not vllm:
        return SkipCheck(True, "changes no file under vllm/")
    other = [c.path for c in vllm if not c.path.endswith(".py") and c.status != "D"]
    if other:
        return SkipCheck(False, f"changes {other[0]}, not Python: what runs of it cannot be told")
    code = [c for c in vllm if c.status != "M" or not _layout_only(head, c.path)]
    if not code:
        return SkipCheck(True, "changes only comments and layout in vllm/ (the same syntax tree)")
    executed, tiers, scenarios, root = trace_base()
    if executed.unknown or not executed.traced_probes:
        why = executed.unknown[0] if executed.unknown else "no probe was traced"
        return SkipCheck(False, f"the base's coverage is unknown ({why})")
    for change in code:
        ran = _changed_and_run(head, change, executed, root)
        if ran:
            return SkipCheck(False, f"{change.path} {ran} ran on {base_name}")
    added = [c.path for c in code if c.status == "A"]
    checked = [c.path for c in code if c.status != "A"]
    parts = []
    if checked:
        parts.append(
            f"none of its changed lines in {', '.join(checked[:4])}"
            + (f" and {len(checked) - 4} more" if len(checked) > 4 else "")
            + f" ran on {base_name} in {scenarios} scenario(s) of the {', '.join(tiers)} tier(s)"
            " (the tests tier's sessions are not traced)"
        )
    if added:
        parts.append(f"it adds {', '.join(added[:4])}, which nothing on {base_name} imports")
    return SkipCheck(True, "; ".join(parts))


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


def _changed_and_run(head: HeadChanges, change: Change, executed: Executed, root: Path) -> str:
    """The changed lines (base numbering) the base's runs executed, as `line 12-14`; "" if none."""
    ran = executed.lines.get(change.path, set())
    if change.status == "A":
        return ""
    if change.status == "D":
        return f"(deleted; lines {line_ranges(ran)})" if ran else ""
    try:
        source = (root.parent / change.path).read_text(encoding="utf-8")
        parser = PythonParser(text=source, filename=change.path)
        parser.parse_source()
        lines = changed_lines(head.repo, head.head_sha, head.base_sha, change.path)
    except (OSError, UnicodeDecodeError, CoverageException, SyntaxError, DifftestError) as exc:
        return f"(could not be checked: {type(exc).__name__}; measured to be safe)"
    hit = {parser.first_line(n) for n in lines if n > 0} & parser.translate_lines(ran)
    return f"lines {line_ranges(hit)}" if hit else ""
