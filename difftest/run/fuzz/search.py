"""Hypothesis as a search engine: find every kind of failure in a stream of examples, each shrunk.

`search(strategy, examine, ...)` calls `examine(value)` on generated values;
`examine` says which kinds of failure a value shows (any hashable keys, each
with a payload). Hypothesis reports one failure per test, so the search runs
in rounds: each round is one seeded Hypothesis run whose test fails on any
kind not found in an earlier round; Hypothesis shrinks that example (it may
"slip" to any smaller example with a new kind) and the minimal one is kept
with every new kind it shows. The next round starts the same stream again
(same seed) and fails only on kinds still unknown, so a kind hidden behind
another in one example is found in a later round. A round that runs its
`examples` without a new kind ends the search. Examining the same value twice
is the caller's to make cheap (`examine` is expected to be deterministic; the
fuzz pipeline caches by value).

Same seed and same `examine`, same findings: no example database (`database=None`),
a fixed seed, and no setting that depends on time (Hypothesis alone stops
shrinking after five minutes, which a scheduler-tier example never comes near).
With `deadline_s`, a round that has found nothing yet stops at the deadline;
one that has found something still finishes shrinking it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from hypothesis import HealthCheck, Phase, Verbosity, given, seed, settings, target
from hypothesis import strategies as st
from hypothesis.errors import Flaky
from hypothesis.reporting import with_reporter

K = TypeVar("K", bound=Hashable)
#: The label of the score a guided search climbs (`hypothesis.target`).
TARGET_LABEL = "changed code run"
#: Example counts Hypothesis is given when only a time limit bounds the search.
UNBOUNDED_EXAMPLES = 10**9


class _NotReproduced(Exception):
    """A failing example did not fail again when Hypothesis replayed it."""


@dataclass
class Found(Generic[K]):
    """A minimal example and the kinds it showed that no earlier one had."""

    value: Any
    kinds: dict[K, Any]
    #: Seconds from the start of the search until this round first saw a new kind.
    first_seen_s: float
    round: int


@dataclass
class _RoundState:
    """What one round's test has seen so far: its calls, and when it first saw a new kind."""

    calls: int = 0
    #: Seconds from the start of the search; None until a new kind is seen.
    first_seen: float | None = None


@dataclass
class SearchResult(Generic[K]):
    found: list[Found[K]] = field(default_factory=list)
    #: Test cases run by the last round (the examples searched), and by all rounds.
    examples: int = 0
    calls: int = 0
    rounds: int = 0
    elapsed_s: float = 0.0
    #: Why the search stopped early: `time` (deadline), `interrupted` (Ctrl-C) or `flaky` (an
    #: example did not fail again when replayed: `examine` is not deterministic); None if it ran its
    #: course.
    stopped: str | None = None
    stop_reason: str = ""


class _NewKinds(Exception):
    """The test's failure: this value shows kinds no earlier round found."""

    def __init__(self, value: Any, kinds: dict[Any, Any]) -> None:
        super().__init__(f"{len(kinds)} new kind(s)")
        self.value = value
        self.kinds = kinds


class _OutOfTime(BaseException):
    """Ends a round that has found nothing when the deadline passes (not an Exception: Hypothesis
    must not take it for a failure of the example)."""


def search(
    strategy: st.SearchStrategy[Any],
    examine: Callable[[Any], Mapping[K, Any]],
    *,
    seed_value: int,
    examples: int | None,
    deadline_s: float | None = None,
    on_call: Callable[[SearchResult[K]], None] | None = None,
    score: Callable[[Any], float] | None = None,
) -> SearchResult[K]:
    """Search `examples` test cases per round (or until `deadline_s` seconds), return every kind
    found. With `score` (called after `examine`, deterministic as it is), Hypothesis's targeted
    phase mutates the examples that score highest, climbing toward higher scores."""
    if examples is None and deadline_s is None:
        raise ValueError("give examples, deadline_s or both")
    result: SearchResult[K] = SearchResult()
    known: set[K] = set()
    started = time.monotonic()
    deadline = started + deadline_s if deadline_s is not None else None
    try:
        while True:
            result.rounds += 1
            found, calls = _round(
                strategy,
                examine,
                known,
                seed_value,
                examples,
                deadline,
                started,
                result,
                on_call,
                score,
            )
            result.examples = calls
            if found is None:
                break
            found.round = result.rounds
            result.found.append(found)
            known |= set(found.kinds)
    except _OutOfTime:
        result.stopped = "time"
    except KeyboardInterrupt:
        result.stopped = "interrupted"
    except _NotReproduced as exc:
        result.stopped, result.stop_reason = "flaky", str(exc)
    result.elapsed_s = time.monotonic() - started
    return result


def _round(
    strategy: st.SearchStrategy[Any],
    examine: Callable[[Any], Mapping[K, Any]],
    known: set[K],
    seed_value: int,
    examples: int | None,
    deadline: float | None,
    started: float,
    result: SearchResult[K],
    on_call: Callable[[SearchResult[K]], None] | None,
    score: Callable[[Any], float] | None = None,
) -> tuple[Found[K] | None, int]:
    """One Hypothesis run failing on kinds not in `known`; the shrunk example, or None."""
    state = _RoundState()

    @seed(seed_value)
    @settings(
        max_examples=examples or UNBOUNDED_EXAMPLES,
        database=None,
        deadline=None,
        derandomize=False,
        phases=[Phase.generate, Phase.shrink]
        if score is None
        else [Phase.generate, Phase.target, Phase.shrink],
        report_multiple_bugs=False,
        suppress_health_check=list(HealthCheck),
        verbosity=Verbosity.quiet,
        print_blob=False,
    )
    @given(strategy)
    def test(value: Any) -> None:
        state.calls += 1
        result.calls += 1
        if on_call is not None:
            on_call(result)
        if state.first_seen is None and deadline is not None and time.monotonic() > deadline:
            raise _OutOfTime()
        new = {k: v for k, v in examine(value).items() if k not in known}
        if score is not None:
            target(score(value), label=TARGET_LABEL)
        if new:
            if state.first_seen is None:
                state.first_seen = time.monotonic() - started
            raise _NewKinds(value, new)

    try:
        with with_reporter(lambda _message: None), no_local_constants():
            test()
    except _NewKinds as failure:
        return Found(failure.value, failure.kinds, state.first_seen or 0.0, 0), state.calls
    except Flaky as exc:
        raise _NotReproduced(
            f"an example did not fail again when replayed: {str(exc).splitlines()[0]}"
        ) from None
    return None, state.calls


@contextmanager
def no_local_constants() -> Iterator[None]:
    """Hypothesis without the constants it collects from the source of every module this process
    has imported (Hypothesis 6.131 and later draw them now and then, and cache what they drew):
    with them, the same seed made other examples in a process that had imported other modules (a
    test suite's worker), against "same seed, same findings". Hypothesis's own built-in constants
    stay. Where its internals are not as expected, the search runs as it is."""
    from hypothesis.internal.conjecture import providers

    collect = getattr(providers, "_get_local_constants", None)
    cache: Any = getattr(providers, "CONSTANTS_CACHE", None)
    empty = getattr(providers, "Constants", None)
    try:
        fresh = type(cache)(1024)  # what was drawn is cached by kind of choice: a cache of its own
    except TypeError:
        fresh = None
    if collect is None or cache is None or empty is None or fresh is None:
        yield
        return
    providers._get_local_constants = empty
    providers.CONSTANTS_CACHE = fresh
    try:
        yield
    finally:
        providers._get_local_constants = collect
        providers.CONSTANTS_CACHE = cache
