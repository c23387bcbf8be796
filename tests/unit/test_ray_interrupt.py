"""An interrupted Ray run never waits on a cancelled task for ever.

Ray does not always end the stream of a cancelled generator task (its task manager can skip
marking the end of a stream it no longer tracks), so a host thread waiting for that task's next
event would wait for ever and hold difftest's exit after Ctrl-C. `_EndlessRay` below is such a
stream: Ray cannot be made to lose the end of a stream on demand, so this is the one place a fake
Ray stands in (it is used for nothing else); the real cancel path runs in
`tests/cluster/test_ray_faults.py`.
"""

from __future__ import annotations

import signal
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from difftest.run.cluster import executor as executor_module
from difftest.run.cluster.connect import Cluster
from difftest.run.cluster.executor import RayExecutor, Resources, TierProbes
from difftest.run.cluster.waiting import in_daemon_threads, wait_out
from difftest.run.probes.runner import ProbesStopped, probe_stops, stop_all_probes


class _RayError(Exception):
    pass


class _EndlessRay:
    """A Ray whose task, once submitted, never has a next event, cancelled or not."""

    exceptions = SimpleNamespace(
        TaskCancelledError=type("TaskCancelledError", (_RayError,), {}),
        RayTaskError=type("RayTaskError", (_RayError,), {}),
        OutOfMemoryError=type("OutOfMemoryError", (_RayError,), {}),
        WorkerCrashedError=type("WorkerCrashedError", (_RayError,), {}),
        TaskUnschedulableError=type("TaskUnschedulableError", (_RayError,), {}),
        RayError=_RayError,
    )

    def __init__(self) -> None:
        self.cancelled: list[object] = []
        #: Threads inside `wait` now.
        self.inside = 0
        self._lock = threading.Lock()

    def remote(self, _function: Any) -> Any:
        submit = SimpleNamespace(remote=lambda _request: object())
        return SimpleNamespace(options=lambda **_options: submit)

    def wait(self, refs: list[object], timeout: float) -> tuple[list[object], list[object]]:
        with self._lock:
            self.inside += 1
        time.sleep(timeout)
        with self._lock:
            self.inside -= 1
        return [], refs

    def cancel(self, task: object, force: bool) -> None:
        self.cancelled.append(task)

    def nodes(self) -> list[dict[str, Any]]:
        return [
            {
                "NodeID": "n1",
                "NodeManagerAddress": "127.0.0.1",
                "Alive": True,
                "Resources": {"CPU": 2.0, "memory": 8e9},
            }
        ]


@pytest.fixture
def ctrl_c_raises():
    """Ctrl-C raises KeyboardInterrupt here, however the suite was started (a shell's background
    job starts it with SIGINT ignored, and the interrupt below would then never arrive)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.fixture
def endless(monkeypatch) -> tuple[_EndlessRay, RayExecutor]:
    ray = _EndlessRay()
    monkeypatch.setattr(executor_module, "_REMOTE", None)
    # Shipping an environment is the node's business: the host only names it in the request.
    monkeypatch.setattr(executor_module, "ship", lambda *_args: None)
    # Waiting on a task uses only the cluster: no base or spec is needed to submit and wait.
    executor = RayExecutor(Cluster(ray, "127.0.0.1:1"), spec=None, base=None)  # type: ignore[arg-type]
    return ray, executor


def test_a_cancelled_task_whose_stream_never_ends_releases_its_waiting_thread(endless) -> None:
    ray, executor = endless
    request = SimpleNamespace(branch="hang", tier="scheduler")
    raised: list[BaseException] = []

    def attempt() -> None:
        try:
            executor._attempt(request, Resources(1, 0, 100), set(), None, None, probe_stops())  # type: ignore[arg-type]
        except BaseException as exc:  # noqa: BLE001 - what the waiting thread ended with
            raised.append(exc)

    waiting = threading.Thread(target=attempt, daemon=True)
    waiting.start()
    time.sleep(1.0)
    assert waiting.is_alive()  # the task has not ended: the thread waits, as it should
    stopped = stop_all_probes()
    waiting.join(timeout=5 * executor_module.TICK_S + 2)
    assert not waiting.is_alive(), "the waiting thread still waits on the cancelled task"
    assert stopped.remote == 1 and len(ray.cancelled) == 1
    assert len(raised) == 1 and isinstance(raised[0], ProbesStopped)


def _interrupt_main_thread_in(seconds: float) -> None:
    main = threading.main_thread().ident
    assert main is not None
    threading.Timer(seconds, signal.pthread_kill, (main, signal.SIGINT)).start()


def test_ctrl_c_during_run_branches_re_raises_only_after_its_threads_left_ray(
    endless, ctrl_c_raises
) -> None:
    """The driver shuts Ray down right after `run_branches` raises: no thread may still be in it."""
    ray, executor = endless
    probes = TierProbes("scheduler", {}, 60.0, 5.0, 1, 0, 100)  # type: ignore[typeddict-item]
    targets = [("main", None), ("hang", None)]
    _interrupt_main_thread_in(1.0)
    with pytest.raises(KeyboardInterrupt):
        executor.run_branches(targets, probes, Path("."), jobs=2)  # type: ignore[arg-type]
    assert ray.inside == 0, f"{ray.inside} thread(s) still inside Ray after the interrupt"
    assert len(ray.cancelled) == 2


def test_daemon_threads_run_at_most_so_many_at_once_and_never_a_cancelled_call() -> None:
    running, most, ran = [0], [0], []
    lock = threading.Lock()

    def call(name: str) -> str:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.2)
        with lock:
            running[0] -= 1
            ran.append(name)
        return name

    futures = in_daemon_threads({n: (lambda n=n: call(n)) for n in "abcdef"}, 2, "test")
    assert all(t.daemon for t in threading.enumerate() if t.name.startswith("test-"))
    futures["f"].cancel()
    assert [futures[n].result(timeout=10) for n in "abcde"] == list("abcde")
    time.sleep(0.3)
    assert most[0] == 2 and "f" not in ran


def test_a_second_ctrl_c_does_not_cut_the_bounded_wait_short() -> None:
    never: Future[None] = Future()
    never.set_running_or_notify_cancel()  # running: it cannot be cancelled, only waited for
    _interrupt_main_thread_in(0.3)
    started = time.monotonic()
    try:
        wait_out([never], 1.5)
    except KeyboardInterrupt:
        pytest.fail("the interrupt ended the wait for the threads still in Ray")
    assert time.monotonic() - started >= 1.4
