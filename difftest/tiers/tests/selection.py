"""The tests tier's one scenario: the selection of the repository's tests, from `branches.yaml`.

It is the unit `verify` re-checks (its hash covers the selection) and the row
of the verdict grid; each test source (`upstream`, `from:<branch>`) is one run
label of it, so a branch's verdict reads per source.
"""

from __future__ import annotations

import difflib
import hashlib
import json
from pathlib import PurePosixPath

from difftest.core.config import TestsSpec
from difftest.core.errors import ConfigError
from difftest.tiers.base import BaselineTree
from difftest.tiers.common.scenario import ScenarioIdentity

NAME = "repo-tests"
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
    """`tests.select` entries whose file or folder is not in the baseline's tree, refused before
    anything is built (they would collect nothing: "0 test(s)" after every environment's build).
    A baseline without `tests/` is left to the tier, which reads it as could not measure."""
    if not tree.exists("tests"):
        return
    missing = [item for item in selection.select if not tree.exists(item.split("::", 1)[0])]
    if not missing:
        return
    named = "; ".join(_with_closest(item, tree) for item in missing)
    raise ConfigError(
        f"tests.select: {named}: no such file or folder in the baseline {tree.label}",
        "fix the path in the `tests:` section of branches.yaml (relative to the repository root, "
        "e.g. tests/v1/core/test_scheduler.py); tests a branch adds run anyway, from its own tree",
    )


def _with_closest(item: str, tree: BaselineTree) -> str:
    """`item`, and the closest existing name in the deepest folder of its path that exists."""
    path = PurePosixPath(item.split("::", 1)[0])
    folder = path.parent
    while str(folder) not in ("", ".") and not tree.exists(str(folder)):
        folder = folder.parent
    names = tree.names_in("" if str(folder) == "." else str(folder))
    depth = len(folder.parts) if str(folder) != "." else 0
    wanted = path.parts[depth] if depth < len(path.parts) else path.name
    close = difflib.get_close_matches(wanted, names, n=1, cutoff=0.6)
    if not close:
        return repr(item)
    prefix = "" if str(folder) == "." else f"{folder}/"
    return f"{item!r} (did you mean {prefix + close[0]!r}?)"
