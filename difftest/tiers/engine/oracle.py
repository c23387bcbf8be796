"""What correct statistics are for one engine run, computed from what the engine did.

The model is real, so nothing can be predicted from the scenario: the oracle
reads the run's per-step records (the drafts the scheduler scheduled, the
tokens the rejection sampler returned, the tokens the scheduler emitted after
stop handling, and whether the model runner had skipped the drafter for that
step), turns each (request, step) that verified drafts into a
`Verification`, and applies the one counting rule (`tiers.common.accounting`).

What counts as emitted is what the request returned (#49): a stop string is
matched by the output processor after the step's stats exist, and the tokens
after the one completing it are dropped from the response; a row keeps only the
tokens of its step that the response holds. Pure Python, no vLLM.
"""

from __future__ import annotations

import dataclasses

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


def returned_verifications(run: ProbeRun) -> list[list[Verification]]:
    """Each step's verifications, each row's emitted tokens capped by what its request returned
    (the scheduler's emitted tokens past the response's end were never delivered)."""
    left = {rid: len(tokens) for rid, tokens in run.outputs.items()}
    per_step = []
    for step in run.steps:
        rows = {v.request: v for v in verifications(step)}
        for rid, tokens in step.emitted.items():
            if rid not in left or rid in step.aborted:
                continue
            kept = min(len(tokens), left[rid])
            left[rid] -= kept
            if rid in rows and kept == 0:
                del rows[rid]  # past the response's end: no output delivered, no row
            elif rid in rows and kept < rows[rid].emitted:
                rows[rid] = dataclasses.replace(rows[rid], emitted=kept)
        per_step.append(list(rows.values()))
    return per_step


def expected_totals(k: int, run: ProbeRun, reading: Reading) -> Totals:
    """The oracle's totals for one run."""
    return accounting.totals((v for step in returned_verifications(run) for v in step), k, reading)


def expected_steps(k: int, run: ProbeRun, reading: Reading) -> list[Totals]:
    """The oracle's row for each recorded step (they sum to `expected_totals`)."""
    return [accounting.totals(rows, k, reading) for rows in returned_verifications(run)]
