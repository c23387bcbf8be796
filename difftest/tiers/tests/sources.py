"""Which tests each branch brings, and how all of them share as few pytest sessions as possible.

A branch's tests are the test functions (or `Test*` classes) it adds or changes
in test modules, relative to its merge base with the baseline: both versions of
each changed module are parsed, and a function counts as changed when its syntax
tree differs (comments and formatting do not count). A change outside the tests
of a module (imports, helpers, fixtures, constants) may change any of them, so
the whole module is the branch's then.

Every session costs one interpreter per branch importing torch and vLLM, so the
plan keeps sessions few: the configured selection runs from the baseline's tree
("upstream"), and a branch that changed only test modules has those modules
copied into the same tree under new names (`test_x__difftest1.py`, same folder,
so their relative imports resolve to the same helpers). A branch that changed
helpers, conftest files or data under `tests/`, or deleted files, gets a session
on its own tree, where those changes are in effect.
"""

from __future__ import annotations

import ast
import re
from pathlib import PurePosixPath

from difftest.core.suites import (
    UPSTREAM,
    BranchTests,
    SuitePlan,
    SuiteSession,
    TestSource,
    source_label,
)
from difftest.probe.tests.contract import GRAFT_MARK

TESTS_DIR = "tests/"
#: pytest's default `python_files`.
_TEST_MODULE = re.compile(r"^(test_.*|.*_test)\.py$")
SHARED = "shared"


def is_test_module(path: str) -> bool:
    return path.startswith(TESTS_DIR) and bool(_TEST_MODULE.match(PurePosixPath(path).name))


def changed_tests(path: str, old: str | None, new: str) -> list[str]:
    """pytest arguments for the tests of module `path` that `new` adds or changes relative to
    `old`: node ids of changed test functions/classes, or the module itself when the change may
    alter them all."""
    new_units = _units(new)
    old_units = _units(old) if old is not None else None
    if new_units is None or old_units is None or not _only_added(old_units[0], new_units[0]):
        return [path]
    old_tests = old_units[1]
    return [f"{path}::{name}" for name, tree in new_units[1].items() if old_tests.get(name) != tree]


def _units(text: str) -> tuple[list[ast.stmt], dict[str, str]] | None:
    """(the module's statements other than tests, {test name: its syntax tree}); None if it does not
    parse."""
    try:
        module = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    tests: dict[str, str] = {}
    rest: list[ast.stmt] = []
    for node in module.body:
        name = _test_name(node)
        if name is not None:
            tests[name] = ast.dump(node)
        else:
            rest.append(node)
    return rest, tests


def _test_name(node: ast.stmt) -> str | None:
    """The name of a test function or test class (what pytest collects), else None."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
        return node.name
    if isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
        return node.name
    return None


def _only_added(old: list[ast.stmt], new: list[ast.stmt]) -> bool:
    """Whether `new` keeps every non-test statement of `old` as it was and only adds inert ones
    (imports, helper functions and classes, constants): then the existing tests run as before.
    A changed or removed helper, a new `pytestmark` or autouse fixture, or new module-level code
    may change any test, and the whole module is the branch's."""
    remaining = [ast.dump(node) for node in new]
    for node in old:
        dumped = ast.dump(node)
        if dumped not in remaining:
            return False
        remaining.remove(dumped)
    added = [node for node in new if ast.dump(node) in remaining]
    return all(_inert(node) for node in added)


def _inert(node: ast.stmt) -> bool:
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return True
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return not any("autouse" in ast.unparse(d) for d in node.decorator_list)
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return all(isinstance(t, ast.Name) and t.id != "pytestmark" for t in targets)
    return False


def branch_source(branch: BranchTests, select: list[str], keyword: str | None) -> TestSource | None:
    """The tests `branch` brings, or None when it changes no test (or only removes some)."""
    under = [c for c in branch.changes if c.path.startswith(TESTS_DIR)]
    tests: list[str] = []
    for change in under:
        if is_test_module(change.path) and change.new is not None:
            tests += changed_tests(change.path, change.old, change.new)
    others = sorted(c.path for c in under if not is_test_module(c.path) or c.status == "D")
    note = ""
    if others:
        shown = ", ".join(others[:4]) + (" ..." if len(others) > 4 else "")
        note = (
            f"changes test files other than test modules ({shown}): its tests run from its own tree"
        )
    if not tests:
        if not others:
            return None
        return TestSource(
            label=source_label(branch.name),
            origin=branch.name,
            sha=branch.sha,
            tests=tuple(select),
            keyword=keyword,
            note=note + "; it changes no test, so the selection runs from its tree",
        )
    return TestSource(
        label=source_label(branch.name),
        origin=branch.name,
        sha=branch.sha,
        tests=tuple(tests),
        graftable=not others,
        note=note,
    )


def plan(
    baseline: BranchTests,
    branches: list[BranchTests],
    select: list[str],
    keyword: str | None,
    deselect: list[str],
) -> SuitePlan:
    """The sources (upstream, then each branch's own tests, identical ones merged) and the
    sessions."""
    upstream = TestSource(
        label=UPSTREAM, origin=baseline.name, sha=baseline.sha, tests=tuple(select), keyword=keyword
    )
    sources = [upstream]
    seen: dict[tuple, int] = {}
    for branch in branches:
        if branch.name == baseline.name:
            continue
        source = branch_source(branch, select, keyword)
        if source is None:
            continue
        identity = tuple(
            sorted(
                (c.path, c.status, c.new) for c in branch.changes if c.path.startswith(TESTS_DIR)
            )
        )
        if identity in seen:
            first = sources[seen[identity]]
            sources[seen[identity]] = _with_alias(first, branch.name)
            continue
        seen[identity] = len(sources)
        sources.append(source)
    return SuitePlan(sources=sources, sessions=_sessions(upstream, sources[1:], deselect))


def _with_alias(source: TestSource, branch: str) -> TestSource:
    return TestSource(**{**source.__dict__, "same_as": (*source.same_as, branch)})


def _sessions(
    upstream: TestSource, others: list[TestSource], deselect: list[str]
) -> list[SuiteSession]:
    grafted = [s for s in others if s.graftable]
    grafts: dict[str, tuple[str, str]] = {}
    owners: dict[str, tuple[str, str]] = {}
    allowed: list[str] = []
    graft_deselect: list[str] = []
    for number, source in enumerate(grafted, 1):
        for test in source.tests:
            original, sep, rest = test.partition("::")
            copy = graft_path(original, number)
            grafts[copy] = (source.sha, original)
            owners[copy] = (source.label, original)
            allowed.append(copy + sep + rest)
        graft_deselect += [
            graft_path(d.split("::")[0], number) + d[len(d.split("::")[0]) :]
            for d in deselect
            if d.split("::")[0] in {t.split("::")[0] for t in source.tests}
        ]
    keyword = upstream.keyword
    if keyword and grafted:
        keyword = f"({keyword}) or {GRAFT_MARK}"
    shared = SuiteSession(
        name=SHARED,
        sha=upstream.sha,
        grafts=grafts,
        args=_args([*upstream.tests, *allowed], keyword, [*deselect, *graft_deselect]),
        allowed_grafts=allowed,
        owners=owners,
        default_source=UPSTREAM,
        origin=upstream.origin,
    )
    sessions = [shared]
    for source in others:
        if source.graftable:
            continue
        sessions.append(
            SuiteSession(
                name=f"tree-{len(sessions)}",
                sha=source.sha,
                grafts={},
                args=_args(list(source.tests), source.keyword, deselect),
                allowed_grafts=[],
                owners={},
                default_source=source.label,
                origin=source.origin,
            )
        )
    return sessions


def graft_path(path: str, number: int) -> str:
    """Where a branch's copy of test module `path` goes: same folder, a name pytest still
    collects."""
    pure = PurePosixPath(path)
    stem = pure.stem
    if stem.endswith("_test") and not stem.startswith("test_"):
        name = f"{stem[: -len('_test')]}{GRAFT_MARK}{number}_test.py"
    else:
        name = f"{stem}{GRAFT_MARK}{number}.py"
    return str(pure.with_name(name))


def _args(tests: list[str], keyword: str | None, deselect: list[str]) -> list[str]:
    args = list(dict.fromkeys(tests))
    if keyword:
        args += ["-k", keyword]
    for item in deselect:
        args += ["--deselect", item]
    return args
