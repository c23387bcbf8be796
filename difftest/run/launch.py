"""How a probe process starts: a fresh interpreter, or a child forked from a warm one.

Both give the runner a process it can poll, time out and kill by process
group, and both are held in the runner's registry of live probes; the probe
itself cannot tell them apart (`difftest.probe.forkserver`). A fork server
that cannot start, is refused as unsafe, or dies, never costs a measurement:
the branch is started fresh instead, and the reason is kept for the reports.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from difftest.core.text import clean
from difftest.core.verdicts import one_line
from difftest.probe.protocol import EXIT_NOT_SHAREABLE


class ProbeProcess(Protocol):
    """What the runner needs of a started probe (a `subprocess.Popen` has it)."""

    pid: int
    returncode: int | None

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...


class ForkedProcess:
    """A probe forked by the fork server: its end is reported by the server, which is its parent."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._ended = threading.Event()

    def ended(self, code: int) -> None:
        self.returncode = code
        self._ended.set()

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._ended.wait(timeout):
            raise subprocess.TimeoutExpired(str(self.pid), timeout or 0)
        assert self.returncode is not None
        return self.returncode


@dataclass
class ServerState:
    """What the fork server said when it started."""

    ready: bool = False
    why: str = ""
    import_s: float = 0.0
    modules: list[str] = field(default_factory=list)


class ForkServer:
    """One warm interpreter per tier (`python -m difftest.probe.forkserver`), forking a probe per branch.

    Started with one branch environment's interpreter: the shared libraries come
    from the base every branch environment shares, and each child switches to
    its own branch's path before importing vLLM.
    """

    def __init__(self, proc: subprocess.Popen[bytes], ready_timeout_s: float) -> None:
        self._proc = proc
        self._lock = threading.Lock()
        self._next_id = 0
        self._answers: dict[int, int] = {}
        self._children: dict[int, ForkedProcess] = {}
        self._early_ends: dict[int, int] = {}
        self._changed = threading.Condition(self._lock)
        self.state = ServerState()
        self._got_state = threading.Event()
        self._reader = threading.Thread(target=self._read, name="difftest-forkserver-reader", daemon=True)
        self._reader.start()
        if not self._got_state.wait(ready_timeout_s):
            self.state.why = f"the warm process did not finish its imports in {ready_timeout_s:.0f} s"

    @property
    def process(self) -> subprocess.Popen[bytes]:
        return self._proc

    @property
    def usable(self) -> bool:
        return self.state.ready and self._proc.poll() is None

    def spawn(self, python: Path, argv: list[str], env: dict[str, str], cwd: Path, log: Path) -> ForkedProcess:
        """Fork a probe for `python`'s branch; raises OSError when the server is gone."""
        with self._lock:
            self._next_id += 1
            request_id = self._next_id
            request = {"id": request_id, "python": str(python), "argv": argv, "env": env, "cwd": str(cwd),
                       "log": str(log)}
            assert self._proc.stdin is not None
            self._proc.stdin.write((json.dumps(request) + "\n").encode())
            self._proc.stdin.flush()
            while request_id not in self._answers:
                if self._proc.poll() is not None:
                    raise OSError("the fork server ended before it forked the probe")
                self._changed.wait(0.2)
            pid = self._answers.pop(request_id)
            child = ForkedProcess(pid)
            if pid in self._early_ends:
                child.ended(self._early_ends.pop(pid))
            else:
                self._children[pid] = child
            return child

    def close(self) -> None:
        """End the server: its stdin closes, it exits, and any child still running dies with it."""
        try:
            if self._proc.stdin is not None:
                self._proc.stdin.close()
        except OSError:
            pass
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for raw in self._proc.stdout:
            try:
                message = json.loads(raw)
            except ValueError:
                continue
            with self._lock:
                self._take(message)
                self._changed.notify_all()
        with self._lock:  # the server is gone: so are its children (they die with it)
            for child in self._children.values():
                child.ended(-9)
            self._children.clear()
            self._changed.notify_all()
        self._got_state.set()

    def _take(self, message: dict[str, Any]) -> None:
        if "ready" in message:
            self.state = ServerState(bool(message["ready"]), clean(str(message.get("why") or "")),
                                     float(message.get("import_s", 0.0)), list(message.get("modules", [])))
            self._got_state.set()
        elif "id" in message:
            self._answers[int(message["id"])] = int(message["pid"])
        elif "pid" in message:
            pid, code = int(message["pid"]), int(message["code"])
            child = self._children.pop(pid, None)
            if child is None:
                self._early_ends[pid] = code
            else:
                child.ended(code)


def start_fork_server(python: Path, env: dict[str, str], cwd: Path, log: Path, ready_timeout_s: float,
                      start: Any) -> ForkServer:
    """Start the server with `start` (the runner's registry-aware Popen) and wait for its imports."""
    with open(log, "wb") as stream:
        proc = start([str(python), "-m", "difftest.probe.forkserver"], stdin=subprocess.PIPE,
                     stdout=subprocess.PIPE, stderr=stream, cwd=cwd, env=env, start_new_session=True)
    server = ForkServer(proc, ready_timeout_s)
    if not server.state.ready and not server.state.why:
        code = proc.poll()
        tail = log.read_text(errors="replace").strip().splitlines()[-1:] if log.exists() else []
        server.state.why = f"the warm process exited ({code}): {one_line(tail[0]) if tail else 'no output'}"
    return server


def not_shareable(code: int | None) -> bool:
    """The forked child found a shared library its branch would import from elsewhere: run it fresh."""
    return code == EXIT_NOT_SHAREABLE
