"""THE counting rule (`tiers.common.accounting`), on hand-written verifications.

Both tiers' oracles reduce a run to `Verification`s and sum them here, so the
rule is tested on its own input: a few verifications whose totals are worked
out in the comments.
"""

from __future__ import annotations

import pytest

from difftest.core.records import Reading
from difftest.tiers.common.accounting import Verification, is_row, totals

K = 3


def verification(
    real: int = 3,
    scheduled: int | None = None,
    accepted: int = 2,
    emitted: int = 3,
    request: str = "a",
) -> Verification:
    """Request `a` verified `real` drafts (all scheduled unless said), accepted 2, emitted 3."""
    return Verification(request, real, real if scheduled is None else scheduled, accepted, emitted)


@pytest.mark.parametrize(
    "real, scheduled, strict, lenient",
    [
        (3, 3, True, True),  # real drafts: a row under both readings
        (1, 3, True, True),  # a grammar-valid prefix is still real
        (0, 3, False, True),  # every scheduled draft invalidated: a row only when lenient
        (0, 0, False, False),  # nothing scheduled: never a row
    ],
)
def test_is_row_under_both_readings(real: int, scheduled: int, strict: bool, lenient: bool) -> None:
    v = verification(real, scheduled)
    assert (is_row(v, "strict"), is_row(v, "lenient")) == (strict, lenient)


def test_rows_sum_drafts_accepted_and_emitted() -> None:
    found = totals(
        [verification(3, accepted=3, emitted=4), verification(2, accepted=1, emitted=2)],
        K,
        "strict",
    )
    assert (
        found.num_drafts,
        found.num_draft_tokens,
        found.num_accepted_tokens,
        found.num_emitted_tokens,
    ) == (2, 5, 4, 6)
    assert found.mean_acceptance_length == 3.0
    assert found.emitted_source == "oracle"


def test_per_position_vectors_count_real_drafts_and_the_accepted_prefix() -> None:
    # Row 1: 3 drafts, 2 accepted; row 2: 1 draft, 1 accepted; row 3: 2 drafts, 0 accepted.
    rows = [
        verification(3, accepted=2),
        verification(1, accepted=1),
        verification(2, accepted=0, emitted=1),
    ]
    found = totals(rows, K, "strict")
    assert found.num_draft_tokens_per_pos == [3, 2, 1]
    assert found.num_accepted_tokens_per_pos == [2, 1, 0]
    assert sum(found.num_draft_tokens_per_pos) == found.num_draft_tokens
    assert sum(found.num_accepted_tokens_per_pos) == found.num_accepted_tokens


def test_accepted_is_capped_at_the_real_drafts() -> None:
    # Async: 3 slots scheduled, 1 real draft; the verifier "accepted" the -1 padding too.
    found = totals([verification(1, scheduled=3, accepted=3, emitted=2)], K, "strict")
    assert (found.num_draft_tokens, found.num_accepted_tokens) == (1, 1)
    assert found.num_accepted_tokens_per_pos == [1, 0, 0]


def test_real_drafts_are_capped_at_k_and_accepted_at_zero() -> None:
    found = totals([verification(5, accepted=-1, emitted=1)], K, "strict")
    assert (found.num_draft_tokens, found.num_accepted_tokens) == (K, 0)
    assert found.num_draft_tokens_per_pos == [1, 1, 1]


@pytest.mark.parametrize("reading, rows, emitted", [("strict", 1, 3), ("lenient", 2, 4)])
def test_all_invalid_step_counts_only_when_lenient(
    reading: Reading, rows: int, emitted: int
) -> None:
    found = totals(
        [
            verification(3, accepted=2, emitted=3),
            verification(0, scheduled=3, accepted=0, emitted=1),
        ],
        K,
        reading,
    )
    assert (found.num_drafts, found.num_draft_tokens, found.num_emitted_tokens) == (
        rows,
        3,
        emitted,
    )
    assert found.num_draft_tokens_per_pos == [1, 1, 1]  # the lenient row has 0 draft tokens


def test_no_rows_means_no_mean() -> None:
    found = totals([verification(0, scheduled=0, emitted=1)], K, "lenient")
    assert found.num_drafts == 0 and found.num_emitted_tokens == 0
    assert found.mean_acceptance_length is None
    assert found.num_accepted_tokens_per_pos == [0] * K


def test_a_step_whose_drafting_was_skipped_is_never_a_row() -> None:
    skipped = Verification(
        "a", 3, 3, 0, 1, drafting_skipped=True
    )  # the zero-fill, scheduled and rejected
    for reading in ("strict", "lenient"):
        assert not is_row(skipped, reading)  # type: ignore[arg-type]
        assert totals([skipped, verification(3, accepted=3, emitted=4)], 3, reading).num_drafts == 1  # type: ignore[arg-type]
