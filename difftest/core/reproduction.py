"""Does a re-run reproduce an evidence file? Everything a verdict rests on, compared.

`difftest verify` re-runs what an evidence file records and hands both to
`evidence_differences`. A verdict rests on more than itself: the measured
totals, the oracle's expected totals, the differences and violations derived
from them, and the raw probe runs (reference runs included, which are not
judged but choose where the others are cut). Each of them is compared, so an
edited file is caught wherever it was edited.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from typing import Any, TypeVar

from pydantic import BaseModel

from difftest.core.evidence import (
    SCHEMA_VERSION,
    BranchCoverage,
    ChangedFileCoverage,
    Evidence,
)
from difftest.core.records import ProbeRun, Result, TestRecord

#: Fields of a result that must be identical in a re-run (the error text is not: it may quote
#: timings or a log line; whether it is an error is the verdict's business).
RESULT_FIELDS = ("verdict", "measured", "expected", "differences", "violations")


def result_key(result: Result) -> tuple[str, str, str]:
    return (result.branch, result.scenario, result.label)


def evidence_differences(
    recorded: Evidence, rerun: Evidence, written_as: str = SCHEMA_VERSION
) -> list[str]:
    """One line per thing that differs: per (branch, scenario, run) result field, then per raw run;
    `written_as` is the recorded file's own schema version (`evidence.written_version`)."""
    ignored = _not_recorded(written_as)
    return (
        _result_differences(recorded.results, rerun.results, ignored)
        + _run_differences(recorded.runs or {}, rerun.runs or {})
        + _test_differences(recorded.tests, rerun.tests)
        + _coverage_differences(recorded, rerun, written_as)
    )


#: What a changed file's coverage is judged on: each must be the same in a re-run.
COVERAGE_FIELDS = ("status", "lines", "reached", "unreached", "arcs_missing")


def _coverage_differences(recorded: Evidence, rerun: Evidence, written_as: str) -> list[str]:
    """Each branch's changed-line coverage, file by file and in its word (schema 13 on: earlier
    files hold none). A re-run that reaches other lines, or cannot vouch for them, differs."""
    if int(written_as) < 13 or recorded.coverage is None:
        return []
    if rerun.coverage is None:
        return ["coverage: recorded, but the re-run traced nothing"]
    before: dict[Key, ChangedFileCoverage] = {
        ("coverage", c.branch, c.file): c for c in recorded.coverage.changed
    }
    after: dict[Key, ChangedFileCoverage] = {
        ("coverage", c.branch, c.file): c for c in rerun.coverage.changed
    }

    def changes(old: Any, new: Any) -> list[str]:
        return [
            f"{name} {_short(getattr(old, name))} -> {_short(getattr(new, name))}"
            for name in COVERAGE_FIELDS
            if getattr(old, name) != getattr(new, name)
        ]

    words: dict[Key, BranchCoverage] = {
        ("coverage", b.branch): b for b in recorded.coverage.branches
    }
    rewords: dict[Key, BranchCoverage] = {
        ("coverage", b.branch): b for b in rerun.coverage.branches
    }
    return _keyed(before, after, "changed file ", changes) + _keyed(
        words,
        rewords,
        "branch ",
        lambda old, new: [f"{old.status} -> {new.status}"] if old.status != new.status else [],
    )


def _not_recorded(version: str) -> AbstractSet[str]:
    """Violation fields a file of schema `version` could not hold (their upgrade left a default)."""
    return {"requests"} if version in ("1", "2") else set()


Key = tuple[str, ...]
T = TypeVar("T")


def _keyed(
    before: dict[Key, T], after: dict[Key, T], what: str, changes: Callable[[T, T], list[str]]
) -> list[str]:
    """`where: ...` for every key only one side has, and for each change `changes(old, new)`
    names."""
    found = []
    for key in sorted(set(before) | set(after)):
        old, new = before.get(key), after.get(key)
        where = "/".join(key)
        if old is None or new is None:
            found.append(f"{where}: {what}{'not in the evidence' if old is None else 'not re-run'}")
        else:
            found += [f"{where}: {change}" for change in changes(old, new)]
    return found


def _result_differences(
    recorded: list[Result], rerun: list[Result], ignored: AbstractSet[str] = frozenset()
) -> list[str]:
    def changes(old: Result, new: Result) -> list[str]:
        out = []
        for name in RESULT_FIELDS:
            then, now = _plain(getattr(old, name)), _plain(getattr(new, name))
            if name == "violations" and ignored:
                now = [
                    {k: v for k, v in violation.items() if k not in ignored} for violation in now
                ]
                then = [
                    {k: v for k, v in violation.items() if k not in ignored} for violation in then
                ]
            if (
                name == "violations"
            ):  # how long something took is part of a reason, never reproducible
                now, then = _untimed(now), _untimed(then)
            if then != now:
                out.append(f"{_label(name)} differ: {_short(then)} -> {_short(now)}")
        return out

    return _keyed(
        {result_key(r): r for r in recorded}, {result_key(r): r for r in rerun}, "", changes
    )


#: A duration in a violation's detail ("... completes this run in 0.49 s",
#: "exits cleanly, in 7.5 s").
_DURATION = re.compile(r"\bin \d+(?:\.\d+)? s\b")


def _untimed(violations: Any) -> Any:
    """Violations with the durations in their details blanked: a re-run takes other times."""
    if not isinstance(violations, list):
        return violations
    return [
        {**v, "detail": _DURATION.sub("in … s", str(v.get("detail", "")))}
        if isinstance(v, dict)
        else v
        for v in violations
    ]


def _run_differences(
    recorded: dict[str, list[ProbeRun]], rerun: dict[str, list[ProbeRun]]
) -> list[str]:
    """The raw runs' status and totals, per branch (runs of branches not re-run are reported
    above)."""

    def changes(old: ProbeRun, new: ProbeRun) -> list[str]:
        if (old.status, _plain(old.totals)) == (new.status, _plain(new.totals)):
            return []
        return [
            f"raw run totals differ: {old.status} {_short(_plain(old.totals))} -> "
            f"{new.status} {_short(_plain(new.totals))}"
        ]

    both = sorted(set(recorded) & set(rerun))
    return _keyed(
        {(b, r.scenario, r.label): r for b in both for r in recorded[b]},
        {(b, r.scenario, r.label): r for b in both for r in rerun[b]},
        "raw run ",
        changes,
    )


def _test_differences(recorded: list[TestRecord], rerun: list[TestRecord]) -> list[str]:
    """The tests tier: every (code branch, test source, test) whose outcome or judgement changed, or
    that only one side has."""

    def changes(old: TestRecord, new: TestRecord) -> list[str]:
        if (old.outcome, old.judgement) == (new.outcome, new.judgement):
            return []
        return [f"test outcome {old.outcome} ({old.judgement}) -> {new.outcome} ({new.judgement})"]

    return _keyed(
        {(r.code, r.source, r.test): r for r in recorded},
        {(r.code, r.source, r.test): r for r in rerun},
        "test ",
        changes,
    )


def _plain(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _label(name: str) -> str:
    return {
        "measured": "measured totals",
        "expected": "expected totals",
        "verdict": "verdicts",
    }.get(name, name)


def _short(value: Any, limit: int = 200) -> str:
    text = str(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
