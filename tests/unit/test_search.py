"""The search engine of `difftest fuzz` (`difftest.run.fuzz.search`): Hypothesis in rounds,
one new kind at a time.

`examine` here is a pure function of the generated value - exactly the contract
the fuzz pipeline's examiner keeps (it is deterministic, cached by scenario) -
so the search's own behaviour is tested without vLLM: every kind found, each
shrunk, a kind hidden behind another found in a later round, same seed same
findings, the time limit, and errors of `examine` itself.
"""

from __future__ import annotations

import time

import pytest
from hypothesis import strategies as st

from difftest.run.fuzz import search as search_module
from difftest.run.fuzz.search import search

LISTS = st.lists(st.integers(0, 100), max_size=8)


def kinds_of(values: list[int]) -> dict[str, str]:
    found = {}
    if any(v >= 10 for v in values):
        found["big"] = "an element of 10 or more"
    if 42 in values:  # every example showing this also shows "big"
        found["answer"] = "42 is there"
    if len(values) >= 5:
        found["long"] = "5 elements or more"
    return found


def test_every_kind_is_found_and_shrunk() -> None:
    result = search(LISTS, kinds_of, seed_value=0, examples=300)
    by_kind = {kind: f.value for f in result.found for kind in f.kinds}
    assert set(by_kind) == {"big", "answer", "long"}
    assert by_kind["big"] == [10]
    assert by_kind["answer"] == [42], "found in a later round, although every 42 is also big"
    assert by_kind["long"] == [0, 0, 0, 0, 0]
    # One round per finding, plus the last round, which found nothing new in its 300 examples.
    assert (
        result.rounds == len(result.found) + 1 and result.examples == 300 and result.stopped is None
    )
    assert [f.round for f in result.found] == list(range(1, len(result.found) + 1))
    assert all(f.kinds[k] == kinds_of(f.value)[k] for f in result.found for k in f.kinds)


def test_a_minimal_example_keeps_every_new_kind_it_shows() -> None:
    both = lambda values: {"a": 1, "b": 2} if sum(values) >= 3 else {}  # noqa: E731
    result = search(LISTS, both, seed_value=1, examples=100)
    assert len(result.found) == 1 and set(result.found[0].kinds) == {"a", "b"}
    assert sum(result.found[0].value) == 3


def test_same_seed_same_findings() -> None:
    runs = [search(LISTS, kinds_of, seed_value=7, examples=120) for _ in range(2)]
    assert [(f.value, f.kinds) for f in runs[0].found] == [
        (f.value, f.kinds) for f in runs[1].found
    ]
    assert runs[0].calls == runs[1].calls


def test_nothing_to_find_runs_one_round_of_all_examples() -> None:
    calls = []
    result = search(LISTS, lambda v: calls.append(v) or {}, seed_value=0, examples=50)
    assert (result.found, result.rounds, result.examples, result.calls) == ([], 1, 50, 50)
    assert len(calls) == 50


class Clock:
    """The search's clock (`time.monotonic` in `difftest.run.fuzz.search`), moved on only by
    `examine`: where the search stops is then a fact about the search, not about how fast this
    machine is."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now


def test_the_time_limit_ends_a_round_that_found_nothing(monkeypatch) -> None:
    clock = Clock()
    monkeypatch.setattr(search_module, "time", clock)
    examined: list[list[int]] = []

    def examine(values: list[int]) -> dict[str, str]:
        examined.append(values)
        # A hang guard only: a search that ignored its deadline would otherwise run 10**9 examples.
        assert len(examined) < 1000, "the deadline never ended the search"
        clock.now += 0.25  # each example takes a quarter of a second
        return {}

    result = search(LISTS, examine, seed_value=0, examples=None, deadline_s=1.0)
    assert result.stopped == "time" and result.found == [] and result.rounds == 1
    # Examples start at 0, 0.25, 0.5, 0.75 and 1.0 s (not past the deadline yet), so five are
    # examined; the sixth starts at 1.25 s, past it, and ends the round before `examine` sees it.
    assert len(examined) == 5 and result.calls == 6
    assert result.elapsed_s == 1.25


def test_a_round_that_found_something_still_shrinks_it_after_the_deadline() -> None:
    slow_big = lambda values: (time.sleep(0.002), kinds_of(values))[1]  # noqa: E731
    result = search(LISTS, slow_big, seed_value=0, examples=None, deadline_s=0.05)
    assert result.stopped == "time"
    assert result.found and result.found[0].value in ([10], [0, 0, 0, 0, 0]), (
        "shrunk although the deadline passed"
    )


def test_an_error_of_examine_itself_ends_the_search() -> None:
    def broken(values: list[int]) -> dict[str, str]:
        if len(values) > 2:
            raise RuntimeError("examine failed")
        return {}

    with pytest.raises(RuntimeError, match="examine failed"):
        search(LISTS, broken, seed_value=0, examples=100)


def test_neither_examples_nor_a_deadline_is_refused() -> None:
    with pytest.raises(ValueError):
        search(LISTS, kinds_of, seed_value=0, examples=None)


def test_an_example_that_does_not_fail_again_stops_the_search_as_flaky() -> None:
    seen: set[tuple[int, ...]] = set()

    def once(values: list[int]) -> dict[str, str]:
        key = tuple(values)
        if len(values) >= 3 and key not in seen:
            seen.add(key)
            return {"once": "only the first time"}
        return {}

    result = search(LISTS, once, seed_value=0, examples=100)
    assert result.stopped == "flaky" and "did not fail again" in result.stop_reason


def test_a_guided_search_climbs_where_the_unguided_one_never_gets() -> None:
    """`score` (what `fuzz --guide` gives: how much of the changed code an example ran) turns on
    Hypothesis's targeted phase: with the same seed and budget, only the guided search reaches the
    high-scoring region where the kind lies."""
    lists = st.lists(st.integers(0, 100), max_size=50)

    def needle(values: list[int]) -> dict[str, str]:
        return {"needle": "sum of 2500 or more"} if sum(values) >= 2500 else {}

    unguided = search(lists, needle, seed_value=0, examples=300)
    guided = search(lists, needle, seed_value=0, examples=300, score=lambda v: float(sum(v)))
    assert unguided.found == []
    assert [set(f.kinds) for f in guided.found] == [{"needle"}]
    again = search(lists, needle, seed_value=0, examples=300, score=lambda v: float(sum(v)))
    assert [f.value for f in again.found] == [f.value for f in guided.found], "same seed, same"
