"""The data that flows between layers: probe records (as the host validates them), totals, verdicts.

The probe writes plain JSON in the shapes of `difftest.probe.protocol`; the host
validates each record against the models here, which forbid unknown keys and
accept only integers for counters, so a record that is not what the protocol
says is rejected (and becomes an `error` result for its run) instead of being
half-read. Everything after the runner reads these models only. `Totals` and
`StepStats` take their counter fields from `protocol.COUNTER_TABLE`
(`totals_model`, `step_stats_model`): a counter added there is a field here.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictFloat,
    StrictInt,
    StrictStr,
    create_model,
    field_validator,
    model_validator,
)

from difftest.probe.protocol import (
    COUNTER_TABLE,
    COUNTERS,
    Counter,
    FailureKind,
    Origin,
    RunRole,
    RunStatus,
)

__all__ = [
    "COUNTER_TABLE",
    "COUNTERS",
    "Counter",
    "Difference",
    "Failure",
    "ProbeHeader",
    "ProbeRun",
    "Reading",
    "Result",
    "RunRole",
    "StepRecord",
    "StepStats",
    "TestJudgement",
    "TestOutcome",
    "TestRecord",
    "Totals",
    "Trailer",
    "Verdict",
    "Violation",
]

Verdict = Literal["pass", "diverge", "broken", "error"]
Reading = Literal["strict", "lenient"]
#: What one test did on one branch's code (the tests tier). `not-collected`: its module did not
#: import or collect in that environment; `not-run`: the session or the worker never got to it.
TestOutcome = Literal["passed", "failed", "error", "skipped", "xfailed", "not-collected", "not-run"]
#: How a test outcome is judged against the baseline's outcome of the same test:
#: `pass` passes (as on the baseline), `fixed` passes where the baseline does not, `regression`
#: passes on the baseline and fails here (the branch is broken), `fails-on-baseline` does not pass
#: here nor on the baseline (judged by nobody), `skipped` is skipped here, `unmeasured` could not
#: be collected or run here while the baseline could (could not measure).
TestJudgement = Literal["pass", "fixed", "regression", "fails-on-baseline", "skipped", "unmeasured"]


class _Record(BaseModel):
    """Protocol data: unknown keys are an error, not silently dropped."""

    model_config = ConfigDict(extra="forbid")


def _counter_field(counter: Counter) -> tuple[Any, Any]:
    """A counter's field: a strict integer, or a list of them (one per draft position)."""
    if counter.per_position:
        return (list[StrictInt], Field(default_factory=list))
    return (StrictInt, 0)


class _TotalsBase(_Record):
    """SpecDecodingStats summed over every step of one run.

    `num_emitted_tokens` is the branch's own emitted/committed counter when it
    defines one (`emitted_source` names the field), otherwise what its mean
    acceptance length implies (`num_drafts + num_accepted_tokens`,
    `emitted_source == "implied"`). `mean_acceptance_length` is the value the
    branch itself logs; `extra` keeps every other field the branch added.
    """

    @field_validator("mean_acceptance_length", check_fields=False)
    @classmethod
    def _finite_or_none(cls, value: float | int | None) -> float | None:
        """NaN (a log with no drafts) reads as "none logged"."""
        if value is None or math.isnan(value):
            return None
        return float(value)


#: Totals' fields after its counters, in JSON order (a base class's fields would come first).
_TOTALS_AFTER: dict[str, Any] = {
    "emitted_source": (StrictStr, "implied"),
    "mean_acceptance_length": (StrictFloat | StrictInt | None, None),
    "extra": (dict[str, Any], Field(default_factory=dict)),
}


def totals_model(table: tuple[Counter, ...]) -> type[_TotalsBase]:
    """`Totals` for a counter table: one field per counter in the table's order, then the rest."""
    fields: dict[str, Any] = {c.name: _counter_field(c) for c in table} | _TOTALS_AFTER
    return create_model(
        "Totals", __base__=_TotalsBase, __module__=__name__, __doc__=_TotalsBase.__doc__, **fields
    )


class _StepStatsBase(BaseModel):
    """One step's SpecDecodingStats: the counters difftest reads must be integers; a branch's
    own added fields are kept as they are."""

    model_config = ConfigDict(extra="allow")

    num_spec_tokens: StrictInt | None = None

    def value(self, name: str, default: Any = 0) -> Any:
        """A field by name, the branch's own fields included."""
        return getattr(self, name, default)


def step_stats_model(table: tuple[Counter, ...]) -> type[_StepStatsBase]:
    """`StepStats` for a counter table: a field for each counter every branch names as the table
    does; the names a branch may give the others (`Counter.branch_names`) must hold integers."""
    branch_named = tuple(name for c in table for name in c.branch_names)

    def _branch_named_are_integers(self: _StepStatsBase) -> _StepStatsBase:
        for name in branch_named:
            value = (self.model_extra or {}).get(name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
                raise ValueError(f"{name} must be an integer, got {value!r}")
        return self

    validators: dict[str, Any] = {
        "_branch_named_are_integers": model_validator(mode="after")(_branch_named_are_integers)
    }
    fields: dict[str, Any] = {c.name: _counter_field(c) for c in table if not c.branch_names}
    return create_model(
        "StepStats",
        __base__=_StepStatsBase,
        __module__=__name__,
        __doc__=_StepStatsBase.__doc__,
        __validators__=validators,
        **fields,
    )


if TYPE_CHECKING:
    # What `totals_model` and `step_stats_model` make of `COUNTER_TABLE`, written out for the type
    # checker, which cannot run them: so it still knows each counter's type, and the calls that
    # build these models by keyword are checked. Only mypy reads these classes. A counter added to
    # the table is a field at run time without a line here; add one when code names it as an
    # attribute (mypy says so). tests/unit/test_counter_table.py fails on a line that is not what
    # the table derives (name, order, type).

    class Totals(_TotalsBase):
        num_drafts: StrictInt = 0
        num_draft_tokens: StrictInt = 0
        num_accepted_tokens: StrictInt = 0
        num_accepted_tokens_per_pos: list[StrictInt] = Field(default_factory=list)
        num_draft_tokens_per_pos: list[StrictInt] = Field(default_factory=list)
        num_emitted_tokens: StrictInt = 0
        emitted_source: StrictStr = "implied"
        mean_acceptance_length: StrictFloat | StrictInt | None = None
        extra: dict[str, Any] = Field(default_factory=dict)

    class StepStats(_StepStatsBase):
        num_drafts: StrictInt = 0
        num_draft_tokens: StrictInt = 0
        num_accepted_tokens: StrictInt = 0
        num_accepted_tokens_per_pos: list[StrictInt] = Field(default_factory=list)
        num_draft_tokens_per_pos: list[StrictInt] = Field(default_factory=list)

else:
    Totals = totals_model(COUNTER_TABLE)
    StepStats = step_stats_model(COUNTER_TABLE)


class StepRecord(_Record):
    """One engine step as the probe saw it, per request id (`protocol.StepRecord`)."""

    step: StrictInt
    scheduled: list[StrictStr] = Field(default_factory=list)
    drafts: dict[str, list[StrictInt]] = Field(default_factory=dict)
    invalid: dict[str, StrictInt] = Field(default_factory=dict)
    sampled: dict[str, list[StrictInt]] = Field(default_factory=dict)
    emitted: dict[str, list[StrictInt]] = Field(default_factory=dict)
    finished: dict[str, StrictStr] = Field(default_factory=dict)
    stats: StepStats | None = None
    #: Requests whose drafting the model runner skipped for this step (its zero-fill is no draft).
    skipped: list[StrictStr] = Field(default_factory=list)
    #: Tokens scheduled per request (older records: absent).
    tokens: dict[str, StrictInt] = Field(default_factory=dict)
    #: Requests the scheduler reported preempted with this step (while scheduling it; or, for a
    #: prefix-cache reset's, with the step that resumes them).
    preempted: list[StrictStr] = Field(default_factory=list)
    #: Requests the probe aborted between this step's schedule() and update_from_output().
    aborted: list[StrictStr] = Field(default_factory=list)
    #: Requests whose output of this step the scheduler dropped: in flight at a
    #: `reset_prefix_cache` that preempted them (older records: absent).
    dropped: list[StrictStr] = Field(default_factory=list)
    #: Requests a prefix-cache reset after this step's output preempted (older records: absent).
    reset: list[StrictStr] = Field(default_factory=list)


class Failure(_Record):
    """Why a run failed inside the probe (`protocol.Failure`)."""

    kind: FailureKind
    type: str
    summary: str
    where: str = ""
    origin: Origin = "other"
    traceback: str = ""


class CodeOrigin(_Record):
    """Where the probe's vLLM came from (`protocol.code_origin`): checked against the branch
    environment."""

    vllm_dir: str
    vllm_elsewhere: list[str]
    executable: str


class ProbeHeader(_Record):
    """The probe's first record: versions, timings, tier facts (`protocol.RecordWriter.header`)."""

    kind: Literal["header"]
    nonce: str
    protocol: StrictInt
    python: str
    import_s: float
    setup_s: float
    info: dict[str, Any] = Field(default_factory=dict)
    #: None only in records written before the probe reported it (evidence schema < 8).
    origin: CodeOrigin | None = None


class Trailer(_Record):
    """The probe's last record: how many runs it wrote."""

    kind: Literal["trailer"]
    nonce: str
    runs: StrictInt


class FileCoverage(_Record):
    """What coverage.py recorded for one traced file: executed lines, and arcs (`[from, to]`,
    negative numbers for entering and leaving a code object, as coverage.py writes them)."""

    lines: list[StrictInt] = Field(default_factory=list)
    arcs: list[tuple[StrictInt, StrictInt]] = Field(default_factory=list)


class ProbeCoverage(_Record):
    """What one probe traced of the job's files (`probe.tracing`): `ok` with the files it executed
    (paths `vllm/...`), or `unknown` with the reason (the tracer did not start, was stopped or
    replaced by the branch, or the probe's output cannot be trusted)."""

    status: Literal["ok", "unknown"]
    why: str = ""
    files: dict[str, FileCoverage] = Field(default_factory=dict)
    #: Which coverage.py tracer ran (`CTracer`; `PyTracer` is many times slower).
    core: str = ""


class CoverageRecord(ProbeCoverage):
    """The probe's `coverage` record, written after its runs and before its trailer."""

    kind: Literal["coverage"]
    nonce: str


class ProbeRun(_Record):
    """One planned run of one branch: what the probe recorded, or why there is no record.

    `error` is the host's one-line reason when the run could not be measured
    (the probe's failure summary, a record the host rejected, a probe that
    died before reporting the run); `failure` is the probe's own account of an
    exception, kept whole for reports.
    """

    scenario: str
    tier: str
    label: str
    role: RunRole
    #: Request ids in the order they were added; `alone` runs hold one id.
    order: list[str]
    status: RunStatus = "ok"
    error: str | None = None
    failure: Failure | None = None
    steps: list[StepRecord] = Field(default_factory=list)
    totals: Totals | None = None
    outputs: dict[str, list[StrictInt]] = Field(default_factory=dict)
    finish_reasons: dict[str, str] = Field(default_factory=dict)
    duration_s: float = 0.0
    notes: dict[str, Any] = Field(default_factory=dict)

    @property
    def measured(self) -> bool:
        return self.status == "ok" and self.totals is not None


class Difference(BaseModel):
    counter: str
    measured: Any
    expected: Any
    #: The oracle's reading of the difference, in a sentence.
    explanation: str = ""


class Violation(BaseModel):
    """An invariant that a measured run breaks: lost stats, order dependence, ..."""

    invariant: str
    label: str
    detail: str
    counter: str | None = None
    measured: Any = None
    expected: Any = None
    #: The requests the violation is about where they can be named (e.g. those whose stats were
    #: lost).
    requests: list[str] = Field(default_factory=list)
    #: For a crash or hang where the baseline completes: what broke, without the baseline's part
    #: (the exception and where it was raised, or how the probe ended). Two crashes are two
    #: findings: blame compares this.
    cause: str = ""


class Result(BaseModel):
    """The verdict for one (branch, scenario, run label)."""

    branch: str
    scenario: str
    tier: str
    label: str
    verdict: Verdict
    reading: Reading
    measured: Totals | None = None
    expected: Totals | None = None
    differences: list[Difference] = Field(default_factory=list)
    violations: list[Violation] = Field(default_factory=list)
    #: Why it could not be measured (verdict error): one line.
    error: str | None = None
    #: The scenario's one-line statement of what it probes.
    statement: str = ""
    duration_s: float = 0.0


class TestRecord(BaseModel):
    """One test of one test source, run on one branch's code, and how it is judged."""

    __test__ = False  # not a pytest test class, despite the name

    #: The test source: `upstream` (the selection, from the baseline's tree) or `from:<branch>`.
    source: str
    #: The branch whose code ran the test.
    code: str
    #: The pytest node id, as in the source's own tree.
    test: str
    outcome: TestOutcome
    #: The failure's first line (the failing assertion), the skip reason, or why it was not run.
    message: str = ""
    judgement: TestJudgement
    duration_s: float = 0.0
