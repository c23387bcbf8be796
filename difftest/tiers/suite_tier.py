"""The contract of a tier measured by test suites (tests): pytest sessions, judged by test
outcomes.

The measurer runs the repository's own pytest tests in every branch
environment, all branches at once in one pytest-xdist session per test tree
(`difftest.run.suites.measure`), with this tier's hooks:

    plan_suites(scenario, baseline, branches)
        -> which tests come from where, and the sessions
    suite_requirements(scenario)
        -> test-only packages (a folder on PYTHONPATH, never installed)
    plugin
        -> the pytest plugin (under `difftest.probe`) loaded in every process
    judge_suites(scenario, plan, outcomes, ...)
        -> one verdict per (branch, test source), and the judged records

A suite tier has one scenario (the test selection) and no counter table.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping
from typing import ClassVar

from difftest.core.records import Reading, Result, TestRecord
from difftest.core.suites import BranchTests, RawOutcome, SuitePlan
from difftest.tiers.base import Measurer, P, S, Tier, TierOutcome


class SuiteTier(Tier[S]):
    """A tier whose verdicts come from test outcomes in every branch, not from counter totals."""

    #: Module under `difftest.probe` loaded as a pytest plugin in every pytest process.
    plugin: ClassVar[str]

    @abstractmethod
    def plan_suites(
        self, scenario: S, baseline: BranchTests, branches: list[BranchTests]
    ) -> SuitePlan:
        """Which tests come from where (`TestSource`s) and the pytest sessions that run them."""

    @abstractmethod
    def suite_requirements(self, scenario: S) -> list[str]:
        """Test-only packages the sessions need, as pip requirements."""

    @abstractmethod
    def judge_suites(
        self,
        scenario: S,
        plan: SuitePlan,
        outcomes: list[RawOutcome],
        codes: list[str],
        baseline: str,
        reading: Reading,
        unmeasured: dict[str, str],
    ) -> tuple[list[Result], list[TestRecord]]:
        """One Result per (code branch, source) and every outcome judged; `unmeasured`: branches
        whose code ran nothing, and why."""

    def report_rows(self) -> list[str]:
        """No counter table: the tests' outcomes are the report."""
        return []

    def measure(
        self, scenarios: list[S], skipped: Mapping[str, str], measurer: Measurer[P]
    ) -> TierOutcome[P]:
        """The one test selection, run across every branch (nothing when this base cannot run
        it)."""
        runnable = [s for s in scenarios if s.name not in skipped]
        if not runnable:
            return TierOutcome()
        (scenario,) = runnable
        return measurer.run_suites(self, scenario)
