"""Does a re-run reproduce an evidence file? Everything a verdict rests on, compared.

`difftest verify` re-runs what an evidence file records and hands both to
`evidence_differences`. A verdict rests on more than itself: the measured
totals, the oracle's expected totals, the differences and violations derived
from them, and the raw probe runs (reference runs included, which are not
judged but choose where the others are cut). Each of them is compared, so an
edited file is caught wherever it was edited.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from difftest.core.evidence import SCHEMA_VERSION, Evidence
from difftest.core.records import ProbeRun, Result, TestRecord

#: Fields of a result that must be identical in a re-run (the error text is not: it may quote
#: timings or a log line; whether it is an error is the verdict's business).
RESULT_FIELDS = ("verdict", "measured", "expected", "differences", "violations")


def result_key(result: Result) -> tuple[str, str, str]:
    return (result.branch, result.scenario, result.label)


def evidence_differences(recorded: Evidence, rerun: Evidence, written_as: str = SCHEMA_VERSION) -> list[str]:
    """One line per thing that differs: per (branch, scenario, run) result field, then per raw run;
    `written_as` is the recorded file's own schema version (`evidence.written_version`)."""
    ignored = _not_recorded(written_as)
    return (
        _result_differences(recorded.results, rerun.results, ignored)
        + _run_differences(recorded.runs or {}, rerun.runs or {})
        + _test_differences(recorded.tests, rerun.tests)
    )


def _not_recorded(version: str) -> set[str]:
    """Violation fields a file of schema `version` could not hold (their upgrade left a default)."""
    return {"requests"} if version in ("1", "2") else set()


def _result_differences(recorded: list[Result], rerun: list[Result], ignored: frozenset[str] | set[str] = frozenset()) -> list[str]:
    before = {result_key(r): r for r in recorded}
    after = {result_key(r): r for r in rerun}
    found = []
    for key in sorted(set(before) | set(after)):
        old, new = before.get(key), after.get(key)
        where = "/".join(key)
        if old is None or new is None:
            found.append(f"{where}: {'not in the evidence' if old is None else 'not re-run'}")
            continue
        for name in RESULT_FIELDS:
            then, now = _plain(getattr(old, name)), _plain(getattr(new, name))
            if name == "violations" and ignored:
                now = [{k: v for k, v in violation.items() if k not in ignored} for violation in now]
                then = [{k: v for k, v in violation.items() if k not in ignored} for violation in then]
            if then != now:
                found.append(f"{where}: {_label(name)} differ: {_short(then)} -> {_short(now)}")
    return found


def _run_differences(recorded: dict[str, list[ProbeRun]], rerun: dict[str, list[ProbeRun]]) -> list[str]:
    """The raw runs' status and totals, per branch (runs of branches not re-run are reported above)."""
    found = []
    for branch in sorted(set(recorded) & set(rerun)):
        before = {(r.scenario, r.label): r for r in recorded[branch]}
        after = {(r.scenario, r.label): r for r in rerun[branch]}
        for key in sorted(set(before) | set(after)):
            old, new = before.get(key), after.get(key)
            where = "/".join((branch, *key))
            if old is None or new is None:
                found.append(f"{where}: raw run {'not in the evidence' if old is None else 'not re-run'}")
            elif (old.status, _plain(old.totals)) != (new.status, _plain(new.totals)):
                found.append(
                    f"{where}: raw run totals differ: {old.status} {_short(_plain(old.totals))} -> "
                    f"{new.status} {_short(_plain(new.totals))}"
                )
    return found


def _test_differences(recorded: list[TestRecord], rerun: list[TestRecord]) -> list[str]:
    """The tests tier: every (code branch, test source, test) whose outcome or judgement changed, or
    that only one side has."""
    before = {(r.code, r.source, r.test): r for r in recorded}
    after = {(r.code, r.source, r.test): r for r in rerun}
    found = []
    for key in sorted(set(before) | set(after)):
        old, new = before.get(key), after.get(key)
        where = "/".join(key)
        if old is None or new is None:
            found.append(f"{where}: test {'not in the evidence' if old is None else 'not re-run'}")
        elif (old.outcome, old.judgement) != (new.outcome, new.judgement):
            found.append(f"{where}: test outcome {old.outcome} ({old.judgement}) -> {new.outcome} ({new.judgement})")
    return found


def _plain(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _label(name: str) -> str:
    return {"measured": "measured totals", "expected": "expected totals", "verdict": "verdicts"}.get(name, name)


def _short(value: Any, limit: int = 200) -> str:
    text = str(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
