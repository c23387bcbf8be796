"""Test outcomes -> judgements -> one verdict per (code branch, test source).

Every test is judged against the baseline's outcome of the same test:

| here \\ baseline           | passed     | anything else                          |
|---------------------------|------------|----------------------------------------|
| passed                    | pass       | fixed                                  |
| failed / error            | regression | fails on baseline                      |
| skipped / xfailed         | skipped    | skipped                                |
| not collected             | unmeasured | fails on baseline if the baseline      |
|                           |            | could not collect it either, else      |
|                           |            | unmeasured                             |
| not run (session, worker) | unmeasured | unmeasured                             |

The baseline itself is the reference, never judged: whatever does not pass
there "fails on the baseline", except what was not run at all. A source's
verdict on a branch is `broken` when any of its tests is a regression (the
failing assertion is the reason), else `error` when any could not be measured,
else `pass`; a test that fails everywhere is reported and judged by nobody.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from difftest.core.records import (
    Reading,
    Result,
    TestJudgement,
    TestRecord,
    Verdict,
    Violation,
)
from difftest.core.suites import RawOutcome

FAILING = ("failed", "error")
#: How many failing tests a verdict's reasons list before counting the rest.
MAX_LISTED = 20


def judgement(outcome: str, baseline: str | None, is_baseline: bool) -> TestJudgement:
    """One test on one branch's code, given the baseline's outcome (None: the baseline did not
    report it)."""
    if outcome == "not-run":
        return "unmeasured"
    if outcome == "passed":
        return "pass" if is_baseline or baseline == "passed" else "fixed"
    if outcome in ("skipped", "xfailed"):
        return "skipped"
    if is_baseline:
        return "fails-on-baseline"
    if outcome in FAILING:
        return "regression" if baseline == "passed" else "fails-on-baseline"
    # not collected here
    return "fails-on-baseline" if baseline == "not-collected" else "unmeasured"


def judge_records(outcomes: Iterable[RawOutcome], baseline: str) -> list[TestRecord]:
    """Every outcome with its judgement; the baseline's outcome of the same (source, test) is the
    reference."""
    outcomes = list(outcomes)
    reference = {(o.source, o.test): o.outcome for o in outcomes if o.code == baseline}
    return [
        TestRecord(
            source=o.source,
            code=o.code,
            test=o.test,
            outcome=o.outcome,
            message=o.message,
            judgement=judgement(o.outcome, reference.get((o.source, o.test)), o.code == baseline),
            duration_s=o.duration_s,
        )
        for o in outcomes
    ]


def verdicts(
    records: list[TestRecord],
    codes: list[str],
    sources: list[str],
    scenario: str,
    tier: str,
    reading: Reading,
    unmeasured: dict[str, str] | None = None,
) -> list[Result]:
    """One Result per (code branch, source); `unmeasured` names branches that ran nothing, and
    why."""
    unmeasured = unmeasured or {}
    results = []
    for code in codes:
        for source in sources:
            mine = [r for r in records if r.code == code and r.source == source]
            results.append(
                _verdict(code, source, mine, scenario, tier, reading, unmeasured.get(code))
            )
    return results


def _verdict(
    code: str,
    source: str,
    mine: list[TestRecord],
    scenario: str,
    tier: str,
    reading: Reading,
    why: str | None,
) -> Result:
    duration_s = round(sum(r.duration_s for r in mine), 3)

    def result(
        verdict: Verdict,
        statement: str,
        error: str | None = None,
        violations: list[Violation] | None = None,
    ) -> Result:
        """This (branch, source)'s Result; only the verdict and its evidence vary."""
        return Result(
            branch=code,
            scenario=scenario,
            tier=tier,
            label=source,
            reading=reading,
            duration_s=duration_s,
            verdict=verdict,
            error=error,
            violations=violations or [],
            statement=statement,
        )

    if why and not mine:
        return result("error", f"tests of {source}: not run", error=why)
    counts = Counter(r.judgement for r in mine)
    statement = f"tests of {source}: " + summary(counts, len(mine))
    regressions = [r for r in mine if r.judgement == "regression"]
    if regressions:
        violations = [
            Violation(
                invariant="test-regression",
                label=source,
                detail=f"{r.test}: {r.message or r.outcome}",
            )
            for r in regressions[:MAX_LISTED]
        ]
        if len(regressions) > MAX_LISTED:
            violations.append(
                Violation(
                    invariant="test-regression",
                    label=source,
                    detail=f"and {len(regressions) - MAX_LISTED} more failing test(s)",
                )
            )
        return result("broken", statement, violations=violations)
    lost = [r for r in mine if r.judgement == "unmeasured"]
    if lost or not mine:
        detail = "; ".join(f"{r.test}: {r.message or r.outcome}" for r in lost[:3]) or (
            why or "no test ran"
        )
        more = f" (and {len(lost) - 3} more)" if len(lost) > 3 else ""
        return result(
            "error", statement, error=f"could not measure {len(lost)} test(s): {detail}{more}"
        )
    return result("pass", statement)


#: Judgements in the order summaries name them.
ORDER: tuple[TestJudgement, ...] = (
    "pass",
    "fixed",
    "regression",
    "fails-on-baseline",
    "skipped",
    "unmeasured",
)
WORDS: dict[str, str] = {
    "pass": "passed",
    "fixed": "pass where the baseline does not",
    "regression": "fail here but pass on the baseline",
    "fails-on-baseline": "fail on the baseline too",
    "skipped": "skipped",
    "unmeasured": "could not be measured",
}


def summary(counts: Counter[TestJudgement], total: int) -> str:
    """`86 tests: 83 passed, 3 fail on the baseline too`."""
    parts = [f"{counts[j]} {WORDS[j]}" for j in ORDER if counts.get(j)]
    return f"{total} test{'s' if total != 1 else ''}" + (": " + ", ".join(parts) if parts else "")
