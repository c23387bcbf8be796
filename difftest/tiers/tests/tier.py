"""The tests tier: the repository's own tests, and each branch's new tests, run on every branch's
code.

The scheduler and engine tiers measure counters against an oracle; this tier
reads test outcomes. A test that passes on the baseline and fails on a branch is
that branch's regression (`broken`, with the failing assertion); a test failing
everywhere is reported and judged by nobody; a test that cannot be collected or
run on a branch is "could not measure". Branches run side by side in pytest-xdist
sessions (`difftest.run.suites.measure`); `sources.py` plans them, `judge.py` judges.
"""

from __future__ import annotations

from difftest.core.config import Config, TestsSpec
from difftest.core.records import Reading, Result, TestRecord
from difftest.core.suites import BranchTests, RawOutcome, SuitePlan
from difftest.tiers.base import BaselineTree
from difftest.tiers.suite_tier import SuiteTier
from difftest.tiers.tests import judge, sources
from difftest.tiers.tests.selection import (
    TestSelection,
    refuse_paths_naming_nothing,
    selection_from,
)


class TestsTier(SuiteTier[TestSelection]):
    __test__ = False  # not a pytest test class, despite the name

    name = "tests"
    plugin = "difftest.probe.tests.plugin"
    scenario_model = TestSelection

    def scenarios(self, config: Config, explicit: bool) -> list[TestSelection] | None:
        if config.tests is None and not explicit:
            return None
        return [selection_from(config.tests or TestsSpec())]

    def refuse_before_build(self, scenarios: list[TestSelection], tree: BaselineTree) -> None:
        for selection in scenarios:
            refuse_paths_naming_nothing(selection, tree)

    def plan_suites(
        self, scenario: TestSelection, baseline: BranchTests, branches: list[BranchTests]
    ) -> SuitePlan:
        return sources.plan(
            baseline, branches, scenario.select, scenario.keyword, scenario.deselect
        )

    def suite_requirements(self, scenario: TestSelection) -> list[str]:
        return list(scenario.requirements)

    def judge_suites(
        self,
        scenario: TestSelection,
        plan: SuitePlan,
        outcomes: list[RawOutcome],
        codes: list[str],
        baseline: str,
        reading: Reading,
        unmeasured: dict[str, str],
    ) -> tuple[list[Result], list[TestRecord]]:
        records = judge.judge_records(outcomes, baseline)
        labels = [s.label for s in plan.sources]
        return judge.verdicts(
            records, codes, labels, scenario.name, self.name, reading, unmeasured
        ), records
