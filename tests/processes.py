"""What the tests ask of a process: is it still running; and those left, ended."""

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


def survivors(pids: list[int]) -> list[int]:
    """The processes of `pids` still running, killed so that a failing test leaves none behind."""
    left = [pid for pid in pids if alive(pid)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    return left
