"""What one step record says about one request: the drafts it really verified, whether its output
was delivered. Both tiers' oracles and the shared invariants read records through these."""

from __future__ import annotations

from difftest.core.records import StepRecord


def computed_drafts(step: StepRecord, rid: str) -> list[int]:
    """The request's scheduled drafts that the step really computed: no more than its scheduled
    tokens hold after the sampled position (older records list no tokens: all of them)."""
    drafts = step.drafts.get(rid, [])
    if rid not in step.tokens:
        return list(drafts)
    return drafts[: max(0, step.tokens[rid] - 1)]


def real_drafts(step: StepRecord, rid: str) -> int:
    """Draft tokens of the request this step really verified: the scheduled drafts before the
    first `-1` (grammar-invalid padding, or the scheduler's padding of a new decode, #50518) and
    not among those the scheduler counted invalid, no more than the step computed after the
    sampled position, none where the runner skipped drafting (its zero-fill, #34734)."""
    if rid in step.skipped:
        return 0
    drafts = computed_drafts(step, rid)
    valid = next((i for i, d in enumerate(drafts) if d < 0), len(drafts))
    return max(0, min(valid, len(step.drafts.get(rid, [])) - step.invalid.get(rid, 0)))


def sampled(step: StepRecord, rid: str) -> bool:
    """Whether this step is one of the request's sampling steps: the model sampled for it and the
    scheduler did not drop the output (a step in flight at a prefix-cache reset)."""
    return bool(step.sampled.get(rid)) and rid not in step.dropped


def restarts_after(step: StepRecord) -> set[str]:
    """The requests whose next sampling recomputes, as this step leaves them: those the scheduler
    preempted while scheduling it, and those a prefix-cache reset preempted after its output. (The
    scheduler reports a reset's preemptions again with the next step it makes, which already
    resumes them; a request preempted while scheduling is never scheduled with it.)"""
    return ({*step.preempted} - {*step.scheduled}) | {*step.reset}


def delivered(step: StepRecord, rid: str, ended: set[str]) -> bool:
    """Whether the scheduler took the request's sampled tokens in this step: sampled, not aborted
    while in flight, not dropped by a prefix-cache reset, not finished in an earlier step
    (`ended`)."""
    return sampled(step, rid) and rid not in step.aborted and rid not in ended
