"""Invariants a correct stats path keeps, whatever the tier and the reading of the oracle.

A branch that differs from the oracle may just count differently ("diverge");
a branch that breaks one of these is "broken": it loses or invents stats, or
depends on batch order. The generic checks, on the runs a probe recorded:
- per step and in total: accepted <= draft tokens; per-position sums = totals;
- per step, where the branch has its own emitted counter: rows <= emitted <= accepted + rows
  (i.e. 1 <= emitted <= accepted + 1 per row);
- stats silently lost: a step verified real drafts of N requests but reports fewer rows;
- no stats without drafts (#16023): a step that verified no draft slot reports no spec stats
  at all (a run with spec decoding off: none in any step), and the logged mean acceptance
  length is never `nan`;
- order independence: every batch order has the same totals;
- additivity: a batch's totals equal the sum of its requests run alone.
The last two compare runs in which each request was scheduled alike (`Shapes`):
where the batch decides a request's schedule (a new decode padded because
another request decodes, a draft block cut by the token budget, a preemption),
correct totals may differ, and the oracle judges each run on its own.
Each tier's own invariants module adds what only it can check and decides
which runs are comparable (by their role, never by parsing labels).
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from collections.abc import Callable, Hashable
from typing import Any

from difftest.core.records import COUNTERS, ProbeRun, StepRecord, Totals, Violation
from difftest.tiers.common.steps import delivered, real_drafts

ByLabel = dict[str, list[Violation]]
#: How each request of a run was scheduled, where the batch can change it; runs compare across
#: orders and with the requests alone only where these agree (None: every run compares).
Shapes = Callable[[ProbeRun], dict[str, Hashable]]
#: The counters compared across runs (the logged mean is derived from them).
COMPARED = COUNTERS
#: Above this many verified requests in one step, which ones lost their stats is not searched for.
MAX_NAMED = 12


def measured(runs: list[ProbeRun]) -> list[ProbeRun]:
    """The runs that produced totals."""
    return [r for r in runs if r.measured]


def batches_and_alone(runs: list[ProbeRun]) -> tuple[list[ProbeRun], dict[str, ProbeRun]]:
    """The measured batch runs, and the measured alone runs by request id."""
    ok = measured(runs)
    return [r for r in ok if r.role == "batch"], {r.order[0]: r for r in ok if r.role == "alone"}


def per_run_checks(runs: list[ProbeRun]) -> ByLabel:
    """Step and total checks of every measured run (every measured run gets a key)."""
    return {run.label: step_checks(run) + total_checks(run) for run in measured(runs)}


def across_orders(
    found: ByLabel,
    batches: list[ProbeRun],
    alone: dict[str, ProbeRun],
    shapes: Shapes | None = None,
) -> None:
    """Add order-independence and additivity violations of `batches` to `found`, comparing only
    runs whose requests `shapes` says were scheduled alike."""
    shaped = {run.label: shapes(run) if shapes else {} for run in [*batches, *alone.values()]}
    groups: dict[Hashable, list[ProbeRun]] = {}
    for run in batches:
        groups.setdefault(tuple(sorted(shaped[run.label].items())), []).append(run)
    for group in groups.values():
        # The requests alone that were scheduled as they were in this group's batches.
        like = {
            rid: a
            for rid, a in alone.items()
            if shaped[a.label].get(rid) == shaped[group[0].label].get(rid)
        }
        reference = reference_run(group, like)
        for run in group:
            found.setdefault(run.label, [])
            found[run.label] += order_check(run, reference)
            found[run.label] += additivity_check(run, like)


def _vec(totals: Totals | None) -> dict[str, Any]:
    """The compared counters of a measured run's totals."""
    assert totals is not None, "only measured runs are compared"
    return {c: getattr(totals, c) for c in COMPARED}


def step_checks(run: ProbeRun) -> list[Violation]:
    """Lost stats, stats without drafts, consistency and emitted bounds, step by step."""
    out: list[Violation] = []
    source = run.totals.emitted_source if run.totals is not None else ""
    emitted_field = source.split(":", 1)[1] if source.startswith("counter:") else None
    ended: set[str] = set()
    for step in run.steps:
        where = f"step {step.step}"
        taken = [rid for rid in step.scheduled or list(step.sampled) if delivered(step, rid, ended)]
        ended |= set(step.finished) | set(step.aborted)
        verified = [rid for rid in taken if real_drafts(step, rid) > 0]
        stats = step.stats.model_dump() if step.stats is not None else None
        rows = (stats or {}).get("num_drafts", 0)
        if stats is not None and not any(step.drafts.get(rid) for rid in taken):
            out.append(
                Violation(
                    invariant="stats-without-drafts",
                    label=run.label,
                    detail=f"{where}: no request verified a draft slot, yet the step reports "
                    f"spec decoding stats ({rows} row(s)); #16023: a step without drafts "
                    "reports none",
                    counter="num_drafts",
                    measured=rows,
                    expected=None,
                )
            )
        if len(verified) > rows:
            reported = "no spec stats at all" if stats is None else f"{rows} row(s)"
            lost = lost_requests(step, verified, stats)
            named = f"; lost: {', '.join(lost)}" if lost else ""
            out.append(
                Violation(
                    invariant="stats-lost",
                    label=run.label,
                    detail=f"{where}: {len(verified)} request(s) had real drafts verified "
                    f"({', '.join(verified)}) but the step reports {reported}{named}",
                    counter="num_drafts",
                    measured=rows,
                    expected=len(verified),
                    requests=lost,
                )
            )
        if stats is None:
            continue
        out += _consistency(stats, run.label, where)
        if emitted_field and emitted_field in stats:
            emitted, accepted = stats[emitted_field], stats.get("num_accepted_tokens", 0)
            if not rows <= emitted <= accepted + rows:
                out.append(
                    Violation(
                        invariant="emitted-bounds",
                        label=run.label,
                        detail=f"{where}: {emitted_field}={emitted} outside "
                        f"[rows={rows}, accepted+rows={accepted + rows}]",
                        counter="num_emitted_tokens",
                        measured=emitted,
                        expected=[rows, accepted + rows],
                    )
                )
    return out


def lost_requests(step: StepRecord, verified: list[str], stats: dict[str, Any] | None) -> list[str]:
    """The verified requests whose rows the step's stats miss, where exactly one choice of kept rows
    explains the recorded draft and accepted counts; [] when that cannot be told."""
    if stats is None:
        return list(verified)
    rows = stats.get("num_drafts", 0)
    if len(verified) > MAX_NAMED or not 0 <= rows < len(verified):
        return []
    row = {}
    for rid in verified:
        real = real_drafts(step, rid)
        row[rid] = (real, max(0, min(len(step.sampled[rid]) - 1, real)))
    want = (stats.get("num_draft_tokens", 0), stats.get("num_accepted_tokens", 0))
    fits = [
        kept
        for kept in itertools.combinations(verified, rows)
        if (sum(row[r][0] for r in kept), sum(row[r][1] for r in kept)) == want
    ]
    if len(fits) != 1:
        return []
    return [rid for rid in verified if rid not in fits[0]]


def _consistency(values: dict[str, Any], label: str, where: str) -> list[Violation]:
    out = []
    drafts, accepted = values.get("num_draft_tokens", 0), values.get("num_accepted_tokens", 0)
    if accepted > drafts:
        out.append(
            Violation(
                invariant="accepted-le-drafts",
                label=label,
                detail=f"{where}: accepted {accepted} > draft tokens {drafts}",
                counter="num_accepted_tokens",
                measured=accepted,
                expected=f"<= {drafts}",
            )
        )
    for per_pos, total in (
        ("num_accepted_tokens_per_pos", "num_accepted_tokens"),
        ("num_draft_tokens_per_pos", "num_draft_tokens"),
    ):
        if per_pos in values and sum(values[per_pos]) != values.get(total, 0):
            out.append(
                Violation(
                    invariant="per-pos-sum",
                    label=label,
                    detail=f"{where}: sum({per_pos})={sum(values[per_pos])} != "
                    f"{total}={values.get(total, 0)}",
                    counter=per_pos,
                    measured=sum(values[per_pos]),
                    expected=values.get(total, 0),
                )
            )
    return out


def total_checks(run: ProbeRun) -> list[Violation]:
    """Consistency of the run's summed totals, and a logged mean acceptance length that is a
    number (the probe keeps the branch's own log line in the run's notes)."""
    assert run.totals is not None
    out = _consistency(run.totals.model_dump(), run.label, "totals")
    logged = run.notes.get("mean_acceptance_length_log")
    if isinstance(logged, str) and _NAN_MEAN.search(logged):
        out.append(
            Violation(
                invariant="mean-is-nan",
                label=run.label,
                detail="the branch's log printed mean acceptance length nan (a stats object "
                "with no drafts was logged; #16023)",
                counter="mean_acceptance_length",
                measured="nan",
                expected=None,
            )
        )
    return out


_NAN_MEAN = re.compile(r"Mean acceptance length:\s*nan", re.IGNORECASE)


def _sum_alone(alone: dict[str, ProbeRun], order: list[str]) -> dict[str, Any] | None:
    if not all(rid in alone for rid in order):
        return None
    total: dict[str, Any] = {}
    for rid in order:
        for name, value in _vec(alone[rid].totals).items():
            if isinstance(value, list):
                prev = total.get(name) or [0] * len(value)
                total[name] = [a + b for a, b in zip(prev, value, strict=False)]
            else:
                total[name] = total.get(name, 0) + value
    return total


def reference_run(
    batches: list[ProbeRun], alone: dict[str, ProbeRun]
) -> tuple[str, dict[str, Any]] | None:
    """What the batch orders should agree on: the totals equal to the requests' sum alone if an
    order has them, else the most common totals (ties: the first listed order)."""
    if len(batches) < 2:
        return None
    vectors = [(r.label, _vec(r.totals)) for r in batches]
    summed = _sum_alone(alone, batches[0].order)
    if summed is not None:
        for _label, vec in vectors:
            if vec == summed:
                return ("the sum of the requests run alone", summed)
    counts = Counter(repr(v) for _, v in vectors)
    best = max(vectors, key=lambda lv: counts[repr(lv[1])])
    n = counts[repr(best[1])]
    return (f"{best[0]} ({n} of {len(vectors)} orders agree)", best[1])


def _diff(vec: dict[str, Any], ref: dict[str, Any]) -> list[str]:
    return [c for c in COMPARED if vec.get(c) != ref.get(c)]


def order_check(run: ProbeRun, reference: tuple[str, dict[str, Any]] | None) -> list[Violation]:
    if reference is None:
        return []
    name, ref = reference
    return _mismatches(
        "order-independence",
        run,
        ref,
        lambda counter, got, want: (
            f"batch order {','.join(run.order)} changes {counter}: {got} here, {want} in {name}"
        ),
    )


def additivity_check(run: ProbeRun, alone: dict[str, ProbeRun]) -> list[Violation]:
    summed = _sum_alone(alone, run.order)
    if summed is None or len(run.order) < 2:
        return []
    return _mismatches(
        "additivity",
        run,
        summed,
        lambda counter, got, want: (
            f"batch {','.join(run.order)}: {counter}={got}, "
            f"but its requests run alone sum to {want}"
        ),
    )


def _mismatches(
    invariant: str, run: ProbeRun, expected: dict[str, Any], detail: Callable[[str, Any, Any], str]
) -> list[Violation]:
    """One violation per compared counter of `run` that differs from `expected`."""
    vec = _vec(run.totals)
    return [
        Violation(
            invariant=invariant,
            label=run.label,
            detail=detail(counter, vec[counter], expected[counter]),
            counter=counter,
            measured=vec[counter],
            expected=expected[counter],
        )
        for counter in _diff(vec, expected)
    ]
