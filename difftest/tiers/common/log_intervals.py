"""Each logging interval's spec-decode line against the oracle's figures for that interval.

A server logs one `SpecDecodingLogging` line per interval, and operators read
those lines, not a run's totals. The probe replays the branch's own logger over
the run in intervals of `log_every` engine steps (`probe.common.intervals`);
here each line is set beside the oracle's rows of the same steps (the tier's
`expected_steps`): the mean acceptance length (emitted tokens per row), the
accepted and drafted tokens, and the per-position acceptance rates (accepted
per position per row, printed to 3 decimals). An interval with no row logs no
line. A difference makes the run diverge (`log_interval.<figure>`), as a
counter's does: the totals can be right while one interval is wrong (a list the
logger adds and never resets).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from difftest.core.records import Difference, ProbeRun, Totals
from difftest.probe.protocol import INTERVALS_NOTE

PREFIX = "log_interval."
#: The log prints each per-position rate to 3 decimals.
RATE_TOLERANCE = 0.0005 + 1e-9
MEAN_TOLERANCE = 1e-6


def expected_lines(
    run: ProbeRun, rows: Sequence[Totals | None], every: int, intervals: int
) -> list[dict[str, Any] | None]:
    """The oracle's figures for each interval (None: no row in it, so no line)."""
    out: list[dict[str, Any] | None] = []
    for i in range(intervals):
        inside = [
            totals
            for step, totals in zip(run.steps, rows, strict=True)
            if totals is not None and i * every <= step.step < (i + 1) * every
        ]
        drafts = sum(t.num_drafts for t in inside)
        if not drafts:
            out.append(None)
            continue
        per_position = [
            sum(column)
            for column in zip(*(t.num_accepted_tokens_per_pos for t in inside), strict=True)
        ]
        out.append(
            {
                "mean_acceptance_length": sum(t.num_emitted_tokens for t in inside) / drafts,
                "accepted": sum(t.num_accepted_tokens for t in inside),
                "drafted": sum(t.num_draft_tokens for t in inside),
                "per_position": [n / drafts for n in per_position],
            }
        )
    return out


def differences(run: ProbeRun, rows: Sequence[Totals | None], every: int) -> list[Difference]:
    """Where the branch's line of an interval differs from the oracle's figures for it."""
    logged: Any = run.notes.get(INTERVALS_NOTE)
    if not isinstance(logged, list):
        return [
            Difference(
                counter=PREFIX + "lines",
                measured=None,
                expected=f"one line per {every} step(s)",
                explanation="the branch's log lines per interval were not recorded",
            )
        ]
    intervals = -(-int(run.notes.get("steps") or 0) // every)
    if len(logged) != intervals:
        return [
            Difference(
                counter=PREFIX + "lines",
                measured=len(logged),
                expected=intervals,
                explanation=f"{len(logged)} interval(s) recorded where the run's "
                f"{run.notes.get('steps')} engine steps make {intervals}",
            )
        ]
    out = []
    for i, (got, want) in enumerate(
        zip(logged, expected_lines(run, rows, every, len(logged)), strict=True)
    ):
        where = f"interval {i + 1} (steps {i * every}-{(i + 1) * every - 1})"
        if isinstance(got, dict) and "error" in got:
            out.append(
                Difference(
                    counter=PREFIX + "lines",
                    measured=None,
                    expected="a line" if want is not None else None,
                    explanation=f"{where}: the branch's logger failed: {got['error']}",
                )
            )
            continue
        if got is None or want is None:
            if got is not want:
                out.append(
                    Difference(
                        counter=PREFIX + "lines",
                        measured=None if got is None else got.get("mean_acceptance_length"),
                        expected=None if want is None else "a line",
                        explanation=f"{where}: "
                        + (
                            "no line logged, the oracle has rows"
                            if got is None
                            else "a line logged, the oracle has no row"
                        ),
                    )
                )
            continue
        for figure, value in want.items():
            if not _agrees(figure, got.get(figure), value):
                out.append(
                    Difference(
                        counter=PREFIX + figure,
                        measured=got.get(figure),
                        expected=value,
                        explanation=f"{where}: the branch's line says {figure} "
                        f"{got.get(figure)}, the oracle's rows give {value}",
                    )
                )
    return out


def _agrees(figure: str, got: Any, want: Any) -> bool:
    if figure == "per_position":
        return (
            isinstance(got, list)
            and len(got) == len(want)
            and all(
                isinstance(g, int | float) and abs(g - w) <= RATE_TOLERANCE
                for g, w in zip(got, want, strict=True)
            )
        )
    if figure == "mean_acceptance_length":
        return isinstance(got, int | float) and math.isclose(
            got, want, rel_tol=0.0, abs_tol=MEAN_TOLERANCE
        )
    return bool(got == want)
