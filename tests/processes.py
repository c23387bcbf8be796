"""What the tests ask of a process: is it still running, who started it, what is below it; and
those left, ended."""

from __future__ import annotations

import os
import signal
from pathlib import Path


def alive(pid: int) -> bool:
    """Running (a zombie waiting for its reaper does not count)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _stat(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def _namespace_depth(pid: int) -> int:
    """How many pid namespaces `pid` is in (its `NSpid` line's length)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("NSpid:"):
                return len(line.split()) - 1
    except OSError:
        pass
    return 0


def starter(pid: int) -> int:
    """The process that started probe `pid`, as `os.getppid()` named it before probes had pid
    namespaces: the parent of the first of its ancestors (itself included) in this process's own
    pid namespace (the confinement's wrapper, or the fork server's child, stands between)."""
    mine = _namespace_depth(os.getpid())
    current = pid
    while _namespace_depth(current) > mine:
        stat = _stat(current)
        if not stat:
            return pid
        current = int(stat[1])
    stat = _stat(current)
    return int(stat[1]) if stat else pid


def survivors(pids: list[int]) -> list[int]:
    """The processes of `pids` still running, killed so that a failing test leaves none behind."""
    left = [pid for pid in pids if alive(pid)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    return left


def descendants(pid: int) -> list[int]:
    """Every process below `pid` now (children, theirs, ...)."""
    parents: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                stat = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            parents[int(name)] = int(stat[1])
    found: list[int] = []
    frontier = [pid]
    while frontier:
        below = [child for child, parent in parents.items() if parent in frontier]
        found += below
        frontier = below
    return found
