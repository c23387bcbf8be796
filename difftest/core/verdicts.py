"""Turn measured runs, oracle totals and invariant violations into verdicts.

One `Result` per (branch, scenario, order label). The verdict is decided in a
fixed precedence so that a report never claims more than was measured:

1. `error`   - the run did not produce totals (env, import, crash, timeout),
               or there is nothing to compare them with;
2. `broken`  - an invariant fails (lost stats, order dependence, ...);
3. `diverge` - a counter, or the logged mean acceptance length, differs from
               the oracle while the invariants hold;
4. `pass`.

Mean acceptance length (MAL) is recorded as a difference of its own but is
derived: the oracle's value is emitted / num_drafts, so a branch whose emitted
count is off almost always differs on MAL as well. Both are listed (the
counter first); the verdict is the same either way.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from typing import Any

from difftest.core.errors import EXIT_FAILED, EXIT_OK, EXIT_UNMEASURED
from difftest.core.records import (
    COUNTERS,
    Difference,
    ProbeRun,
    Reading,
    Result,
    Totals,
    Verdict,
    Violation,
)
from difftest.core.values import format_value

#: The name MAL differences are recorded under (it is not one of COUNTERS).
MAL = "mean_acceptance_length"
#: Absolute tolerance for comparing mean acceptance lengths (floats).
MAL_TOLERANCE = 1e-6
#: Every verdict, most severe first; summaries and reports use this order.
VERDICTS: tuple[Verdict, ...] = ("broken", "diverge", "error", "pass")
#: Column order of summary tables: good news first, "could not measure" last.
SUMMARY_ORDER: tuple[Verdict, ...] = ("pass", "diverge", "broken", "error")


def oracle_mal(expected: Totals) -> float | None:
    """The oracle's mean acceptance length: emitted tokens per verification row."""
    if expected.num_drafts <= 0:
        return None
    return expected.num_emitted_tokens / expected.num_drafts


def measured_mal(measured: Totals) -> float | None:
    """The MAL the branch logs; derived from its own counters if it logged none."""
    value = measured.mean_acceptance_length
    if value is not None and not math.isnan(value):
        return float(value)
    if measured.num_drafts <= 0:
        return None
    return measured.num_emitted_tokens / measured.num_drafts


def counter_differences(measured: Totals, expected: Totals) -> list[Difference]:
    """Every counter (COUNTERS order, then MAL) on which `measured` differs from `expected`."""
    diffs: list[Difference] = []
    for counter in COUNTERS:
        got, want = getattr(measured, counter), getattr(expected, counter)
        if got != want:
            diffs.append(
                Difference(
                    counter=counter,
                    measured=got,
                    expected=want,
                    explanation=_why(counter, got, want, measured),
                )
            )
    got_mal, want_mal = measured_mal(measured), oracle_mal(expected)
    if not _mal_equal(got_mal, want_mal):
        diffs.append(
            Difference(
                counter=MAL,
                measured=got_mal,
                expected=want_mal,
                explanation=_why_mal(measured, expected),
            )
        )
    return diffs


def judge(
    branch: str,
    scenario_name: str,
    tier: str,
    statement: str,
    runs: list[ProbeRun],
    expected: dict[str, Totals],
    violations: dict[str, list[Violation]],
    reading: Reading,
    extra: dict[str, list[Difference]] | None = None,
) -> list[Result]:
    """One verdict per run of one branch on one scenario, in the order of `runs`.

    `extra` holds differences from the oracle beyond the totals' (the per-request metrics), by
    run label: they make a run diverge as a counter does.

    Violations filed under a label that has no run (say, one that compares
    runs with each other) are not dropped: they go to the first run, keeping
    their own label, so the scenario still reads broken. Two runs with one
    label are a caller bug and raise ValueError: verdicts could not be keyed.
    """
    labels = [run.label for run in runs]
    dupes = sorted({label for label in labels if labels.count(label) > 1})
    if dupes:
        raise ValueError(f"{branch}/{scenario_name}: duplicate run labels {dupes}")
    per_label = {label: list(violations.get(label, [])) for label in labels}
    if labels:
        for label, found in violations.items():
            if label not in per_label:
                per_label[labels[0]].extend(found)
    return [
        _judge_run(
            branch,
            scenario_name,
            tier,
            statement,
            run,
            expected.get(run.label),
            per_label[run.label],
            reading,
            (extra or {}).get(run.label, []),
        )
        for run in runs
    ]


def unmeasured(
    branch: str,
    scenario_name: str,
    tier: str,
    statement: str,
    labels: Iterable[str],
    error: str,
    reading: Reading,
) -> list[Result]:
    """`error` results for runs that were never measured (env build, import, a lost record, ...)."""
    return [
        Result(
            branch=branch,
            scenario=scenario_name,
            tier=tier,
            label=label,
            verdict="error",
            reading=reading,
            error=error,
            statement=statement,
        )
        for label in labels
    ]


def summarize(results: Iterable[Result]) -> dict[str, Counter[str]]:
    """Verdict counts per branch; every verdict is present (0 if none)."""
    summary: dict[str, Counter[str]] = {}
    for result in results:
        counts = summary.setdefault(result.branch, Counter({v: 0 for v in VERDICTS}))
        counts[result.verdict] += 1
    return summary


def exit_code(results: Iterable[Result]) -> int:
    """0 all pass; 1 any diverge/broken; 3 something could not be measured (or nothing was)."""
    verdicts = {r.verdict for r in results}
    if verdicts & {"diverge", "broken"}:
        return EXIT_FAILED
    if "error" in verdicts or not verdicts:
        return EXIT_UNMEASURED
    return EXIT_OK


def worst(verdicts: Iterable[Verdict]) -> Verdict:
    """The most severe verdict of several (pass if there are none)."""
    found = set(verdicts)
    return next((v for v in VERDICTS if v in found), "pass")


def first_reason(result: Result) -> str:
    """One line that says why a result is not a pass (empty for a pass)."""
    if result.verdict == "error":
        return one_line(result.error or "no detail")
    if result.verdict == "broken" and result.violations:
        return violation_reason(result.violations[0])
    if result.differences:
        return difference_reason(result.differences[0])
    return ""


def violation_reason(violation: Violation) -> str:
    return f"{violation.invariant}: {violation.detail}"


def difference_reason(difference: Difference) -> str:
    measured, expected = format_value(difference.measured), format_value(difference.expected)
    return f"{difference.counter}: measured {measured}, oracle {expected}"


def one_line(text: str) -> str:
    """The last non-empty line of a multi-line message (a traceback ends with its exception); for
    difftest's own error (`problem`, then `fix: ...`), the problem's last line: the fix alone does
    not say what went wrong."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    fixes = [i for i, line in enumerate(lines) if line.startswith("fix: ")]
    if fixes and fixes[-1] > 0:
        return lines[fixes[-1] - 1]
    return lines[-1] if lines else "no detail"


def _judge_run(
    branch: str,
    scenario: str,
    tier: str,
    statement: str,
    run: ProbeRun,
    expected: Totals | None,
    violations: list[Violation],
    reading: Reading,
    extra: list[Difference],
) -> Result:
    base: dict[str, Any] = dict(
        branch=branch,
        scenario=scenario,
        tier=tier,
        label=run.label,
        reading=reading,
        measured=run.totals,
        expected=expected,
        violations=list(violations),
        statement=statement,
        duration_s=run.duration_s,
    )
    if not run.measured or run.totals is None:
        return Result(**base, verdict="error", error=run_error(run))
    if expected is None:
        return Result(
            **base,
            verdict="error",
            error=f"the oracle gave no expected totals for run {run.label!r}",
        )
    differences = counter_differences(run.totals, expected) + list(extra)
    verdict: Verdict = "broken" if violations else ("diverge" if differences else "pass")
    return Result(**base, verdict=verdict, differences=differences)


def run_error(run: ProbeRun) -> str:
    """Why a run has no totals, in one line: the failure's last line and where it was raised."""
    if run.error:
        return run.error
    if run.failure is not None:
        where = f" (at {run.failure.where})" if run.failure.where else ""
        return f"{run.status}: {run.failure.summary}{where}"
    return f"{run.status}: the probe reported no totals"


def _mal_equal(got: float | None, want: float | None) -> bool:
    if got is None or want is None:
        return got is None and want is None
    return math.isclose(got, want, rel_tol=0.0, abs_tol=MAL_TOLERANCE)


def _why(counter: str, got: Any, want: Any, measured: Totals) -> str:
    if isinstance(got, list) or isinstance(want, list):
        text = f"per position: measured {format_value(got)}, oracle {format_value(want)}"
    else:
        text = f"measured {got}, oracle {want} ({got - want:+d})"
    if counter == "num_emitted_tokens" and measured.emitted_source == "implied":
        text += (
            "; the branch has no emitted counter, so this is what its MAL implies "
            "(num_drafts + num_accepted_tokens)"
        )
    return text


def _why_mal(measured: Totals, expected: Totals) -> str:
    source = (
        "logged by the branch"
        if measured.mean_acceptance_length is not None
        else "derived from its counters"
    )
    return (
        "derived: oracle = emitted / num_drafts = "
        f"{expected.num_emitted_tokens}/{expected.num_drafts}; measured value {source}"
    )
