"""What correct statistics are for a scheduler-tier run, computed from the scenario alone (no vLLM).

The script is played once per request (`play.play_request`: a request's
contribution does not depend on its batch), and the verifications are summed
by the one counting rule (`tiers.common.accounting`). The requests' expected
outputs come from the same play: a run whose outputs differ was not played as
scripted, whatever its counters say.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from difftest.core.records import ProbeRun, Reading, Totals
from difftest.tiers.common import accounting
from difftest.tiers.scheduler.play import play_request

if TYPE_CHECKING:
    from difftest.tiers.scheduler.scenario import Scenario


def expected_totals(scenario: Scenario, order: list[str], reading: Reading = "strict") -> Totals:
    """The totals a correct branch reports for a run of these requests (any order gives the
    same)."""
    data = scenario.probe_data()
    verifications = [v for rid in order for v in play_request(data, rid).verifications]
    return accounting.totals(verifications, scenario.k, reading)


def expected_outputs(scenario: Scenario, order: list[str]) -> dict[str, list[int]]:
    """The tokens each request must emit in total when the script is played right."""
    data = scenario.probe_data()
    return {rid: play_request(data, rid).output for rid in order}


def expected_steps(scenario: Scenario, run: ProbeRun, reading: Reading = "strict") -> list[Totals]:
    """The oracle's row for each recorded step: the played verification each request made in it.

    A request's first step with sampled tokens is its prefill (one token, no
    drafts); its n-th step with sampled tokens after that is its n-th
    verification in the play, whatever the batch around it.
    """
    data = scenario.probe_data()
    plays = {rid: play_request(data, rid) for rid in run.order}
    seen = {rid: -1 for rid in run.order}
    rows = []
    for step in run.steps:
        verifications = []
        for rid in step.scheduled or list(step.sampled):
            if rid not in plays or not step.sampled.get(rid):
                continue
            index = seen[rid]
            seen[rid] += 1
            if 0 <= index < len(plays[rid].verifications):
                verifications.append(plays[rid].verifications[index])
        rows.append(accounting.totals(verifications, scenario.k, reading))
    return rows
