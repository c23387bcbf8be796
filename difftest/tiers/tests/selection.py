"""The tests tier's one scenario: the selection of the repository's tests, from `branches.yaml`.

It is the unit `verify` re-checks (its hash covers the selection) and the row
of the verdict grid; each test source (`upstream`, `from:<branch>`) is one run
label of it, so a branch's verdict reads per source.
"""

from __future__ import annotations

import hashlib
import json

from difftest.core.config import TestsSpec
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
