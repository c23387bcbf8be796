"""THE counting rule: what one verification contributes to correct statistics.

Both oracles reduce a run to `Verification`s (the scheduler tier by playing the
script, the engine tier by reading what the real engine did) and sum them here,
so "what correct accounting gives" is written once:
- a row = one (request, step) where at least one real draft token was verified
  and output was delivered; real excludes grammar-invalid `-1` padding and the
  zero-fill of a runner that skipped drafting (#34734: skipped drafting is no
  row, under either reading). Under the lenient reading, a step whose scheduled
  drafts were ALL grammar-invalidated is also a row, with 0 draft tokens (what
  main and #56137 count today);
- draft tokens and the per-position vectors count real drafts; accepted is the
  verifier's accepted prefix, capped at the real draft count;
- emitted = tokens appended to the request in that row after stop handling
  (EOS, stop token ids, max_tokens), stop token included, on rows only;
- mean acceptance length = emitted / rows.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from difftest.core.records import Reading, Totals

#: The rule above, per counter, in the words reports use to say why a branch differs from the oracle.
RULES: dict[str, str] = {
    "num_drafts": "a row is a request's step that verified a real draft (grammar-valid, not a skipped drafter's zero-fill)",
    "num_draft_tokens": "only real drafts count, not grammar-invalid -1 padding or a skipped drafter's zero-fill",
    "num_accepted_tokens": "the verifier's accepted prefix, capped at the real drafts",
    "num_accepted_tokens_per_pos": "per position, the verifier's accepted prefix",
    "num_draft_tokens_per_pos": "per position, real drafts only",
    "num_emitted_tokens": "the tokens a step really appended after stop handling (EOS, stop token, max_tokens), "
    "stop token included",
    "mean_acceptance_length": "emitted tokens per row",
}
#: What each reading of a request whose drafts are all grammar-invalid says.
READINGS: dict[str, str] = {
    "strict": "a request whose drafts are all grammar-invalid makes no row",
    "lenient": "a request whose drafts are all grammar-invalid makes a row with 0 draft tokens",
}


def truncated(expected: Totals) -> int:
    """Accepted tokens the oracle saw cut by stop handling: `accepted + 1` per row minus what was emitted."""
    return expected.num_accepted_tokens + expected.num_drafts - expected.num_emitted_tokens


@dataclass(frozen=True)
class Verification:
    """One request's verification in one step, as the oracle sees it."""

    request: str
    #: Draft tokens that were real proposals (grammar-valid prefix).
    real_drafts: int
    #: Draft slots the scheduler scheduled (async: k, invalid ones padded with -1).
    scheduled_drafts: int
    #: The verifier's accepted prefix: sampled tokens - 1.
    accepted: int
    #: Tokens appended to the request's output in this step, after stop handling.
    emitted: int
    #: The runner skipped the drafter for this step: whatever was scheduled is its zero-fill, no draft.
    drafting_skipped: bool = False


def is_row(v: Verification, reading: Reading) -> bool:
    """Strict: at least one real draft. Lenient: also a step whose scheduled drafts were all invalidated.
    Never a step whose drafting the runner skipped."""
    if v.drafting_skipped:
        return False
    if v.real_drafts > 0:
        return True
    return reading == "lenient" and v.scheduled_drafts > 0


def totals(verifications: Iterable[Verification], k: int, reading: Reading) -> Totals:
    """The totals a correct branch reports for these verifications."""
    drafts = draft_tokens = accepted = emitted = 0
    acc_pos = [0] * k
    draft_pos = [0] * k
    for v in verifications:
        if not is_row(v, reading):
            continue
        real = min(v.real_drafts, k)
        acc = max(0, min(v.accepted, real))
        drafts += 1
        draft_tokens += real
        accepted += acc
        emitted += v.emitted
        for i in range(acc):
            acc_pos[i] += 1
        for i in range(real):
            draft_pos[i] += 1
    return Totals(
        num_drafts=drafts,
        num_draft_tokens=draft_tokens,
        num_accepted_tokens=accepted,
        num_accepted_tokens_per_pos=acc_pos,
        num_draft_tokens_per_pos=draft_pos,
        num_emitted_tokens=emitted,
        emitted_source="oracle",
        mean_acceptance_length=(emitted / drafts) if drafts else None,
    )
