"""The data a suite-measured tier passes between layers: which tests come from where, how they are
grouped into pytest sessions, and what each branch's code did with each test.

The tests tier decides (pure: `tiers.tests`), the run layer executes pytest-xdist
sessions (`run.suites.measure`), and the outcomes come back as `RawOutcome`s keyed by the
code branch that ran them; judged, they become `TestRecord`s in the evidence.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from difftest.core.records import TestOutcome

#: The label of the source holding the configured selection, run from the baseline's tree.
UPSTREAM = "upstream"


def source_label(branch: str) -> str:
    """The label of the tests a branch adds or changes."""
    return f"from:{branch}"


@dataclass(frozen=True)
class ChangedFile:
    """A file under `tests/` that a branch changes relative to its merge base with the baseline."""

    status: Literal["A", "M", "D"]
    path: str
    #: Text at the merge base (None when added); text on the branch (None when deleted).
    old: str | None
    new: str | None


@dataclass(frozen=True)
class BranchTests:
    """One branch's commit and what it changes under `tests/`."""

    name: str
    sha: str
    changes: list[ChangedFile] = field(default_factory=list)


@dataclass(frozen=True)
class TestSource:
    """A group of tests judged together: the selection (`upstream`) or one branch's own tests."""

    __test__ = False  # not a pytest test class, despite the name

    label: str
    #: The branch whose tree holds the tests, and its commit.
    origin: str
    sha: str
    #: pytest arguments: paths or node ids relative to the repository root.
    tests: tuple[str, ...]
    keyword: str | None = None
    #: Can its tests be copied into the baseline's tree (they changed only test modules)?
    graftable: bool = False
    #: Branches whose test changes are identical to this one's.
    same_as: tuple[str, ...] = ()
    note: str = ""


@dataclass(frozen=True)
class SuiteSession:
    """One pytest-xdist session: one test tree, every branch's code as a worker."""

    name: str
    #: The commit whose `tests/` the session runs from, plus copies of other commits' files.
    sha: str
    grafts: dict[str, tuple[str, str]]
    #: pytest arguments selecting the tests, `-k` and `--deselect` included.
    args: list[str]
    #: Node ids of grafted modules that may run (every other test of a grafted copy is left out).
    allowed_grafts: list[str]
    #: Path of a file in this session's tree -> (source label, path in the source's own tree).
    owners: dict[str, tuple[str, str]]
    #: The source of every test whose file is not in `owners`.
    default_source: str
    #: The branch whose tree this is: its environment is the controller, which imports the tree's
    #: `conftest.py` (a branch that changes it may need its own code to import it).
    origin: str = ""


@dataclass(frozen=True)
class SuitePlan:
    sources: list[TestSource]
    sessions: list[SuiteSession]


@dataclass(frozen=True)
class RawOutcome:
    """What one branch's code did with one test, as read from a session's JUnit report."""

    source: str
    code: str
    test: str
    outcome: TestOutcome
    message: str = ""
    duration_s: float = 0.0
