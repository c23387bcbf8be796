"""One lock per environment folder: a build holds it, and `envs --prune` skips what is locked.

Builds of the same environment by several processes (xdist workers, two
terminals) wait on each other; `prune` tries each lock without waiting, so it
never deletes a folder another process is building or checking.
"""

from __future__ import annotations

from pathlib import Path

from filelock import FileLock

from difftest.core import paths
from difftest.core.locks import own_lock


def env_lock(folder_name: str) -> FileLock:
    """The lock of the environment that will live in `envs/<folder_name>` (`own_lock`: never
    through a symlink)."""
    return own_lock(paths.locks_dir() / f"{folder_name}.lock")


def owner_name(folder: Path) -> str:
    """The environment a folder belongs to: a build in progress `.branch-x-y.tmp123` is
    `branch-x-y`."""
    name = folder.name
    if name.startswith("."):
        name = name[1:].rsplit(".", 1)[0]
    return name
