"""ddmin on made-up findings: which parts make it is known, so the answer can be checked exactly.

The property that matters to `difftest blame`: the result makes the finding and is 1-minimal
(leaving out any one of its parts was tried and lost it), whatever the finding needs, whatever
sets cannot be measured, and whatever the width sets are asked at.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from difftest.core.ddmin import Parts, ddmin, split, without


class Oracle:
    """A finding made by any set holding `needed`, except sets that cannot be measured
    (`unmeasurable`: any set holding one of those parts without the other)."""

    def __init__(self, needed: set[int], unmeasurable: tuple[int, int] | None = None) -> None:
        self.needed = needed
        self.unmeasurable = unmeasurable
        self.asked: list[Parts] = []

    def makes(self, parts: Parts) -> bool:
        if self.unmeasurable is not None:
            lone, partner = self.unmeasurable
            if lone in parts and partner not in parts:
                return False  # does not apply, or does not import: never a finding
        return self.needed <= set(parts)

    def __call__(self, sets: list[Parts], ahead: list[Parts]) -> list[bool]:
        assert not set(ahead) & set(sets)
        self.asked += sets
        return [self.makes(s) for s in sets]


def test_one_harmful_part_among_harmless_ones_is_found_alone() -> None:
    oracle = Oracle({5})
    assert ddmin(range(1, 9), oracle) == (5,)
    assert len(oracle.asked) <= 8


def test_a_finding_that_needs_two_parts_keeps_both() -> None:
    oracle = Oracle({2, 7})
    assert ddmin(range(1, 10), oracle) == (2, 7)
    assert (2,) in oracle.asked and (7,) in oracle.asked  # each alone was tried, and lost it


def test_a_set_that_cannot_be_measured_does_not_stop_the_search() -> None:
    """Part 3 needs part 1 to apply; every set with 3 but not 1 reads "not the finding"."""
    oracle = Oracle({1, 3, 6}, unmeasurable=(3, 1))
    assert ddmin(range(1, 9), oracle) == (1, 3, 6)
    assert any(3 in s and 1 not in s for s in oracle.asked)


def test_the_shipped_pr_shape_six_of_nine() -> None:
    """pr-56195-style: 9 hunks under vllm/, the first six needed together."""
    oracle = Oracle({1, 2, 3, 4, 5, 6})
    assert ddmin(range(1, 10), oracle) == (1, 2, 3, 4, 5, 6)
    assert len(set(oracle.asked)) <= 30


def test_every_complement_of_the_result_was_tried() -> None:
    oracle = Oracle({2, 4, 9})
    result = ddmin(range(1, 12), oracle)
    for part in result:
        assert without(result, (part,)) in oracle.asked


def test_split_keeps_order_and_sizes_within_one() -> None:
    chunks = split(tuple(range(10)), 4)
    assert [len(c) for c in chunks] == [2, 3, 2, 3]
    assert sum(chunks, ()) == tuple(range(10))


def test_an_answer_of_the_wrong_length_is_refused() -> None:
    try:
        ddmin(range(4), lambda sets, ahead: [])
    except ValueError as exc:
        assert "asked about" in str(exc)
    else:
        raise AssertionError("a short answer was taken")


@settings(max_examples=150, deadline=None)
@given(
    size=st.integers(min_value=1, max_value=14),
    data=st.data(),
    width=st.integers(min_value=1, max_value=4),
)
def test_the_result_makes_the_finding_and_is_one_minimal(
    size: int, data: st.DataObject, width: int
) -> None:
    parts = tuple(range(1, size + 1))
    needed = set(data.draw(st.lists(st.sampled_from(parts), min_size=1, unique=True)))
    pair = data.draw(st.none() | st.tuples(st.sampled_from(parts), st.sampled_from(parts)))
    unmeasurable = pair if pair is not None and pair[0] != pair[1] else None
    oracle = Oracle(needed, unmeasurable)
    if not oracle.makes(parts):
        return
    result = ddmin(parts, oracle, width)
    assert oracle.makes(result)
    for part in result:
        assert not oracle.makes(without(result, (part,)))
    assert ddmin(parts, Oracle(needed, unmeasurable), 1) == result  # the width changes nothing
