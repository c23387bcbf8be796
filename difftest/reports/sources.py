"""What the outputs render from (`reports.registry`): a measuring command's report, and its kinds.

A `RunReport` is the run's evidence with the context the comparison left
beside it (the scenarios, the runs with their steps, the step traces) and
what the command decided (its exit code, `-v`). The gate's report adds the
gate's view of base and head, verify's report the differences it found. An
output declares the kind it needs; every kind of a report is a `RunReport`,
so the run's outputs (report.md, evidence.json, ...) are written for each.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Self

from difftest.core.evidence import Evidence
from difftest.core.gate import GateOutcome
from difftest.core.records import ProbeRun

if TYPE_CHECKING:
    from difftest.reports.trace import Trace
    from difftest.tiers.common.scenario import ScenarioBase

#: A recorded run's key: (branch, scenario, run label).
RunKey = tuple[str, str, str]


@dataclass(frozen=True, kw_only=True)
class RunReport:
    """The run's evidence and context: what the reports of `run`, `gate`, `verify` and `merge`
    render from.

    `scenarios` (by name) and `recorded` (runs with steps) let the conclusion name
    the oracle's reading as a row count's reason; `traces` are the HTML report's.
    """

    evidence: Evidence
    exit_code: int = 0
    scenarios: Mapping[str, ScenarioBase] | None = None
    recorded: Mapping[RunKey, ProbeRun] | None = None
    traces: Mapping[RunKey, Trace] | None = None
    #: The terminal report prints every scenario's counter table, not only the failing ones'.
    verbose: bool = False

    @classmethod
    def of(
        cls,
        evidence: Evidence,
        scenarios: Mapping[str, ScenarioBase],
        recorded: Mapping[RunKey, ProbeRun],
        **rest: Any,
    ) -> Self:
        """The report with the step trace of each result that does not pass (the HTML's)."""
        from difftest.reports.trace import (
            traces_for,
        )  # loads every tier: only once a report is made

        failing = [r for r in evidence.results if r.verdict != "pass"]
        traces = traces_for(failing, dict(recorded), dict(scenarios), evidence.reading)
        return cls(evidence=evidence, scenarios=scenarios, recorded=recorded, traces=traces, **rest)

    def json_fields(self) -> dict[str, Any]:
        """What the command adds to `--format json` beside the results: for every command, each
        branch's changed-line coverage (None where nothing was traced)."""
        coverage = self.evidence.coverage
        return {"coverage": coverage.model_dump(mode="json") if coverage is not None else None}


@dataclass(frozen=True, kw_only=True)
class GateReport(RunReport):
    """`difftest gate`'s report: the run's, with the gate's view of the head against the base."""

    outcome: GateOutcome
    base: str
    head: str

    def json_fields(self) -> dict[str, Any]:
        head_coverage = self.outcome.coverage
        return {
            **super().json_fields(),
            "base": self.base,
            "head": self.head,
            "gate": {
                "worse": self.outcome.worse,
                "not_verified": self.outcome.not_verified,
                "coverage": head_coverage.model_dump(mode="json") if head_coverage else None,
                "findings": [dataclasses.asdict(f) for f in self.outcome.findings],
            },
        }


@dataclass(frozen=True, kw_only=True)
class VerifyReport(RunReport):
    """`difftest verify`'s report: the re-run's, with how it differs from the evidence it re-ran."""

    differences: list[str]
    #: The evidence file verified, as the command line named it.
    evidence_file: str

    def json_fields(self) -> dict[str, Any]:
        return {
            **super().json_fields(),
            "identical": not self.differences,
            "differences": self.differences,
            "evidence_file": self.evidence_file,
        }


@dataclass(frozen=True, kw_only=True)
class BlameReport(RunReport):
    """`difftest blame`'s report: the evidence of the base, the branch and the sets of hunks it
    reports, with the search itself (`evidence.blame`), and the runs with their steps (the first
    step where each parts from the oracle)."""

    #: The output folder as the command line named it (the reproduce commands name its config).
    out: str

    def json_fields(self) -> dict[str, Any]:
        blame = self.evidence.blame
        return {
            **super().json_fields(),
            "blame": blame.model_dump(mode="json") if blame is not None else None,
        }
