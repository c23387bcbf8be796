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
import select
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from difftest.core.text import clean
from difftest.core.verdicts import one_line
from difftest.probe.protocol import (
    EXIT_NOT_SHAREABLE,
    FORKSERVER_PIPES_FD_ENV,
    NONCE_ENV,
    NOT_SHAREABLE_PREFIX,
)
from difftest.run.probes.files import open_log_for_append, open_records
from difftest.run.probes.sandbox import protection
from difftest.run.probes.scratch import Scratch


class ProbeProcess(Protocol):
    """What the runner needs of a started probe (a `subprocess.Popen` has it)."""

    pid: int
    returncode: int | None

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...


#: How long a forked probe may be gone before the server reports how it ended; past it, the server
#: is taken for stuck (the probe is ended without a code and the server is not used again).
REPORT_GRACE_S = 5.0
#: How long the server may take to fork a probe once asked.
FORK_ANSWER_S = 30.0
#: The folder below the fork server's scratch folder that holds each child's.
CHILDREN = "children"
#: The code of a forked probe whose end the server never reported.
UNREPORTED = -1


class ForkedProcess:
    """A probe forked by the fork server. Its end (with its exit code) is reported by the server,
    its parent; it is also watched directly (a pidfd), so a stuck server never leaves the host
    waiting."""

    def __init__(self, pid: int, server: ForkServer, scratch: Scratch | None = None) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._server = server
        #: Its scratch folder below the server's (`scratch`), removed when it ends.
        self._scratch = scratch
        self._ended = threading.Event()
        self._gone_since: float | None = None
        #: The pidfd is closed by whichever thread learns of the end first, and read by the watcher.
        self._fd_lock = threading.Lock()
        try:
            self._pidfd: int | None = os.pidfd_open(pid)
        except (OSError, AttributeError):  # not Linux >= 5.3: the server's report is the only word
            self._pidfd = None

    def ended(self, code: int) -> None:
        with self._fd_lock:
            if self.returncode is None:
                self.returncode = code
            if self._pidfd is not None:
                os.close(self._pidfd)
                self._pidfd = None
            scratch, self._scratch = self._scratch, None
        if scratch is not None:
            scratch.remove()
        self._ended.set()

    def poll(self) -> int | None:
        if self.returncode is None and self._gone():
            now = time.monotonic()
            self._gone_since = self._gone_since or now
            if now - self._gone_since > REPORT_GRACE_S:
                self._server.fail(f"it did not report the end of probe {self.pid}")
                self.ended(UNREPORTED)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(str(self.pid), timeout or 0)
            self._ended.wait(0.1)
        assert self.returncode is not None
        return self.returncode

    def _gone(self) -> bool:
        """The process has ended (reaped or not)."""
        with self._fd_lock:
            if self._pidfd is None:
                return False
            readable, _, _ = select.select([self._pidfd], [], [], 0)
            return bool(readable)


class ForkedPipes(ForkedProcess):
    """A forked warm probe: a `ForkedProcess` with the host's ends of its stdin and stdout, as
    `subprocess.Popen(..., stdin=PIPE, stdout=PIPE, bufsize=0)` gives them."""

    def __init__(
        self, pid: int, server: ForkServer, stdin: int, stdout: int, scratch: Scratch | None = None
    ) -> None:
        super().__init__(pid, server, scratch)
        self.stdin = os.fdopen(stdin, "wb", buffering=0)
        self.stdout = os.fdopen(stdout, "rb", buffering=0)


@dataclass
class ServerState:
    """What the fork server said when it started."""

    ready: bool = False
    why: str = ""
    import_s: float = 0.0
    modules: list[str] = field(default_factory=list)


class ForkServer:
    """One warm interpreter per tier (`python -m difftest.probe.forkserver`), forking a probe per
    branch.

    Started with one branch environment's interpreter: the shared libraries come
    from the base every branch environment shares, and each child switches to
    its own branch's path before importing vLLM. A server that stops answering,
    or says something it should not, is killed and not used again (`failure`).
    """

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        ready_timeout_s: float,
        pipes: socket.socket | None = None,
        scratch: Path | None = None,
        confined: bool = False,
    ) -> None:
        self._proc = proc
        #: The host's end of the socket descriptors go over (None: the server takes none).
        self._pipes = pipes
        #: The server's own scratch folder: each child gets one below it (None: children share the
        #: server's), the only folder it may write when `confined`
        #: (`probe.confine.confine_forked_child`).
        self._scratch = scratch
        self._confined = confined and scratch is not None
        self._lock = threading.Lock()
        self._next_id = 0
        #: Request id -> the child's pid, or why the server could not start it.
        self._answers: dict[int, int | str] = {}
        self._children: dict[int, ForkedProcess] = {}
        self._early_ends: dict[int, int] = {}
        self._changed = threading.Condition(self._lock)
        self.state = ServerState()
        #: Why the server may not be used any more ("" while it may).
        self.failure = ""
        self._got_state = threading.Event()
        self._reader = threading.Thread(
            target=self._read, name="difftest-forkserver-reader", daemon=True
        )
        self._reader.start()
        if not self._got_state.wait(ready_timeout_s):
            self.fail(f"it did not finish its imports in {ready_timeout_s:.0f} s")

    @property
    def process(self) -> subprocess.Popen[bytes]:
        return self._proc

    @property
    def usable(self) -> bool:
        return self.state.ready and not self.failure and self._proc.poll() is None

    def fail(self, why: str) -> None:
        """Stop using the server: kill it, end the probes it has not reported, keep the first
        reason."""
        with self._lock:
            self.failure = self.failure or f"the fork server failed: {why}"
            self._end_children()
            self._changed.notify_all()
        self._proc.kill()

    def spawn(
        self,
        python: Path,
        argv: list[str],
        env: dict[str, str],
        cwd: Path,
        log: Path,
        nonce: str | None = None,
        seed: Path | None = None,
        records: Path | None = None,
    ) -> ForkedProcess:
        """Fork a probe for `python`'s branch, its `nonce` on a pipe of its own, its log and
        `records` opened here and sent as descriptors; raises OSError when the server cannot."""
        fds: dict[str, int] = {}
        try:
            if self._pipes is not None:
                fds["log"] = open_records(log)
                if records is not None:
                    fds["records"] = open_records(records)
            return self._spawn(python, argv, env, cwd, log, nonce, fds, seed, ForkedProcess)
        finally:
            for fd in fds.values():
                os.close(fd)

    def spawn_with_pipes(
        self,
        python: Path,
        argv: list[str],
        env: dict[str, str],
        cwd: Path,
        log: Path,
        nonce: str,
        seed: Path | None = None,
    ) -> ForkedPipes:
        """Fork a warm probe whose stdin and stdout are pipes to this host (its stderr appended to
        `log`); raises OSError when the server cannot."""
        if self._pipes is None:
            raise OSError("this fork server takes no pipes")
        job_read, job_write = os.pipe()
        answer_read, answer_write = os.pipe()
        made: list[ForkedPipes] = []

        def make(pid: int, server: ForkServer, scratch: Scratch | None) -> ForkedPipes:
            made.append(ForkedPipes(pid, server, job_write, answer_read, scratch))
            return made[0]

        fds = {"stdin": job_read, "stdout": answer_write}
        try:
            fds["log"] = open_log_for_append(log)
            child = self._spawn(python, argv, env, cwd, log, nonce, fds, seed, make)
        finally:
            for fd in fds.values():  # the child's ends: its own now
                os.close(fd)
            if not made:  # never forked: the host's ends go too
                os.close(job_write)
                os.close(answer_read)
        assert isinstance(child, ForkedPipes)
        return child

    def _spawn(
        self,
        python: Path,
        argv: list[str],
        env: dict[str, str],
        cwd: Path,
        log: Path,
        nonce: str | None,
        given: dict[str, int],
        seed: Path | None,
        make: Callable[[int, ForkServer, Scratch | None], ForkedProcess],
    ) -> ForkedProcess:
        fds: dict[str, int] = {}
        scratch = None
        if self._scratch is not None:
            scratch = Scratch.create(seed, parent=self._scratch / CHILDREN)
            env = {**env, **scratch.environ()}
        if nonce is not None and self._pipes is not None:
            # Never in the request: every child forked later inherits the server's memory.
            read_end, write_end = os.pipe()
            os.write(write_end, nonce.encode("ascii"))
            os.close(write_end)
            fds["nonce"] = read_end
        elif nonce is not None:
            env = {**env, NONCE_ENV: nonce}
        try:
            return self._request(python, argv, env, cwd, log, {**fds, **given}, scratch, make)
        except BaseException:
            if scratch is not None:
                scratch.remove()
            raise
        finally:
            for fd in fds.values():
                os.close(fd)

    def _request(
        self,
        python: Path,
        argv: list[str],
        env: dict[str, str],
        cwd: Path,
        log: Path,
        fds: dict[str, int],
        scratch: Scratch | None,
        make: Callable[[int, ForkServer, Scratch | None], ForkedProcess],
    ) -> ForkedProcess:
        with self._lock:
            self._next_id += 1
            request_id = self._next_id
            request = {
                "id": request_id,
                "python": str(python),
                "argv": argv,
                "env": env,
                "cwd": str(cwd),
                "log": str(log),
                "fds": list(fds),
                "scratch": str(scratch.root) if scratch is not None else None,
                "scratch_root": str(self._scratch) if self._scratch is not None else None,
                "confine": self._confined,
            }
            assert self._proc.stdin is not None
            if fds:
                assert self._pipes is not None
                try:
                    socket.send_fds(self._pipes, [str(request_id).encode()], list(fds.values()))
                except OSError as exc:  # its buffer full for `FORK_ANSWER_S`: it is stuck
                    self.failure = (
                        self.failure or f"the fork server failed: it took no descriptors ({exc})"
                    )
                    self._end_children()
                    self._changed.notify_all()
                    self._proc.kill()
                    raise OSError(self.failure) from None
            self._proc.stdin.write((json.dumps(request) + "\n").encode())
            self._proc.stdin.flush()
            deadline = time.monotonic() + FORK_ANSWER_S
            while request_id not in self._answers:
                if self.failure or self._proc.poll() is not None:
                    raise OSError(
                        self.failure or "the fork server ended before it forked the probe"
                    )
                if time.monotonic() > deadline:
                    break
                self._changed.wait(0.2)
            else:
                answer = self._answers.pop(request_id)
                if isinstance(answer, str):
                    raise OSError(f"the fork server could not start it: {answer}")
                child = make(answer, self, scratch)
                if answer in self._early_ends:
                    child.ended(self._early_ends.pop(answer))
                else:
                    self._children[answer] = child
                return child
        self.fail(f"it did not fork a probe within {FORK_ANSWER_S:.0f} s")
        raise OSError(self.failure)

    def close(self) -> None:
        """End the server: its stdin closes, it exits, and any child still running dies with it."""
        try:
            if self._proc.stdin is not None:
                self._proc.stdin.close()
        except OSError:
            pass
        try:
            self._proc.wait(timeout=0 if self.failure else 10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        if self._pipes is not None:
            self._pipes.close()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for raw in self._proc.stdout:
            try:
                with self._lock:
                    self._take(json.loads(raw))
                    self._changed.notify_all()
            except (ValueError, TypeError, KeyError, AttributeError):
                self.fail(
                    "it sent a message difftest cannot read: "
                    f"{clean(raw[:120].decode(errors='replace'))!r}"
                )
                break
        with self._lock:  # the server is gone: so are its children (they die with it)
            self._end_children()
            self._changed.notify_all()
        self._got_state.set()

    def _end_children(self) -> None:
        for child in self._children.values():
            child.ended(-9)
        self._children.clear()

    def _take(self, message: dict[str, Any]) -> None:
        if "ready" in message:
            if not self._got_state.is_set():  # a late "ready" changes nothing once the wait gave up
                self.state = ServerState(
                    bool(message["ready"]),
                    clean(str(message.get("why") or "")),
                    float(message.get("import_s", 0.0)),
                    [str(m) for m in message.get("modules", [])],
                )
                self._got_state.set()
        elif "id" in message:
            self._answers[int(message["id"])] = (
                clean(str(message["error"])) if "error" in message else int(message["pid"])
            )
        else:
            pid, code = int(message["pid"]), int(message["code"])
            child = self._children.pop(pid, None)
            if child is None:
                self._early_ends[pid] = code
            else:
                child.ended(code)


def start_fork_server(
    python: Path, env: dict[str, str], cwd: Path, log: Path, ready_timeout_s: float, start: Any
) -> ForkServer:
    """Start the server with `start` (the runner's registry-aware Popen) and wait for its
    imports. It is given one end of a Unix socket, over which warm probes' pipes are sent."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    confined = protection().active
    scratch = Scratch.create()
    (scratch.root / CHILDREN).mkdir()
    try:
        with open(log, "wb") as stream:
            proc = start(
                [str(python), "-m", "difftest.probe.forkserver"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stream,
                cwd=cwd,
                env={**env, FORKSERVER_PIPES_FD_ENV: str(theirs.fileno())},
                start_new_session=True,
                pass_fds=(theirs.fileno(),),
                scratch=scratch,
            )
    except BaseException:
        ours.close()
        raise
    finally:
        theirs.close()
    ours.settimeout(FORK_ANSWER_S)  # a server that takes no descriptors fails, never hangs us
    server = ForkServer(proc, ready_timeout_s, ours, scratch.root, confined)
    if not server.state.ready and not server.state.why and not server.failure:
        code = proc.wait()
        tail = log.read_text(errors="replace").strip().splitlines()[-1:] if log.exists() else []
        server.state.why = (
            f"the warm process exited ({code}): {one_line(tail[0]) if tail else 'no output'}"
        )
    return server


def refusal(code: int | None, log_tail: str) -> str | None:
    """Why a forked child refused to measure its branch (its branch would not see the shared
    libraries a fresh probe would; it says so in its log, before measuring anything), or None. The
    branch is then probed in a fresh interpreter. A branch's own exit with the same code has no such
    line."""
    said = [line for line in log_tail.splitlines() if line.startswith(NOT_SHAREABLE_PREFIX)]
    return (
        said[-1].removeprefix(NOT_SHAREABLE_PREFIX) if code == EXIT_NOT_SHAREABLE and said else None
    )
