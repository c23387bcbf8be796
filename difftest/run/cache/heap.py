"""Keeping Python's cyclic garbage collector off the probe records a command holds.

A probe's records become tens of thousands of small objects (a model, its
lists and dicts per step) that live until the command ends and form no
reference cycles. The cyclic collector does not know that: each time the heap
has grown by a quarter it walks all of it again, records included, and a
command that reads five probes' records and then judges and reports on them
paid more for those walks than for the reading itself (an unchanged scheduler
re-run on a 2-core machine: about 1.0 s of the 1.4 s spent reading the cached
records, and 0.35 s of the 0.57 s spent building the step traces after it).

`long_lived()` pauses the collector while such objects are made, then moves
them out of its sight (`gc.freeze`): later collections skip them. Reference
counting still frees them when they are dropped; only a reference cycle among
frozen objects would never be freed, which is why garbage is collected
before the pause rather than frozen with the records.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def long_lived() -> Iterator[None]:
    """Objects made inside are kept for the rest of the command and hold no reference cycles: make
    them without collector passes, and leave them out of every later one."""
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()
