"""Is a PR's head worse than its base? Pure comparison of two result lists.

Head is worse when:
- it is `broken` anywhere (lost stats or order dependence must never merge,
  even if the base is broken too);
- on some (scenario, run) the base passed and the head diverges or breaks;
- on some (scenario, run) a counter is further from the oracle than on the
  base (absolute distance; per-position lists compare by the sum of the
  element-wise distances; mean acceptance length with a float tolerance,
  and only when no counter already explains it, since it is derived);
- on some (scenario, run) the head differs from the oracle beyond the totals
  (a request's own metrics, a logging interval's line, the exported token
  counts: the differences whose counter is not one of COUNTERS) where the base
  does not (the same figure of the same request or interval), or further.

A head that could not be measured is not called worse - we do not know - but
the gate still fails, with exit code 3 instead of 1, unless something measured
is worse. That includes a base pass that became a head `error`: it is listed
under "could not measure", so the reader looks at the error, not at counters.
A base that could not be measured (or nothing compared at all) is exit 3 too,
with what failed listed: the gate never claims "not worse" on no evidence.

A head run that crashes inside vLLM or never finishes where the base completes
arrives here already `broken` (`core.breakage`), so it fails the gate with 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

from difftest.core.errors import EXIT_FAILED, EXIT_OK, EXIT_UNMEASURED
from difftest.core.evidence import BranchCoverage
from difftest.core.records import COUNTERS, Difference, Reading, Result, Totals
from difftest.core.values import format_value
from difftest.core.verdicts import (
    MAL,
    MAL_TOLERANCE,
    first_reason,
    measured_mal,
    one_line,
    oracle_mal,
)

Kind = Literal[
    "broken", "regressed", "further", "unmeasured", "base-unmeasured", "improved", "unchanged"
]
#: Kinds that make the head worse.
WORSE_KINDS = frozenset({"broken", "regressed", "further"})


@dataclass(frozen=True)
class GateFinding:
    """One thing the gate noticed on one (scenario, run), and why."""

    kind: Kind
    scenario: str
    label: str
    text: str
    counter: str | None = None
    base: Any = None
    head: Any = None
    expected: Any = None


@dataclass(frozen=True)
class GateOutcome:
    worse: bool
    #: One line per finding that makes the head worse.
    reasons: list[str]
    findings: list[GateFinding] = field(default_factory=list)
    reading: Reading | None = None
    #: (scenario, run) pairs compared with measurements on both sides.
    compared: int = 0
    #: What the head's probes executed of the lines it changes (`run.coverage`); None: not traced.
    coverage: BranchCoverage | None = None

    @property
    def not_verified(self) -> bool:
        """The head changes code that its runs did not all execute, or whose execution is not
        known: a pass on it is not a checked pass."""
        return self.coverage is not None and self.coverage.status in ("not verified", "unknown")

    @property
    def unmeasured(self) -> list[GateFinding]:
        return [f for f in self.findings if f.kind == "unmeasured"]

    @property
    def base_unmeasured(self) -> list[GateFinding]:
        return [f for f in self.findings if f.kind == "base-unmeasured"]

    @property
    def improved(self) -> list[GateFinding]:
        return [f for f in self.findings if f.kind == "improved"]

    @property
    def unchanged(self) -> list[GateFinding]:
        return [f for f in self.findings if f.kind == "unchanged"]


def compare_for_gate(base_results: list[Result], head_results: list[Result]) -> GateOutcome:
    """Compare head with base per (scenario, run). Both lists must use one oracle reading."""
    readings = {r.reading for r in [*base_results, *head_results]}
    if len(readings) > 1:
        raise ValueError(
            f"base and head were judged under different oracle readings {sorted(readings)}"
        )
    base = {(r.scenario, r.label): r for r in base_results}
    findings: list[GateFinding] = []
    compared = 0
    for head in head_results:
        key = (head.scenario, head.label)
        old = base.get(key)
        if old is not None and old.verdict == "error":
            findings.append(
                _finding("base-unmeasured", old, f"could not measure the base: {_error_line(old)}")
            )
        if head.verdict == "error":
            was = f"base {old.verdict}" if old else "not run on base"
            findings.append(
                _finding(
                    "unmeasured", head, f"could not measure the head ({was}): {_error_line(head)}"
                )
            )
            continue
        if head.verdict == "broken":
            was = f"base {old.verdict}" if old else "not run on base"
            findings.append(
                _finding("broken", head, f"head is broken ({was}): {first_reason(head)}")
            )
        if old is None or old.verdict == "error":
            continue
        compared += 1
        if old.measured is None or head.measured is None:
            continue  # judged from test outcomes (the tests tier): no counters to compare
        if old.verdict == "pass" and head.verdict == "diverge":  # pass -> broken is reported above
            findings.append(
                _finding("regressed", head, f"base passed, head diverges: {first_reason(head)}")
            )
        distances = _distances(old, head) + _beyond_totals(old, head)
        if head.verdict == "broken":
            # A broken run is worse, full stop: it is never also listed as better or "as on the
            # base".
            distances = [f for f in distances if f.kind in WORSE_KINDS]
        findings += distances
    seen = {(r.scenario, r.label) for r in head_results}
    for key, old in base.items():
        if key in seen:
            continue
        if old.verdict == "error":
            findings.append(
                _finding("base-unmeasured", old, f"could not measure the base: {_error_line(old)}")
            )
        else:
            findings.append(
                _finding("unmeasured", old, f"not run on the head (base {old.verdict})")
            )
    reasons = [f.text for f in findings if f.kind in WORSE_KINDS]
    return GateOutcome(
        worse=bool(reasons),
        reasons=reasons,
        findings=findings,
        reading=next(iter(readings), None),
        compared=compared,
    )


def gate_exit_code(
    outcome: GateOutcome, head_results: list[Result], require_coverage: bool = False
) -> int:
    """1 worse; 3 nothing worse but the base or the head went unmeasured somewhere, or nothing was
    compared at all; 0 only when at least one (scenario, run) was compared and nothing is worse,
    and, with `require_coverage`, the head's changed code all ran (1 otherwise)."""
    if outcome.worse:
        return EXIT_FAILED
    if (
        outcome.unmeasured
        or outcome.base_unmeasured
        or not head_results
        or any(r.verdict == "error" for r in head_results)
    ):
        return EXIT_UNMEASURED
    if outcome.compared == 0:
        return EXIT_UNMEASURED
    if require_coverage and outcome.not_verified:
        return EXIT_FAILED
    return EXIT_OK


def _beyond_totals(base: Result, head: Result) -> list[GateFinding]:
    """The head's differences beyond the totals that are new or further than the base's."""
    return [
        GateFinding(
            kind="further",
            scenario=head.scenario,
            label=head.label,
            text=f"{d.counter} is further from the oracle than on the base: head "
            f"{format_value(d.measured)}, oracle {format_value(d.expected)} ({d.explanation})",
            counter=d.counter,
            head=d.measured,
            expected=d.expected,
        )
        for d in worse_beyond_totals(head.differences, base.differences)
    ]


def worse_beyond_totals(head: list[Difference], base: list[Difference]) -> list[Difference]:
    """The head's differences beyond the totals (not a counter's, not the mean's) that the base
    does not have at the same place (figure, and request or interval), or has nearer the
    oracle."""
    had = {_place(d): d for d in base if _beyond(d)}
    out = []
    for d in head:
        if not _beyond(d):
            continue
        old = had.get(_place(d))
        if old is None or _distance_of(d) > _distance_of(old) + MAL_TOLERANCE:
            out.append(d)
    return out


def _beyond(d: Difference) -> bool:
    return d.counter not in COUNTERS and d.counter != MAL


def _place(d: Difference) -> tuple[str, str]:
    """The figure and where it is: the request or interval its explanation starts with."""
    head, sep, _ = d.explanation.partition(":")
    return d.counter, head if sep and head.startswith(("request ", "interval ")) else ""


def _distance_of(d: Difference) -> float:
    try:
        return distance(d.measured, d.expected)
    except TypeError:  # not numbers (a missing line, a missing request's metrics)
        return 0.0 if d.measured == d.expected else math.inf


def distance(measured: Any, expected: Any) -> float:
    """How far a value is from the oracle; lists by the sum of element-wise distances."""
    if isinstance(measured, list) or isinstance(expected, list):
        got, want = list(measured or []), list(expected or [])
        width = max(len(got), len(want))
        got += [0] * (width - len(got))
        want += [0] * (width - len(want))
        return float(sum(abs(g - w) for g, w in zip(got, want, strict=True)))
    if measured is None and expected is None:
        return 0.0
    if measured is None or expected is None:
        return math.inf
    return float(abs(measured - expected))


def _distances(old: Result, new: Result) -> list[GateFinding]:
    assert old.measured is not None and new.measured is not None
    found: list[GateFinding] = []
    for counter in [*COUNTERS, MAL]:
        b_val, b_exp = _values(old.measured, old.expected, counter)
        h_val, h_exp = _values(new.measured, new.expected, counter)
        b_dist, h_dist = distance(b_val, b_exp), distance(h_val, h_exp)
        tol = MAL_TOLERANCE if counter == MAL else 0.0
        if h_dist > b_dist + tol:
            kind: Kind = "further"
            text = (
                f"{counter} is further from the oracle: "
                f"distance {_num(b_dist)} on base, {_num(h_dist)} on head"
            )
        elif h_dist + tol < b_dist:
            kind = "improved"
            text = (
                f"{counter} is closer to the oracle: "
                f"distance {_num(b_dist)} on base, {_num(h_dist)} on head"
            )
        elif h_dist > tol:
            # Not worse, but not right either: the residual a reviewer should still see.
            kind = "unchanged"
            text = (
                f"{counter} still differs from the oracle, as on the base (distance {_num(h_dist)})"
            )
        else:
            continue
        if counter == MAL and (
            any(f.kind == kind for f in found) or (kind == "further" and _counters_off(new))
        ):
            # Derived from emitted / num_drafts: a counter already tells this story, or the head's
            # own counters are off the oracle (rows it still miscounts, as the base does, move
            # its mean however its emitted count improves).
            continue
        found.append(GateFinding(kind, new.scenario, new.label, text, counter, b_val, h_val, h_exp))
    return found


def _counters_off(result: Result) -> bool:
    """Some counter of the result differs from the oracle."""
    return any(
        distance(*_values(result.measured, result.expected, c)) > 0
        for c in COUNTERS
        if result.measured
    )


def _values(measured: Totals, expected: Totals | None, counter: str) -> tuple[Any, Any]:
    if counter == MAL:
        return measured_mal(measured), oracle_mal(expected) if expected else None
    return getattr(measured, counter), getattr(expected, counter) if expected else None


def _finding(kind: Kind, result: Result, text: str) -> GateFinding:
    return GateFinding(kind, result.scenario, result.label, text)


def _error_line(result: Result) -> str:
    return one_line(result.error or "no detail")


def _num(value: float) -> str:
    return (
        "inf"
        if math.isinf(value)
        else format_value(value)
        if not value.is_integer()
        else str(int(value))
    )
