"""The data that flows between layers: probe records, oracle totals, verdicts.

The probe (inside a branch environment) writes plain JSON in the shape of
`ProbeRun`; everything after it reads these models. Keeping them in one module
is what lets the probe, the oracle, the verdicts and the reports evolve
separately.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Verdict = Literal["pass", "diverge", "broken", "error"]
Reading = Literal["strict", "lenient"]
Tier = Literal["scheduler", "engine"]

#: The counters compared against the oracle, in table order.
COUNTERS = (
    "num_drafts",
    "num_draft_tokens",
    "num_accepted_tokens",
    "num_accepted_tokens_per_pos",
    "num_draft_tokens_per_pos",
    "num_emitted_tokens",
)


class Totals(BaseModel):
    """SpecDecodingStats summed over every step of one run.

    `num_emitted_tokens` is the branch's own emitted/committed counter when it
    defines one (`emitted_source` names the field), otherwise what its mean
    acceptance length implies (`num_drafts + num_accepted_tokens`,
    `emitted_source == "implied"`). `mean_acceptance_length` is the value the
    branch itself logs; `extra` keeps every other field the branch added.
    """

    model_config = ConfigDict(extra="forbid")

    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    num_accepted_tokens_per_pos: list[int] = Field(default_factory=list)
    num_draft_tokens_per_pos: list[int] = Field(default_factory=list)
    num_emitted_tokens: int = 0
    emitted_source: str = "implied"
    mean_acceptance_length: float | None = None
    extra: dict[str, Any] = Field(default_factory=dict)


class StepRecord(BaseModel):
    """One engine step as the probe saw it, per request id."""

    step: int
    scheduled: list[str] = Field(default_factory=list)
    drafts: dict[str, list[int]] = Field(default_factory=dict)
    invalid: dict[str, int] = Field(default_factory=dict)
    sampled: dict[str, list[int]] = Field(default_factory=dict)
    emitted: dict[str, list[int]] = Field(default_factory=dict)
    finished: dict[str, str] = Field(default_factory=dict)
    #: Every field of the step's SpecDecodingStats, or None if the step had none.
    stats: dict[str, Any] | None = None


class ProbeRun(BaseModel):
    """One (scenario, order) run of one branch, written by the probe."""

    scenario: str
    tier: Tier
    #: Request ids in the order they were added; `alone:<id>` runs hold one id.
    order: list[str]
    label: str
    status: Literal["ok", "error", "timeout"] = "ok"
    error: str | None = None
    steps: list[StepRecord] = Field(default_factory=list)
    totals: Totals | None = None
    outputs: dict[str, list[int]] = Field(default_factory=dict)
    finish_reasons: dict[str, str] = Field(default_factory=dict)
    duration_s: float = 0.0
    notes: dict[str, Any] = Field(default_factory=dict)


class Difference(BaseModel):
    counter: str
    measured: Any
    expected: Any
    explanation: str = ""


class Violation(BaseModel):
    """An invariant that a measured run breaks: lost stats, order dependence, ..."""

    invariant: str
    label: str
    detail: str
    counter: str | None = None
    measured: Any = None
    expected: Any = None


class Result(BaseModel):
    """The verdict for one (branch, scenario, order)."""

    branch: str
    scenario: str
    tier: Tier
    order: str
    verdict: Verdict
    reading: Reading
    measured: Totals | None = None
    expected: Totals | None = None
    differences: list[Difference] = Field(default_factory=list)
    violations: list[Violation] = Field(default_factory=list)
    error: str | None = None
    #: The scenario's one-line statement of what it probes.
    explanation: str = ""
