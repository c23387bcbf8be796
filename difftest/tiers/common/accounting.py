"""THE counting rule: what one verification contributes to correct statistics.

Both oracles reduce a run to `Verification`s (the scheduler tier by playing the
script, the engine tier by reading what the real engine did) and sum them here,
so "what correct accounting gives" is written once:
- a row = one (request, step) where at least one real draft token was verified
  and output was delivered; real excludes grammar-invalid `-1` padding, the
  `-1` placeholders a new decode is padded with (#50518), and the zero-fill of a
  runner that skipped drafting (#34734: skipped drafting is no row, under
  either reading); delivered excludes a step aborted while in flight and one
  still in flight when its request finished. Under the lenient reading, a step
  whose scheduled drafts were ALL grammar-invalidated is also a row, with 0
  draft tokens (what main and #56137 count today);
- draft tokens and the per-position vectors count real drafts; accepted is the
  verifier's accepted prefix, capped at the real draft count;
- emitted = tokens appended to the request in that row after stop handling
  (EOS, stop token ids, max_tokens), stop token included, on rows only;
- mean acceptance length = emitted / rows.

Each counter of `COUNTER_TABLE` has its rule here (`ORACLE`: its words and one
row's share of it); importing this module fails on a counter without one, so a
new counter cannot reach a report before the oracle knows how to count it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from difftest.core.records import COUNTER_TABLE, Counter, Reading, Totals


@dataclass(frozen=True)
class Row:
    """One row as the rules count it."""

    #: Real draft tokens, at most k.
    real: int
    #: The verifier's accepted prefix, at most `real`.
    accepted: int
    #: Tokens appended to the request in this row, after stop handling.
    emitted: int


@dataclass(frozen=True)
class Rule:
    """How the oracle counts one counter: in words (reports say why a branch differs), and one
    row's share: the amount a scalar counter adds, or how many leading positions (each + 1) a
    per-position counter counts."""

    text: str
    share: Callable[[Row], int]


#: The rule above, per counter of `COUNTER_TABLE`.
ORACLE: dict[str, Rule] = {
    "num_drafts": Rule(
        "a row is a request's step that verified a real draft and delivered its output "
        "(grammar-valid, not a new decode's -1 padding, not a skipped drafter's zero-fill)",
        lambda row: 1,
    ),
    "num_draft_tokens": Rule(
        "only real drafts count, not grammar-invalid or scheduler -1 padding, nor a skipped "
        "drafter's zero-fill",
        lambda row: row.real,
    ),
    "num_accepted_tokens": Rule(
        "the verifier's accepted prefix, capped at the real drafts", lambda row: row.accepted
    ),
    "num_accepted_tokens_per_pos": Rule(
        "per position, the verifier's accepted prefix", lambda row: row.accepted
    ),
    "num_draft_tokens_per_pos": Rule("per position, real drafts only", lambda row: row.real),
    "num_emitted_tokens": Rule(
        "the tokens a step really appended after stop handling (EOS, stop token, max_tokens), "
        "stop token included, and the response kept (a stop string drops the rest)",
        lambda row: row.emitted,
    ),
}
#: The rules of the differences beyond the totals: what the server exports, each logging line.
_EXPORTED = {
    "prometheus.generation_tokens": "the generated tokens a server exports are the tokens "
    "its requests returned (a stop string drops the rest)",
    "prometheus.request_generation_tokens_sum": "each finished request's generated tokens "
    "are the tokens it returned",
    "prometheus.request_generation_tokens_count": "one observation per request finished by "
    "a stop rule (an aborted one is none)",
}
_INTERVALS = {
    f"log_interval.{figure}": f"each logging interval's {words} are the oracle's for the "
    "rows of its steps"
    for figure, words in (
        ("mean_acceptance_length", "mean acceptance length (emitted per row)"),
        ("accepted", "accepted tokens"),
        ("drafted", "drafted tokens"),
        ("per_position", "per-position rates"),
        ("lines", "lines (one where it has a row)"),
    )
}
#: The rules in the words reports use to say why a branch differs from the oracle, mean included.
RULES: dict[str, str] = (
    {name: rule.text for name, rule in ORACLE.items()}
    | {
        "mean_acceptance_length": "emitted tokens per row",
        "request_metrics": "each response's own spec-decode figures count its rows as the step "
        "counters do, and its mean acceptance length is the tokens it received per row",
    }
    | _EXPORTED
    | _INTERVALS
)
#: What each reading of a request whose drafts are all grammar-invalid says.
READINGS: dict[str, str] = {
    "strict": "a request whose drafts are all invalid (grammar, or async slots its drafter left "
    "empty) makes no row",
    "lenient": "a request whose drafts are all invalid (grammar, or async slots its drafter left "
    "empty) makes a row with 0 draft tokens",
}


def check_rules(table: tuple[Counter, ...], rules: Mapping[str, Rule]) -> None:
    """Raise LookupError unless every counter of `table` has a rule and every rule a counter."""
    names = [c.name for c in table]
    missing = [name for name in names if name not in rules]
    unknown = [name for name in rules if name not in names]
    if missing or unknown:
        raise LookupError(
            "the oracle (tiers.common.accounting.ORACLE) must have one rule per counter of "
            f"COUNTER_TABLE: no rule for {missing}, no counter for {unknown}"
        )


check_rules(COUNTER_TABLE, ORACLE)


def truncated(expected: Totals) -> int:
    """Accepted tokens the oracle saw cut by stop handling: `accepted + 1` per row minus what was
    emitted."""
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
    #: The runner skipped the drafter for this step: whatever was scheduled is its zero-fill, no
    #: draft.
    drafting_skipped: bool = False


def is_row(v: Verification, reading: Reading) -> bool:
    """Strict: at least one real draft. Lenient: also a step whose scheduled drafts were all
    invalidated. Never a step whose drafting the runner skipped."""
    if v.drafting_skipped:
        return False
    if v.real_drafts > 0:
        return True
    return reading == "lenient" and v.scheduled_drafts > 0


def count(
    verifications: Iterable[Verification],
    k: int,
    reading: Reading,
    table: tuple[Counter, ...] = COUNTER_TABLE,
    rules: Mapping[str, Rule] = ORACLE,
) -> dict[str, Any]:
    """Every counter of `table`, summed by its rule over the rows of `verifications`."""
    counts: dict[str, Any] = {c.name: [0] * k if c.per_position else 0 for c in table}
    for v in verifications:
        if not is_row(v, reading):
            continue
        real = min(v.real_drafts, k)
        row = Row(real=real, accepted=max(0, min(v.accepted, real)), emitted=v.emitted)
        for counter in table:
            share = rules[counter.name].share(row)
            if counter.per_position:
                for i in range(min(share, k)):
                    counts[counter.name][i] += 1
            else:
                counts[counter.name] += share
    return counts


def totals(verifications: Iterable[Verification], k: int, reading: Reading) -> Totals:
    """The totals a correct branch reports for these verifications."""
    counts = count(verifications, k, reading)
    rows, emitted = counts["num_drafts"], counts["num_emitted_tokens"]
    return Totals(
        **counts,
        emitted_source="oracle",
        mean_acceptance_length=(emitted / rows) if rows else None,
    )
