"""The oracle's row per step (`Tier.expected_steps`) on real probe runs of every shipped branch
(slow).

The rows are what `difftest show` and the HTML trace set beside the branch's
own stats, so they must be the oracle's totals split by step: summed, they
equal `Tier.expected` for every run, tier and reading; a run that matches the
oracle agrees with it on every step; and pr-56195-style's broken orders part
from it at the first step that verified drafts, with the earlier requests'
rows missing.
"""

from __future__ import annotations

import pytest

from difftest import tiers
from difftest.core.records import COUNTERS, ProbeRun, Totals
from difftest.reports.trace import build_trace

pytestmark = pytest.mark.slow

BRANCHES = ("main", "pr-56137-style", "pr-56195-style")
MIXED = "mixed-batch-invalid-async"


def _summed(rows: list[Totals | None], k: int) -> dict[str, object]:
    out: dict[str, object] = {}
    for counter in COUNTERS:
        values = [getattr(r, counter) for r in rows if r is not None]
        if counter.endswith("_per_pos"):
            out[counter] = (
                [sum(column) for column in zip(*values, strict=True)] if values else [0] * k
            )
        else:
            out[counter] = sum(values)
    return out


def _measured(
    probe_runs, shipped_scenarios, tier_name: str, branch: str
) -> list[tuple[object, ProbeRun]]:
    scenarios = {s.name: s for s in shipped_scenarios(tier_name)}
    return [(scenarios[r.scenario], r) for r in probe_runs(tier_name, branch) if r.measured]


@pytest.mark.parametrize("tier_name", ["scheduler", "engine"])
@pytest.mark.parametrize("branch", BRANCHES)
def test_rows_per_step_sum_to_the_oracle_totals(probe_runs, shipped_scenarios, tier_name, branch):
    tier = tiers.get(tier_name)
    checked = 0
    for scenario, run in _measured(probe_runs, shipped_scenarios, tier_name, branch):
        for reading in ("strict", "lenient"):
            rows = tier.expected_steps(scenario, run, reading)
            assert len(rows) == len(run.steps)
            want = tier.expected(scenario, run, reading)
            assert _summed(rows, scenario.k) == {c: getattr(want, c) for c in COUNTERS}, (
                run.scenario,
                run.label,
                reading,
            )
            checked += 1
    assert checked > 20


@pytest.mark.parametrize("tier_name", ["scheduler", "engine"])
@pytest.mark.parametrize("branch", BRANCHES)
def test_a_run_that_matches_the_oracle_agrees_on_every_step(
    probe_runs, shipped_scenarios, tier_name, branch
):
    tier = tiers.get(tier_name)
    agreeing = 0
    for scenario, run in _measured(probe_runs, shipped_scenarios, tier_name, branch):
        want = tier.expected(scenario, run, "strict")
        if any(getattr(run.totals, c) != getattr(want, c) for c in COUNTERS):
            continue
        trace = build_trace(tier, scenario, run, "strict", branch)
        assert trace.first is None, (run.scenario, run.label, trace.steps[trace.first].differs)
        agreeing += 1
    assert agreeing > 0


def test_the_56195_style_broken_orders_part_at_the_first_verifying_step(
    probe_runs, shipped_scenarios
):
    tier = tiers.get("scheduler")
    mixed = next(s for s in shipped_scenarios("scheduler") if s.name == MIXED)
    for run in probe_runs("scheduler", "pr-56195-style"):
        if run.scenario != MIXED or run.role != "batch" or run.order[0] == "grammar":
            continue
        trace = build_trace(tier, mixed, run, "strict", "pr-56195-style")
        first = trace.steps[trace.first]
        assert first.step == next(s.step for s in run.steps if s.drafts)
        assert "rows" in first.differs and first.recorded.rows < first.expected.rows
        lost = run.order[
            : run.order.index("grammar")
        ]  # the requests scheduled before the invalid one
        assert first.expected.rows - first.recorded.rows == len(lost)
