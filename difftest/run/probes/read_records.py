"""Reading a probe's RUNS.jsonl into exactly one `ProbeRun` per planned run, trusting nothing.

Each line is checked on its own (`difftest.probe.protocol` is the contract):
- it must be JSON, carry this probe's nonce (a record without it was not
  written by the probe: the whole output is then untrusted), and be one of
  the known kinds, with no unknown keys and integer counters;
- a run record must be for a planned run, and only once (a duplicate makes
  that run an error: which one would be the real one?);
- the trailer must come last and count the run records; a probe that ends
  without it (killed, crashed, or `exit(0)` from branch code) leaves the runs
  it did not report as errors, each with the reason.
A torn last line (the probe was killed mid-write) is ignored. Every string is
cleaned as it is read (`core.text`: lone surrogates, NUL, ESC, ...), so nothing
a branch writes can crash or corrupt a report.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from difftest.core.outcome import ProcessOutcome
from difftest.core.records import CoverageRecord, ProbeCoverage, ProbeHeader, ProbeRun, Trailer
from difftest.core.text import loads_clean
from difftest.core.values import quote
from difftest.probe.protocol import Job, PlannedRun
from difftest.run.probes.files import read_probe_text

M = TypeVar("M", bound=BaseModel)


@dataclass
class Delivery:
    """What one probe's output file says, checked."""

    plan: list[tuple[str, PlannedRun]]
    tier: str
    header: ProbeHeader | None = None
    trailer: Trailer | None = None
    found: dict[tuple[str, str], ProbeRun] = field(default_factory=dict)
    #: Per planned run, why its record cannot be used.
    rejected: dict[tuple[str, str], str] = field(default_factory=dict)
    #: Problems that make the whole output untrusted (forged or foreign records, a wrong count).
    untrusted: list[str] = field(default_factory=list)
    #: Why runs without a record have none, beyond the process's own error.
    incomplete: str | None = None
    #: Whether the job asked the probe to trace files (`probe.tracing`).
    traced: bool = False
    #: The probe's coverage record, validated; None when it wrote none.
    coverage_record: CoverageRecord | None = None
    #: Why the coverage record cannot be used, when it is there but wrong.
    coverage_problem: str = ""

    def unreported(self) -> list[list[str]]:
        """The planned runs ([scenario, label]) with no record at all: cut short by the process's
        end."""
        return [
            [s, planned["label"]]
            for s, planned in self.plan
            if (s, planned["label"]) not in self.found
            and (s, planned["label"]) not in self.rejected
        ]

    @property
    def trusted(self) -> bool:
        return not self.untrusted

    def outcome(self, **process: Any) -> ProcessOutcome:
        """The process outcome: what the host saw of the process (`process`), and what these records
        show of it (its session started, its trailer, the runs it never reported)."""
        return ProcessOutcome(
            trailer=self.trailer is not None and self.trusted,
            started=self.header is not None and self.trusted,
            unreported=self.unreported(),
            **process,
        )

    def coverage(self) -> ProbeCoverage | None:
        """What the probe traced, as the host can vouch for it: None when the job asked for no
        tracing; `unknown` with the reason when the record is missing, invalid, repeated or in an
        output that cannot be trusted."""
        if not self.traced:
            return None
        why = ""
        if self.untrusted:
            why = f"the probe's output cannot be trusted: {self.untrusted[0]}"
        elif self.coverage_problem:
            why = self.coverage_problem
        elif self.coverage_record is None:
            why = "the probe reported no coverage (it ended before its last records)"
        if why:
            return ProbeCoverage(status="unknown", why=why)
        assert self.coverage_record is not None
        return ProbeCoverage.model_validate(
            self.coverage_record.model_dump(exclude={"kind", "nonce"})
        )

    def runs(self, process_error: str | None) -> list[ProbeRun]:
        """One ProbeRun per planned run, in plan order."""
        out = []
        for scenario, planned in self.plan:
            key = (scenario, planned["label"])
            reason = None
            if self.untrusted:
                reason = f"the probe's output cannot be trusted: {self.untrusted[0]}"
            elif key in self.rejected:
                reason = self.rejected[key]
            elif key not in self.found:
                reason = process_error or self.incomplete or "the probe did not report this run"
            if reason is None:
                out.append(self.found[key])
            else:
                out.append(_error_run(scenario, planned, self.tier, reason))
        return out


def read_delivery(path: Path, nonce: str, job: Job, tier: str, exited_cleanly: bool) -> Delivery:
    """Check every line of `path` (a probe's RUNS.jsonl) against the job's plan."""
    lines = read_probe_text(path).splitlines() if os.path.lexists(path) else []
    return check_lines(lines, nonce, job, tier, exited_cleanly)


def check_lines(
    lines: list[str], nonce: str, job: Job, tier: str, exited_cleanly: bool
) -> Delivery:
    """Check a probe's answer to one job, line by line (a file's lines, or a served probe's
    answer)."""
    plan = [(s["name"], run) for s in job["scenarios"] for run in s["runs"]]
    delivery = Delivery(plan=plan, tier=tier, traced=bool(job.get("trace")))
    planned = {(name, run["label"]): run for name, run in plan}
    run_records = 0
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = loads_clean(line)
        except ValueError:
            if number == len(lines) and delivery.trailer is None:
                continue  # torn: the probe was killed while writing it
            delivery.untrusted.append(f"line {number} is not JSON")
            continue
        if not isinstance(record, dict):
            delivery.untrusted.append(f"line {number} is not a record")
            continue
        if record.get("nonce") != nonce:
            delivery.untrusted.append(
                f"line {number} does not carry this probe's nonce "
                "(it was written by something else, such as the branch's code)"
            )
            continue
        if delivery.trailer is not None:
            delivery.untrusted.append(f"line {number} comes after the trailer")
            continue
        kind = record.get("kind")
        if kind == "header":
            delivery.header = _envelope(ProbeHeader, record, delivery, number)
        elif kind == "run":
            run_records += 1
            if delivery.header is None:
                delivery.untrusted.append(f"line {number} reports a run before the probe's header")
                continue
            _run(record, delivery, planned, number)
        elif kind == "coverage":
            _coverage(record, delivery, number)
        elif kind == "trailer":
            delivery.trailer = _envelope(Trailer, record, delivery, number)
        else:
            delivery.untrusted.append(f"line {number} has an unknown kind {quote(kind)}")
    if delivery.trailer is not None and delivery.trailer.runs != run_records:
        delivery.untrusted.append(
            f"the trailer counts {delivery.trailer.runs} run record(s), "
            f"the file holds {run_records}"
        )
    if delivery.trailer is None and exited_cleanly:
        delivery.incomplete = (
            "the probe exited with code 0 but without its trailer: its output is incomplete"
        )
    return delivery


def _envelope(model: type[M], record: dict[str, Any], delivery: Delivery, number: int) -> M | None:
    """The header or the trailer, validated; a bad one makes the whole output untrusted."""
    try:
        return model.model_validate(record)
    except ValidationError as exc:
        delivery.untrusted.append(
            f"line {number}: invalid {record.get('kind')}: {validation_summary(exc)}"
        )
        return None


def _coverage(record: dict[str, Any], delivery: Delivery, number: int) -> None:
    """The coverage record: one, valid, asked for; otherwise the coverage reads unknown (the runs
    stay as they are: a tracer's trouble is not the counters')."""
    if not delivery.traced:
        delivery.coverage_problem = f"line {number} reports coverage the job did not ask for"
    elif delivery.coverage_record is not None or delivery.coverage_problem:
        delivery.coverage_record = None
        delivery.coverage_problem = f"line {number} repeats the coverage record"
    else:
        try:
            delivery.coverage_record = CoverageRecord.model_validate(record)
        except ValidationError as exc:
            delivery.coverage_problem = (
                f"line {number}: invalid coverage record: {validation_summary(exc)}"
            )


def _run(
    record: dict[str, Any],
    delivery: Delivery,
    planned: dict[tuple[str, str], PlannedRun],
    number: int,
) -> None:
    key = (str(record.get("scenario")), str(record.get("label")))
    plan = planned.get(key)
    if plan is None:
        delivery.untrusted.append(f"line {number} reports a run that was not planned: {quote(key)}")
        return
    if key in delivery.found or key in delivery.rejected:
        delivery.found.pop(key, None)
        delivery.rejected[key] = f"duplicate records for this run (line {number} repeats it)"
        return
    body = {k: v for k, v in record.items() if k not in ("kind", "nonce")}
    try:
        run = ProbeRun.model_validate({**body, "tier": delivery.tier})
    except ValidationError as exc:
        delivery.rejected[key] = (
            f"the probe's record for this run is invalid: {validation_summary(exc)}"
        )
        return
    if run.role != plan["role"] or run.order != list(plan["order"]):
        delivery.rejected[key] = (
            f"the record says role {run.role} and order {run.order}; "
            f"the plan says {plan['role']} and {plan['order']}"
        )
        return
    delivery.found[key] = run


def validation_summary(exc: ValidationError, limit: int = 3) -> str:
    """`field: message (got value)` for the first few errors, values cut short."""
    parts = []
    for err in exc.errors()[:limit]:
        where = ".".join(str(p) for p in err["loc"]) or "(record)"
        got = "" if err["type"] == "missing" else f" (got {quote(err.get('input'))})"
        parts.append(f"{where}: {err['msg']}{got}")
    more = f"; and {exc.error_count() - limit} more" if exc.error_count() > limit else ""
    return "; ".join(parts) + more


def _error_run(scenario: str, planned: PlannedRun, tier: str, reason: str) -> ProbeRun:
    return ProbeRun(
        scenario=scenario,
        tier=tier,
        label=planned["label"],
        role=planned["role"],
        order=list(planned["order"]),
        status="error",
        error=reason,
    )
