"""What the branch's scheduler decided for each request, read from a run's step records.

Under serving conditions a request's steps depend on its batch: a small token
budget cuts a decode's draft block, a small KV pool preempts a request (its
next step recomputes the prompt and samples one token, with no drafts), an
abort discards a step in flight, a prefix-cache reset preempts every running
request and drops the output of a step still in flight for them. The oracle
follows those decisions (they are the scheduler's to make, and correct
statistics count what was verified), and nothing else: which drafts a step
verifies, what the verifier accepts and what stop handling keeps still come
from the script.

A request's *sampling steps* are the steps in which the model sampled tokens
for it, in order: index 0 is the step sampling its first token (the prefill's
last chunk, or a new decode padded with `-1` placeholders); every later index
is a step after it. The records number steps by their `schedule()` call.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

from difftest.core.records import ProbeRun
from difftest.tiers.common.steps import computed_drafts, restarts_after, sampled


@dataclass(frozen=True)
class Sampling:
    """One sampling step of a request, as the scheduler shaped it."""

    step: int
    #: Draft slots the model computed (padding and grammar-invalid slots included).
    slots: int
    #: The step used the whole token budget: fewer slots than drafts proposed is the budget's cut.
    budget_cut: bool = False
    #: The first sampling step after a preemption: the request recomputes and samples one token.
    restart: bool = False
    #: The probe aborted the request while this step was in flight: its output is discarded.
    aborted: bool = False


@dataclass(frozen=True)
class RequestSchedule:
    samplings: tuple[Sampling, ...] = ()

    def at(self, index: int) -> Sampling | None:
        return self.samplings[index] if index < len(self.samplings) else None


NO_SCHEDULE = RequestSchedule()


def request_schedules(run: ProbeRun, budget: int | None) -> dict[str, RequestSchedule]:
    """Each request's sampling steps in `run`; `budget` is the scenario's token budget (None: no
    step ever uses it up)."""
    samplings: dict[str, list[Sampling]] = {rid: [] for rid in run.order}
    preempted: set[str] = set()
    for step in run.steps:
        used = sum(step.tokens.values())
        cut = budget is not None and used >= budget
        for rid in step.scheduled:
            if rid in samplings and sampled(step, rid):
                samplings[rid].append(
                    Sampling(
                        step=step.step,
                        slots=len(computed_drafts(step, rid)),
                        budget_cut=cut,
                        restart=rid in preempted,
                        aborted=rid in step.aborted,
                    )
                )
                preempted.discard(rid)
        preempted |= restarts_after(step)
    return {rid: RequestSchedule(tuple(s)) for rid, s in samplings.items()}


def shapes(run: ProbeRun, budget: int | None) -> dict[str, Hashable]:
    """Per request, what its batch decided of its schedule: which of its first steps were padded
    (a new decode's `-1` placeholders), which draft blocks the budget cut, where it was preempted
    or aborted. Runs compare with each other only where these agree (`common.invariants`)."""
    out: dict[str, Hashable] = {}
    for rid, schedule in request_schedules(run, budget).items():
        out[rid] = tuple(
            (
                s.slots if index == 0 or s.restart or s.budget_cut else None,
                s.restart,
                s.aborted,
            )
            for index, s in enumerate(schedule.samplings)
        )
    return out
