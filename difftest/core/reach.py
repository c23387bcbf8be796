"""What the scenarios reach of one stats-path file (`difftest coverage`): the figures the reports
render, computed in `run.coverage.reach`."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class FunctionReach:
    """One function or method: its qualified name, where it starts, its statements and those
    executed."""

    name: str
    line: int
    statements: int
    reached: int


@dataclass
class FileReach:
    """One stats-path file of the branch."""

    file: str
    part: str
    statements: int = 0
    reached: list[int] = field(default_factory=list)
    unreached: list[int] = field(default_factory=list)
    #: Branch points executed but left one way only: (from, to) arcs no run took.
    partial: list[tuple[int, int]] = field(default_factory=list)
    functions: list[FunctionReach] = field(default_factory=list)
    #: Why nothing (or not everything) of it ran, where known; "" when every statement ran.
    reason: str = ""
    #: Why it could not be analysed ("" when it was).
    problem: str = ""

    @property
    def imported(self) -> bool:
        return bool(self.reached)
