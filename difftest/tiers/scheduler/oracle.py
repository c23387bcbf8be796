"""What correct statistics are for a scheduler-tier run, computed from the scenario and the
scheduler's recorded decisions (no vLLM).

Each request is played from the script (`play.play_request`) along the schedule
the branch's scheduler gave it in this run (`schedule.request_schedules`: the
token budget's cuts, preemptions, aborts; nothing else is taken from the
records), and the verifications are summed by the one counting rule
(`tiers.common.accounting`). Without such conditions a request's play is the
same in every batch. The requests' expected outputs come from the same play: a
run whose outputs differ was not played as scripted, whatever its counters say.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from difftest.core.records import ProbeRun, Reading, Totals
from difftest.tiers.common import accounting
from difftest.tiers.common.accounting import Verification
from difftest.tiers.common.schedule import NO_SCHEDULE, request_schedules
from difftest.tiers.common.steps import sampled
from difftest.tiers.scheduler.play import RequestPlay, play_request

if TYPE_CHECKING:
    from difftest.tiers.scheduler.scenario import Scenario


#: A recorded run, or just the ids of a batch: each request then runs as it would alone.
RunOrOrder = ProbeRun | Sequence[str]


def plays(scenario: Scenario, run: RunOrOrder) -> dict[str, RequestPlay]:
    """Every request of the run, played along the schedule the run recorded for it."""
    data = scenario.play_data
    if isinstance(run, ProbeRun):
        schedules = request_schedules(run, scenario.max_num_batched_tokens)
        return {rid: play_request(data, rid, schedules[rid]) for rid in run.order}
    return {rid: play_request(data, rid, NO_SCHEDULE) for rid in run}


def expected_totals(scenario: Scenario, run: RunOrOrder, reading: Reading = "strict") -> Totals:
    """The totals a correct branch reports for this run."""
    verifications = [v for play in plays(scenario, run).values() for v in play.verifications]
    return accounting.totals(verifications, scenario.k, reading)


def expected_outputs(scenario: Scenario, run: RunOrOrder) -> dict[str, list[int]]:
    """The tokens each request must emit in total when the script is played right."""
    return {rid: play.output for rid, play in plays(scenario, run).items()}


def expected_steps(scenario: Scenario, run: ProbeRun, reading: Reading = "strict") -> list[Totals]:
    """The oracle's row for each recorded step: the verification each request made in it.

    A request's n-th recorded step with sampled tokens is its n-th sampling step
    in the play (index 0: its first token), whatever the batch around it.
    """
    played = plays(scenario, run)
    seen = {rid: 0 for rid in run.order}
    rows = []
    for step in run.steps:
        verifications: list[Verification] = []
        for rid in step.scheduled or list(step.sampled):
            if rid not in played or not sampled(step, rid):
                continue
            index = seen[rid]
            seen[rid] += 1
            made = played[rid].steps[index] if index < len(played[rid].steps) else None
            if made is not None:
                verifications.append(made)
        rows.append(accounting.totals(verifications, scenario.k, reading))
    return rows
