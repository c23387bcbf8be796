"""The tests tier's one scenario: the selection of the repository's tests, from `branches.yaml`.

It is the unit `verify` re-checks (its hash covers the selection) and the row
of the verdict grid; each test source (`upstream`, `from:<branch>`) is one run
label of it, so a branch's verdict reads per source.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import posixpath
from pathlib import PurePosixPath

from difftest.core.config import DEFAULT_TEST_SELECT, TestsSpec
from difftest.core.errors import ConfigError
from difftest.tiers.base import BaselineTree
from difftest.tiers.common.scenario import ScenarioIdentity

NAME = "repo-tests"
#: The only folder of a commit the tests tier runs pytest in (`build.tests.trees`).
TESTS = "tests"
STATEMENT = (
    "the repository's own tests (the selection) and each branch's new or changed tests, "
    "on every branch's code"
)


class TestSelection(ScenarioIdentity):
    """Which tests run (pytest arguments relative to the repository root)."""

    __test__ = False  # not a pytest test class, despite the name

    select: list[str]
    keyword: str | None = None
    deselect: list[str] = []
    requirements: list[str] = []


def selection_from(spec: TestsSpec) -> TestSelection:
    """The scenario for a config's `tests:` section (or the default one)."""
    data = spec.model_dump()
    return TestSelection(
        name=NAME,
        statement=STATEMENT,
        file="branches.yaml#tests",
        sha256=hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest(),
        **data,
    )


def refuse_paths_naming_nothing(selection: TestSelection, tree: BaselineTree) -> None:
    """`tests.select` entries that name nothing pytest can collect in the baseline's test tree
    (its `tests/` folder: no file or folder there), refused before anything is built: they would
    collect nothing, "0 test(s)" after every environment's build. A baseline without `tests/` is
    left to the tier, which reads it as could not measure."""
    if not tree.exists(TESTS):
        return
    outside = [item for item in selection.select if not _in_tests(_path_of(item))]
    missing = [
        item for item in selection.select if item not in outside and not tree.exists(_path_of(item))
    ]
    default = selection.select == DEFAULT_TEST_SELECT
    where = (
        "difftest's default selection (there is no `tests:` section)"
        if default
        else "the `tests:` section of branches.yaml"
    )
    if outside:
        raise ConfigError(
            f"tests.select: {'; '.join(_with_closest(item, tree) for item in outside)}: not under "
            f"{TESTS}/, the only folder the tests tier runs pytest in",
            f"name files or folders under {TESTS}/ in {where}",
        )
    if missing:
        named = "; ".join(_with_closest(item, tree) for item in missing)
        raise ConfigError(
            f"tests.select: {named}: no such file or folder in the baseline {tree.label}",
            (
                "this baseline's tests differ from the release the default was written for: "
                "write a `tests:` section with a `select` of this vLLM's files"
                if default
                else f"correct the path in {where} (relative to the repository root, e.g. "
                "tests/v1/core/test_scheduler.py)"
            )
            + "; tests a branch adds run anyway, from its own tree",
        )


def _path_of(item: str) -> str:
    """The file or folder part of a pytest argument, as git names it (`./tests//a` is
    `tests/a`; `.` is the root)."""
    return posixpath.normpath(item.split("::", 1)[0])


def _in_tests(path: str) -> bool:
    return path in (".", TESTS) or path.startswith(TESTS + "/")


def _with_closest(item: str, tree: BaselineTree) -> str:
    """`item`, and the closest existing path: the first part of it that does not exist replaced
    by the closest name in its folder, the rest kept when that path exists."""
    parts = PurePosixPath(_path_of(item)).parts
    depth = 0
    while depth < len(parts) and tree.exists("/".join(parts[: depth + 1])):
        depth += 1
    if depth == len(parts):  # it exists (outside tests/)
        return repr(item)
    folder = "/".join(parts[:depth])
    close = difflib.get_close_matches(parts[depth], tree.names_in(folder), n=1, cutoff=0.6)
    if not close:
        return repr(item)
    corrected = "/".join([*parts[:depth], close[0]])
    whole = "/".join([corrected, *parts[depth + 1 :]])
    suggested = whole if tree.exists(whole) else corrected
    return f"{item!r} (did you mean {suggested!r}?)"
