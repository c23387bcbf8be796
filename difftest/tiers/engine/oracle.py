"""What correct statistics are for one engine run, computed from what the engine did.

The model is real, so nothing can be predicted from the scenario: the oracle
reads the run's per-step records (the drafts the scheduler scheduled, the
tokens the rejection sampler returned, the tokens the scheduler emitted after
stop handling, and whether the model runner had skipped the drafter for that
step), turns each (request, step) that verified drafts into a
`Verification`, and applies the one counting rule (`tiers.common.accounting`).
Pure Python, no vLLM.
"""

from __future__ import annotations

from difftest.core.records import ProbeRun, Reading, StepRecord, Totals
from difftest.tiers.common import accounting
from difftest.tiers.common.accounting import Verification
from difftest.tiers.common.steps import real_drafts


def verifications(step: StepRecord) -> list[Verification]:
    """The verifications of one step, in scheduling order: requests with drafts and delivered
    output."""
    out = []
    for rid in step.scheduled or list(step.drafts):
        drafts = step.drafts.get(rid) or []
        sampled = step.sampled.get(rid) or []
        if not drafts or not sampled or rid in step.aborted:
            continue
        real = real_drafts(step, rid)
        out.append(
            Verification(
                request=rid,
                real_drafts=real,
                # Slots that held a proposal: the real ones and the grammar-invalid ones (not a
                # new decode's -1 padding, which the lenient reading does not count either).
                scheduled_drafts=real + step.invalid.get(rid, 0),
                accepted=len(sampled) - 1,
                emitted=len(step.emitted.get(rid) or []),
                drafting_skipped=rid in step.skipped,
            )
        )
    return out


def expected_totals(k: int, run: ProbeRun, reading: Reading) -> Totals:
    """The oracle's totals for one run."""
    return accounting.totals((v for step in run.steps for v in verifications(step)), k, reading)


def expected_steps(k: int, run: ProbeRun, reading: Reading) -> list[Totals]:
    """The oracle's row for each recorded step (they sum to `expected_totals`)."""
    return [accounting.totals(verifications(step), k, reading) for step in run.steps]
