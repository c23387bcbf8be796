"""What the tests ask of a process: is it still running."""

from __future__ import annotations

from pathlib import Path


def alive(pid: int) -> bool:
    """Running (a zombie waiting for its reaper does not count)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"
