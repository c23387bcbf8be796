"""An interrupted Ray run never waits on a cancelled task for ever.

Ray does not always end the stream of a cancelled generator task (its task manager can skip
marking the end of a stream it no longer tracks), so a host thread waiting for that task's next
event would wait for ever and, being a pool thread, hold difftest's exit after Ctrl-C. The stand-in
below is such a stream: Ray cannot be made to lose the end of a stream on demand, so this is the one
place a fake Ray stands in; the real cancel path runs in `tests/cluster/test_ray_faults.py`.
"""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

from difftest.run.cluster import executor as executor_module
from difftest.run.cluster.connect import Cluster
from difftest.run.cluster.executor import RayExecutor, Resources
from difftest.run.probes.runner import ProbesStopped, allow_probes, stop_all_probes


class _RayError(Exception):
    pass


class _EndlessRay:
    """A Ray whose task, once submitted, never has a next event, cancelled or not."""

    exceptions = SimpleNamespace(
        TaskCancelledError=type("TaskCancelledError", (_RayError,), {}),
        RayTaskError=type("RayTaskError", (_RayError,), {}),
        RayError=_RayError,
    )

    def __init__(self) -> None:
        self.cancelled: list[object] = []

    def remote(self, _function: Any) -> Any:
        submit = SimpleNamespace(remote=lambda _request: object())
        return SimpleNamespace(options=lambda **_options: submit)

    def wait(self, refs: list[object], timeout: float) -> tuple[list[object], list[object]]:
        time.sleep(timeout)
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


def test_a_cancelled_task_whose_stream_never_ends_releases_its_waiting_thread(monkeypatch):
    ray = _EndlessRay()
    monkeypatch.setattr(executor_module, "_REMOTE", None)
    # A task's wait uses only the cluster: no base or spec is needed to submit and wait for one.
    executor = RayExecutor(Cluster(ray, "127.0.0.1:1"), spec=None, base=None)  # type: ignore[arg-type]
    request = SimpleNamespace(branch="hang", tier="scheduler")
    raised: list[BaseException] = []

    def attempt() -> None:
        try:
            executor._attempt(request, Resources(1, 0, 100), set(), None)  # type: ignore[arg-type]
        except BaseException as exc:  # noqa: BLE001 - what the waiting thread ended with
            raised.append(exc)

    waiting = threading.Thread(target=attempt, daemon=True)
    waiting.start()
    time.sleep(1.0)
    assert waiting.is_alive()  # the task has not ended: the thread waits, as it should
    try:
        stopped = stop_all_probes()
        waiting.join(timeout=5 * executor_module.TICK_S + 2)
    finally:
        allow_probes()
    assert not waiting.is_alive(), "the waiting thread still waits on the cancelled task"
    assert stopped.remote == 1 and len(ray.cancelled) == 1
    assert len(raised) == 1 and isinstance(raised[0], ProbesStopped)
