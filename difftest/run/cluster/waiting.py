"""Threads that wait on a Ray cluster for the host, made so that none can hold difftest's exit.

A thread waiting on a Ray task sits inside Ray's own calls, and Ray does not promise that every
call returns once the task is cancelled (a cancelled stream may never be marked ended). A
`ThreadPoolExecutor` thread is joined when the interpreter exits, so one such call would keep an
interrupted difftest alive for ever; these threads are daemons, and an interrupt waits for them a
bounded time only (`wait_out`), through further Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from concurrent.futures import wait as wait_for
from typing import TypeVar

T = TypeVar("T")


def in_daemon_threads(
    calls: dict[str, Callable[[], T]], at_once: int, label: str
) -> dict[str, Future[T]]:
    """Start every call in a daemon thread of its own, at most `at_once` running at a time;
    a future cancelled before its turn never runs."""
    turns = threading.BoundedSemaphore(max(1, at_once))
    futures: dict[str, Future[T]] = {}
    for name, call in calls.items():
        future: Future[T] = Future()

        def body(call: Callable[[], T] = call, future: Future[T] = future) -> None:
            with turns:
                if not future.set_running_or_notify_cancel():
                    return
                try:
                    future.set_result(call())
                except BaseException as exc:  # noqa: BLE001 - handed to whoever reads the future
                    future.set_exception(exc)

        threading.Thread(target=body, name=f"{label}-{name}", daemon=True).start()
        futures[name] = future
    return futures


def wait_out(futures: Iterable[Future[T]], limit_s: float) -> None:
    """Cancel what has not started and wait up to `limit_s` for the rest to end; a second
    interrupt during the wait does not cut it short (the caller is already stopping)."""
    pending = [f for f in futures if not f.cancel()]
    deadline = time.monotonic() + limit_s
    while pending and (left := deadline - time.monotonic()) > 0:
        try:
            _done, still = wait_for(pending, timeout=left)
        except KeyboardInterrupt:
            continue
        pending = list(still)
