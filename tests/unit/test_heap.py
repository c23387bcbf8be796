"""`run.cache.heap.long_lived`: records made without collector passes and left out of later ones,
nothing else changed."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from difftest.run.cache.heap import long_lived


class _Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the cyclic collector frees it


@pytest.fixture(autouse=True)
def _thawed() -> Iterator[None]:
    """Give this test worker's heap back to the collector afterwards, as it was."""
    enabled = gc.isenabled()
    yield
    gc.unfreeze()
    (gc.enable if enabled else gc.disable)()


def test_what_is_made_inside_is_left_out_of_later_collections() -> None:
    before = gc.get_freeze_count()
    with long_lived():
        assert not gc.isenabled()
        kept = [{"step": n, "drafts": [n]} for n in range(1000)]
    assert gc.isenabled()
    assert gc.get_freeze_count() >= before + len(kept)


def test_garbage_from_before_is_collected_not_frozen() -> None:
    node = _Node()
    gone = weakref.ref(node)
    del node
    with long_lived():
        pass
    assert gone() is None


@pytest.mark.parametrize("enabled", [True, False])
def test_the_collector_is_left_as_it_was_even_after_an_error(enabled: bool) -> None:
    (gc.enable if enabled else gc.disable)()
    with pytest.raises(ValueError), long_lived():
        raise ValueError("a damaged entry")
    assert gc.isenabled() is enabled
