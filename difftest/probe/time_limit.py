"""A time limit per run inside the probe, so one hanging scenario does not cost the others.

The runner's process timeout is the last resort (it loses every run not yet
written); this limit interrupts a run stuck in Python code (a branch whose
scheduler loops or sleeps) with an exception that the probe records as a
`timeout` run before going on with the next one.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager


class RunTimeout(Exception):
    """The run took longer than the job's `run_timeout_s`."""


@contextmanager
def time_limit(seconds: float | None) -> Iterator[None]:
    if not seconds:
        yield
        return

    def expire(_signum: int, _frame: object) -> None:
        raise RunTimeout(f"run exceeded its time limit of {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
