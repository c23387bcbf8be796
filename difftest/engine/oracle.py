"""What correct statistics are for one engine run, computed from what the engine did.

The model is real, so nothing can be predicted from the scenario: the oracle
reads the run's per-step records (the drafts the scheduler scheduled, the tokens
the rejection sampler returned, the tokens the scheduler emitted after stop
handling) and applies the same definition as the scheduler tier's oracle:
- a row = (request, step) with at least one real draft verified and output
  delivered; real = scheduled drafts minus grammar-invalid `-1` padding. Under
  the lenient reading, a step whose drafts were ALL invalid is a row with 0
  draft tokens (what main and #56137 count today);
- draft tokens and the per-position vectors count real drafts; accepted is the
  verifier's accepted prefix (sampled - 1, capped at the real draft count);
- emitted = tokens appended to the request in that row after stop handling;
- mean acceptance length = emitted / rows.
Pure Python, no vLLM.
"""

from __future__ import annotations

from typing import Any

from difftest.results import ProbeRun, Reading, StepRecord, Totals


def rows(step: StepRecord, reading: Reading) -> list[dict[str, Any]]:
    """The verification rows of one step, in scheduling order."""
    out = []
    for rid in step.scheduled or list(step.drafts):
        drafts = step.drafts.get(rid) or []
        sampled = step.sampled.get(rid) or []
        if not drafts or not sampled:
            continue
        real = max(0, len(drafts) - step.invalid.get(rid, 0))
        if real == 0 and reading == "strict":
            continue
        out.append(
            {
                "request": rid,
                "draft_tokens": real,
                "accepted": min(len(sampled) - 1, real),
                "emitted": len(step.emitted.get(rid) or []),
            }
        )
    return out


def expected_engine_totals(scenario: Any, run: ProbeRun, reading: Reading) -> Totals:
    """The oracle's totals for one run (`scenario` only supplies k)."""
    k = int(getattr(scenario, "k", 0) or _k_of(run))
    totals = Totals(
        num_accepted_tokens_per_pos=[0] * k,
        num_draft_tokens_per_pos=[0] * k,
        emitted_source="oracle",
    )
    for step in run.steps:
        for row in rows(step, reading):
            totals.num_drafts += 1
            totals.num_draft_tokens += row["draft_tokens"]
            totals.num_accepted_tokens += row["accepted"]
            totals.num_emitted_tokens += row["emitted"]
            for i in range(min(row["draft_tokens"], k)):
                totals.num_draft_tokens_per_pos[i] += 1
            for i in range(min(row["accepted"], k)):
                totals.num_accepted_tokens_per_pos[i] += 1
    totals.mean_acceptance_length = totals.num_emitted_tokens / totals.num_drafts if totals.num_drafts else None
    return totals


def _k_of(run: ProbeRun) -> int:
    for step in run.steps:
        if step.stats and step.stats.get("num_spec_tokens"):
            return int(step.stats["num_spec_tokens"])
    return len(run.totals.num_accepted_tokens_per_pos) if run.totals else 0
