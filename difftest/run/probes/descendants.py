"""No descendant of a probe outlives it: processes that branch code starts are found and ended.

A probe runs in its own session, and the host kills that process group after
every exit. A child that left the group (`setsid`, a daemon's double fork) is
found another way: every probe gets a token of its own in its environment
(`TOKEN_ENV`), which its children inherit, and once the probe has ended the
host ends every process whose environment holds it. difftest also makes
itself a child subreaper (Linux `PR_SET_CHILD_SUBREAPER`), so an orphan is
re-parented to difftest rather than to init, and whatever is still its child
when the command ends is ended then (`end_orphans`).

Out of reach: a descendant that both clears its environment and leaves the
probe's process group, while difftest keeps running (it is ended when the
command ends, as an orphan of difftest's), or one started through another
service (systemd, a container runtime, `at`).
"""

from __future__ import annotations

import os
import secrets
import signal
import sys
from pathlib import Path

#: Every probe's processes carry this variable, with a value of their own probe's.
TOKEN_ENV = "DIFFTEST_PROBE_TOKEN"
_PR_SET_CHILD_SUBREAPER = 36


def new_token() -> str:
    """A token for one probe: this host's pid and a random part."""
    return f"{os.getpid()}-{secrets.token_hex(8)}"


def become_subreaper() -> bool:
    """Orphaned descendants are re-parented to this process (Linux); False where that is not
    possible."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        return (
            int(ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
        )
    except (OSError, AttributeError):
        return False


def _pids() -> list[int]:
    try:
        return [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []


def _environ(pid: int) -> list[bytes]:
    """The NAME=VALUE entries of a process's start environment ([] when it cannot be read)."""
    try:
        return Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return []


def _parent(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("PPid:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def _kill(pid: int, wait: bool = False) -> None:
    """SIGKILL `pid`; reap it if it is this process's child (`wait`: once it has died, so that its
    own children are re-parented here before the next look)."""
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        return
    _reap(pid, wait)


def _reap(pid: int, wait: bool) -> None:
    try:  # re-parented to this subreaper: reap it, or it stays a zombie until difftest ends
        os.waitpid(pid, 0 if wait else os.WNOHANG)
    except ChildProcessError:
        pass


def end_descendants(token: str, passes: int = 3) -> list[int]:
    """SIGKILL every process that carries `token` (a probe's descendants, once the probe has ended);
    a few passes, for any that forked while it was looked for. Their pids."""
    if not token:
        return []
    needle = f"{TOKEN_ENV}={token}".encode()
    ended: list[int] = []
    me = os.getpid()
    for _ in range(passes):
        found = [
            pid
            for pid in _pids()
            if pid != me and pid not in ended and _running(pid) and needle in _environ(pid)
        ]
        if not found:
            break
        for pid in found:
            _kill(pid)
        ended += found
    return ended


def end_probes_of(host_pid: int, passes: int = 3) -> list[int]:
    """SIGKILL every process carrying a token that host `host_pid` made (`new_token`): all its
    probes and their descendants, whoever their parent is now. A cluster node's keeper calls it
    once the worker that ran probes is gone (`run.cluster.keeper`). Their pids."""
    prefix = f"{TOKEN_ENV}={host_pid}-".encode()
    ended: list[int] = []
    me = os.getpid()
    for _ in range(passes):
        found = [
            pid
            for pid in _pids()
            if pid != me
            and pid not in ended
            and _running(pid)
            and any(entry.startswith(prefix) for entry in _environ(pid))
        ]
        if not found:
            break
        for pid in found:
            _kill(pid)
        ended += found
    return ended


def _running(pid: int) -> bool:
    """Not a zombie (a killed process waiting for its parent to reap it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def end_orphans(every_child: bool, passes: int = 20) -> list[int]:
    """SIGKILL the orphans re-parented to this process (`become_subreaper`) when a command ends, and
    reap those that already ended: its children that carry one of its probes' tokens, or with
    `every_child` all of its children (the command line's own process, where nothing else of its
    still runs then)."""
    me = os.getpid()
    ours = f"{TOKEN_ENV}={me}-".encode()
    ended: list[int] = []
    for _ in range(passes):  # each orphan ended re-parents its own children here: look again
        children = [pid for pid in _pids() if _parent(pid) == me]
        found = [
            pid
            for pid in children
            if _running(pid)
            and (every_child or any(entry.startswith(ours) for entry in _environ(pid)))
        ]
        for pid in found:
            _kill(pid, wait=True)
        for pid in children:  # orphans that ended on their own wait for this subreaper to reap them
            if pid not in found and not _running(pid):
                _reap(pid, wait=False)
        ended += found
        if not found:
            break
    return ended


def below(pid: int) -> list[int]:
    """`pid`'s descendants now (`/proc/PID/task/TID/children`, recursively): for a confined probe,
    the init of its pid namespace and whatever runs there."""
    found: list[int] = []
    frontier = [pid]
    while frontier:
        children: list[int] = []
        for parent in frontier:
            try:
                tasks = os.listdir(f"/proc/{parent}/task")
            except OSError:
                continue
            for task in tasks:
                try:
                    text = Path(f"/proc/{parent}/task/{task}/children").read_text()
                except OSError:
                    continue
                children += [int(child) for child in text.split()]
        found += children
        frontier = children
    return found


def kill_below(pid: int) -> list[int]:
    """SIGKILL every descendant of `pid` through pidfds (opened first: no pid recycled meanwhile is
    hit); the pidfds, for `wait_ended` (the kernel ends a pid namespace's processes when its init
    dies, a moment after: a caller that reads or removes what they wrote waits for that)."""
    pidfds: list[int] = []
    for child in below(pid):
        try:
            pidfd = os.pidfd_open(child)
        except OSError:
            continue
        try:
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        except OSError:
            pass
        pidfds.append(pidfd)
    return pidfds


def wait_ended(pidfds: list[int], limit_s: float = 10.0) -> None:
    """Until every process of `pidfds` has ended (or `limit_s` passed); closes them."""
    import select
    import time

    deadline = time.monotonic() + limit_s
    waiting = list(pidfds)
    try:
        while waiting and time.monotonic() < deadline:
            ready, _, _ = select.select(waiting, [], [], max(0.0, deadline - time.monotonic()))
            waiting = [fd for fd in waiting if fd not in ready]
    finally:
        for fd in pidfds:
            os.close(fd)
