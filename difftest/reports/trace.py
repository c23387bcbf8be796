"""A run step by step: what each request drafted, sampled and emitted, and the stats row the branch
recorded beside the one the oracle expects, with the first step where they part.

The step records come from the probe's JSONL (the evidence keeps runs without
steps); the oracle's row per step is the tier's (`Tier.expected_steps`), so
this module never asks which tier it holds. `difftest show` prints a trace;
the HTML report carries one, collapsed, for every result that is not a pass.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from difftest import tiers
from difftest.core.records import ProbeRun, Reading, Result, StepRecord, StepStats, Totals
from difftest.tiers.base import Tier
from difftest.tiers.common.scenario import ScenarioBase

#: The compared fields of a stats row, and how they read in a table header.
FIELDS: dict[str, str] = {
    "rows": "rows",
    "draft_tokens": "drafts",
    "accepted": "accepted",
    "accepted_per_pos": "accepted/pos",
    "draft_tokens_per_pos": "drafts/pos",
    "emitted": "emitted",
}


@dataclass(frozen=True)
class RequestStep:
    """One request in one step."""

    request: str
    drafts: list[int]
    invalid: int
    sampled: list[int]
    emitted: list[int]
    finished: str = ""


@dataclass(frozen=True)
class StatsRow:
    """One step's stats, as the branch recorded them or as the oracle expects them."""

    rows: int = 0
    draft_tokens: int = 0
    accepted: int = 0
    accepted_per_pos: list[int] = field(default_factory=list)
    draft_tokens_per_pos: list[int] = field(default_factory=list)
    emitted: int | None = None
    #: False when the branch reported no spec stats for the step at all.
    reported: bool = True

    def value(self, name: str) -> object:
        return getattr(self, name)


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
        """The steps worth showing: those within `context` of a disagreeing step (or the first `lead`
        steps when none disagrees), the rest folded into `Elided`; at most `limit` steps shown."""
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
    tier: Tier, scenario: ScenarioBase, run: ProbeRun, reading: Reading, branch: str
) -> Trace:
    """The trace of one recorded run (with its steps)."""
    source = run.totals.emitted_source if run.totals is not None else "implied"
    k = int(getattr(scenario, "k", 0) or 0)
    expected = tier.expected_steps(scenario, run, reading)
    steps = []
    for record, want in zip(run.steps, expected):
        recorded = _recorded(record.stats, source, k)
        oracle = _expected(want, k) if want is not None else None
        steps.append(
            TraceStep(
                step=record.step,
                requests=_requests(record),
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
    """(branch, scenario, label) -> trace, for every given result whose run was recorded with steps."""
    out = {}
    for result in results:
        key = (result.branch, result.scenario, result.label)
        run, scenario, tier = (
            recorded.get(key),
            scenarios.get(result.scenario),
            tiers.REGISTRY.get(result.tier),
        )
        if run is None or scenario is None or tier is None or not run.steps:
            continue
        out[key] = build_trace(tier, scenario, run, reading, result.branch)
    return out


def _requests(record: StepRecord) -> list[RequestStep]:
    ids = list(dict.fromkeys([*record.scheduled, *record.drafts, *record.sampled, *record.emitted]))
    return [
        RequestStep(
            request=rid,
            drafts=list(record.drafts.get(rid, [])),
            invalid=record.invalid.get(rid, 0),
            sampled=list(record.sampled.get(rid, [])),
            emitted=list(record.emitted.get(rid, [])),
            finished=record.finished.get(rid, ""),
        )
        for rid in ids
    ]


def _padded(values: list[int], k: int) -> list[int]:
    return list(values) + [0] * max(0, k - len(values))


def _recorded(stats: StepStats | None, source: str, k: int) -> StatsRow:
    if stats is None:
        return StatsRow(
            accepted_per_pos=[0] * k, draft_tokens_per_pos=[0] * k, emitted=0, reported=False
        )
    if source.startswith("counter:"):
        value = stats.value(source.split(":", 1)[1], None)
        emitted = value if isinstance(value, int) else None
    else:
        emitted = stats.num_drafts + stats.num_accepted_tokens  # what the branch's mean implies
    return _row(stats, k, emitted)


def _expected(totals: Totals, k: int) -> StatsRow:
    return _row(totals, k, totals.num_emitted_tokens)


def _row(counts: StepStats | Totals, k: int, emitted: int | None) -> StatsRow:
    return StatsRow(
        rows=counts.num_drafts,
        draft_tokens=counts.num_draft_tokens,
        accepted=counts.num_accepted_tokens,
        accepted_per_pos=_padded(counts.num_accepted_tokens_per_pos, k),
        draft_tokens_per_pos=_padded(counts.num_draft_tokens_per_pos, k),
        emitted=emitted,
    )


def _differs(recorded: StatsRow, expected: StatsRow | None) -> list[str]:
    if expected is None:
        return []
    return [name for name in FIELDS if recorded.value(name) != expected.value(name)]
