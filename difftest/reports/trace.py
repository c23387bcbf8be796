"""A run step by step: what each request drafted, sampled and emitted, and the stats row the branch
recorded beside the one the oracle expects, with the first step where they part.

The step records come from the probe's JSONL (the evidence keeps runs without
steps); the oracle's row per step is the tier's (`ProbeTier.expected_steps`), so
this module never asks which tier it holds. `difftest show` prints a trace;
the HTML report carries one, collapsed, for every result that is not a pass.
A row's fields are the counters of `COUNTER_TABLE`, under their `trace` keys.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from difftest import tiers
from difftest.core.records import (
    COUNTER_TABLE,
    Counter,
    ProbeRun,
    Reading,
    Result,
    StepRecord,
    StepStats,
    Totals,
)
from difftest.tiers.common.scenario import ScenarioBase
from difftest.tiers.common.steps import restarts_after, sampled
from difftest.tiers.probe_tier import ProbeTier


def trace_fields(table: tuple[Counter, ...]) -> dict[str, str]:
    """A stats row's fields (each counter's `trace` key) and their column headers, in order."""
    return {c.trace: c.short for c in table}


#: The compared fields of a stats row, and how they read in a table header.
FIELDS: dict[str, str] = trace_fields(COUNTER_TABLE)
_TRACE_KEYS = {c.name: c.trace for c in COUNTER_TABLE}
#: The fields a trace reads itself: the rows, and the emitted count (the branch's own counter, or
#: what its mean acceptance length implies).
ROWS, EMITTED = _TRACE_KEYS["num_drafts"], _TRACE_KEYS["num_emitted_tokens"]


@dataclass(frozen=True)
class RequestStep:
    """One request in one step."""

    request: str
    drafts: list[int]
    invalid: int
    sampled: list[int]
    emitted: list[int]
    finished: str = ""
    #: What the step was for the request where a serving condition shaped it ("padded new decode":
    #: -1 placeholders, "prefill chunk of 8" tokens, "preempted", "recomputed" after a preemption,
    #: "aborted in flight", ...); "" otherwise.
    note: str = ""

    @property
    def notes(self) -> str:
        """The finish reason and the note, as a trace prints them after the request's id."""
        return ", ".join(n for n in (self.note, self.finished) if n)


@dataclass(frozen=True)
class StatsRow:
    """One step's stats, as the branch recorded them or as the oracle expects them: a value per
    field of `FIELDS` (the emitted count is None where the branch's counter is not an integer)."""

    values: dict[str, int | list[int] | None]
    #: False when the branch reported no spec stats for the step at all.
    reported: bool = True

    def value(self, name: str) -> object:
        return self.values[name]

    @property
    def rows(self) -> int:
        value = self.values[ROWS]
        return value if isinstance(value, int) else 0

    @property
    def emitted(self) -> int | None:
        value = self.values[EMITTED]
        return value if isinstance(value, int) else None


@dataclass(frozen=True)
class TraceStep:
    step: int
    requests: list[RequestStep]
    recorded: StatsRow
    #: None where the tier cannot say what the oracle expects.
    expected: StatsRow | None
    #: The fields (`FIELDS`) on which `recorded` and `expected` disagree.
    differs: list[str]


@dataclass(frozen=True)
class Elided:
    """Steps left out of a display (they agree with the oracle, or lie beyond its limit)."""

    first: int
    last: int
    count: int
    agree: bool

    @property
    def steps(self) -> str:
        """`step 4` or `steps 4-9 (6)`."""
        if self.count == 1:
            return f"step {self.first}"
        return f"steps {self.first}-{self.last} ({self.count})"

    @property
    def verb(self) -> str:
        """The verb that agrees with `steps`."""
        return "agrees" if self.count == 1 else "agree"


@dataclass(frozen=True)
class Trace:
    branch: str
    scenario: str
    tier: str
    label: str
    reading: str
    #: Where the branch's emitted count comes from (`counter:<field>` or `implied`).
    emitted_source: str
    steps: list[TraceStep]

    @property
    def first(self) -> int | None:
        """Index in `steps` of the first step that disagrees with the oracle."""
        return next((i for i, s in enumerate(self.steps) if s.differs), None)

    def segments(
        self, context: int = 1, limit: int | None = None, lead: int = 3
    ) -> list[TraceStep | Elided]:
        """The steps worth showing: those within `context` of a disagreeing step (or the first
        `lead` steps when none disagrees), the rest folded into `Elided`; at most `limit` shown."""
        wanted = {i for i, s in enumerate(self.steps) if s.differs}
        if not wanted:
            wanted = set(range(min(lead, len(self.steps))))
        keep = {
            j
            for i in wanted
            for j in range(i - context, i + context + 1)
            if 0 <= j < len(self.steps)
        }
        out: list[TraceStep | Elided] = []
        shown = 0
        pending: list[int] = []
        for i, step in enumerate(self.steps):
            if i in keep and (limit is None or shown < limit):
                _flush(out, self.steps, pending, agree=True)
                out.append(step)
                shown += 1
            else:
                pending.append(i)
        _flush(out, self.steps, pending, agree=limit is None or shown < limit)
        return out


def _flush(
    out: list[TraceStep | Elided], steps: list[TraceStep], pending: list[int], agree: bool
) -> None:
    if pending:
        chosen = [steps[i] for i in pending]
        out.append(
            Elided(
                chosen[0].step,
                chosen[-1].step,
                len(chosen),
                agree and not any(s.differs for s in chosen),
            )
        )
        pending.clear()


def build_trace(
    tier: ProbeTier[Any], scenario: ScenarioBase, run: ProbeRun, reading: Reading, branch: str
) -> Trace:
    """The trace of one recorded run (with its steps)."""
    source = run.totals.emitted_source if run.totals is not None else "implied"
    k = int(getattr(scenario, "k", 0) or 0)
    expected = tier.expected_steps(scenario, run, reading)
    steps = []
    shape = _Shaping()
    for record, want in zip(run.steps, expected, strict=False):
        recorded = _recorded(record.stats, source, k)
        oracle = _expected(want, k) if want is not None else None
        steps.append(
            TraceStep(
                step=record.step,
                requests=_requests(record, shape),
                recorded=recorded,
                expected=oracle,
                differs=_differs(recorded, oracle),
            )
        )
    return Trace(branch, run.scenario, run.tier, run.label, reading, source, steps)


def traces_for(
    results: Iterable[Result],
    recorded: dict[tuple[str, str, str], ProbeRun],
    scenarios: dict[str, ScenarioBase],
    reading: Reading,
) -> dict[tuple[str, str, str], Trace]:
    """(branch, scenario, label) -> trace, for every given result whose run was recorded with steps
    by a probe tier."""
    out = {}
    for result in results:
        key = (result.branch, result.scenario, result.label)
        run, scenario, tier = (
            recorded.get(key),
            scenarios.get(result.scenario),
            tiers.REGISTRY.get(result.tier),
        )
        if run is None or scenario is None or not isinstance(tier, ProbeTier) or not run.steps:
            continue
        out[key] = build_trace(tier, scenario, run, reading, result.branch)
    return out


@dataclass
class _Shaping:
    """What earlier steps of the run left behind: requests that finished, and requests preempted
    but not yet run again."""

    ended: set[str] = field(default_factory=set)
    preempted: set[str] = field(default_factory=set)

    def note(self, record: StepRecord, rid: str) -> str:
        """What this step was for the request, where a serving condition made it unusual."""
        own = self._own(record, rid)
        if rid in record.reset:
            return ", ".join(filter(None, [own, "preempted by a prefix-cache reset after it"]))
        return own

    def _own(self, record: StepRecord, rid: str) -> str:
        if rid in record.preempted and rid not in record.scheduled:
            return "preempted"
        if rid not in record.scheduled:
            return ""
        if rid in record.aborted:
            return "aborted in flight"
        if rid in record.dropped:
            return "in flight at a prefix-cache reset: dropped"
        if not record.sampled.get(rid):
            return f"prefill chunk of {record.tokens.get(rid, '?')}"
        if rid in self.ended:
            return "in flight after its end: discarded"
        notes = ["recomputed"] if rid in self.preempted else []
        drafts = record.drafts.get(rid, [])
        if rid in record.skipped:
            notes.append("drafter skipped")
        elif drafts and drafts[0] < 0 and not record.invalid.get(rid):
            notes.append("padded new decode")
        return ", ".join(notes)

    def after(self, record: StepRecord) -> None:
        self.preempted -= {rid for rid in record.scheduled if sampled(record, rid)}
        self.preempted |= restarts_after(record)
        self.ended |= set(record.finished) | set(record.aborted)


def _requests(record: StepRecord, shape: _Shaping) -> list[RequestStep]:
    ids = list(
        dict.fromkeys(
            [
                *record.scheduled,
                *record.drafts,
                *record.sampled,
                *record.emitted,
                *record.preempted,
                *record.reset,
            ]
        )
    )
    out = [
        RequestStep(
            request=rid,
            drafts=list(record.drafts.get(rid, [])),
            invalid=record.invalid.get(rid, 0),
            sampled=list(record.sampled.get(rid, [])),
            emitted=list(record.emitted.get(rid, [])),
            finished=record.finished.get(rid, ""),
            note=shape.note(record, rid),
        )
        for rid in ids
    ]
    shape.after(record)
    return out


def _padded(values: list[int], k: int) -> list[int]:
    return list(values) + [0] * max(0, k - len(values))


def _recorded(stats: StepStats | None, source: str, k: int) -> StatsRow:
    if stats is None:
        zeros: dict[str, int | list[int] | None] = {
            c.trace: [0] * k if c.per_position else 0 for c in COUNTER_TABLE
        }
        return StatsRow(zeros, reported=False)
    if source.startswith("counter:"):
        value = stats.value(source.split(":", 1)[1], None)
        emitted = value if isinstance(value, int) else None
    else:
        emitted = stats.num_drafts + stats.num_accepted_tokens  # what the branch's mean implies
    return _row(stats, k, emitted)


def _expected(totals: Totals, k: int) -> StatsRow:
    return _row(totals, k, totals.num_emitted_tokens)


def _row(counts: StepStats | Totals, k: int, emitted: int | None) -> StatsRow:
    """Each counter's value in `counts` (per-position ones padded to k), the emitted one given."""
    return StatsRow(
        {c.trace: emitted if c.trace == EMITTED else _counted(counts, c, k) for c in COUNTER_TABLE}
    )


def _counted(counts: StepStats | Totals, counter: Counter, k: int) -> int | list[int]:
    value = getattr(counts, counter.name)
    return _padded(value, k) if counter.per_position else value


def _differs(recorded: StatsRow, expected: StatsRow | None) -> list[str]:
    if expected is None:
        return []
    return [name for name in FIELDS if recorded.value(name) != expected.value(name)]
