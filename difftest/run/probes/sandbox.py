"""Probes run where what other branches read is read-only: a hostile branch's code cannot reach it.

A branch's probe runs the branch's own code, and difftest shares files between branches to stay
cheap: every branch environment's `overlay/vllm` is a hard-linked copy of the base's `vllm/` (the
same inodes), the base may share inodes with uv's cache, and the git mirrors and result cache serve
every branch. A probe that rewrote one of those files in place (keeping its size, mtime
and bytecode) would change every other branch's results, and a check by inode or size would not see
it.

So every probe process (fresh, fork server and its children, fuzz's warm probes, tests-tier
sessions, a cluster node's probes) is started inside a user and mount namespace where those folders
are bind-mounted read-only, and then inside a second, nested user namespace, in which the kernel
locks those mounts: the probe, though it holds every capability in its own namespace, can neither
remount them writable nor unmount them (mount_namespaces(7), "locked mounts"), and cannot reach the
host's view through `/proc/PID/root` (checked in `tests/tiers/test_sandbox.py`). A write fails with
"Read-only file system", so the branch's own code fails, and it reads as that branch's crash.

It needs Linux user namespaces and util-linux's `unshare` and `mount`. Where they are missing or
forbidden, probes run as before and `protection()` says so; the content check of the base
(`build.envs.integrity`) still finds a changed file before the next run trusts it.
`DIFFTEST_SANDBOX=off` turns it off (a host that already isolates each probe, or debugging).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

from difftest.core import paths

SANDBOX_ENV = "DIFFTEST_SANDBOX"
#: The exit code of the wrapper itself when a read-only mount fails (never the probe's).
MOUNT_FAILED = 121

#: Runs in the outer namespace: bind each folder onto itself read-only, then exec the probe in a
#: nested user namespace, where those mounts are locked.
_SCRIPT = (
    'n="$1"; shift; '
    'while [ "$n" -gt 0 ]; do '
    'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" || exit ' + str(MOUNT_FAILED) + "; "
    "shift; n=$((n - 1)); done; "
    'exec unshare --user --map-root-user --mount -- "$@"'
)


@dataclass(frozen=True)
class Protection:
    """Whether probes run with the shared folders read-only, which folders, or why not."""

    active: bool
    folders: tuple[Path, ...]
    why_not: str = ""

    def describe(self) -> str:
        if self.active:
            return "shared files read-only to probes: " + ", ".join(str(f) for f in self.folders)
        return f"shared files NOT write-protected from probes: {self.why_not}"


def shared_folders() -> tuple[Path, ...]:
    """What other branches, the base or a cache read, and no probe needs to write: the
    environments (base and overlays), the git mirrors, the sources, the result cache and uv's cache
    (which a base built before copies shares inodes with). Not the models: the first probe that
    needs one builds it there (`probe.common.atomic_dir`)."""
    found = [
        paths.envs_dir(),
        paths.repos_dir(),
        paths.sources_dir(),
        paths.results_dir(),
        _uv_cache(),
    ]
    unique: dict[Path, None] = {}
    for folder in found:
        if folder is not None and folder.is_dir():
            unique.setdefault(folder.resolve(), None)
    return tuple(unique)


def _uv_cache() -> Path | None:
    explicit = os.environ.get("UV_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "uv"


_CHECKED: dict[tuple[Path, ...], Protection] = {}
_LOCK = threading.Lock()


def protection() -> Protection:
    """What `wrap` will do for this process's shared folders: tried once per set of folders."""
    folders = shared_folders()
    with _LOCK:
        if folders not in _CHECKED:
            _CHECKED[folders] = _try(folders)
        return _CHECKED[folders]


def _try(folders: tuple[Path, ...]) -> Protection:
    if os.environ.get(SANDBOX_ENV, "").lower() == "off":
        return Protection(False, folders, f"{SANDBOX_ENV}=off")
    missing = [tool for tool in ("unshare", "mount", "sh") if shutil.which(tool) is None]
    if missing:
        return Protection(False, folders, f"{', '.join(missing)} not found (util-linux)")
    if not folders:
        return Protection(True, folders)
    # The probe's real question: can a process in the nested namespace write a shared folder?
    probe = ["sh", "-c", 'test ! -w "$1" || ! : > "$1/.difftest-sandbox-check"', "sh"]
    argv = _wrapped([*probe, str(folders[0])], folders)
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as error:
        return Protection(False, folders, f"user namespaces did not start ({error})")
    leftover = folders[0] / ".difftest-sandbox-check"
    if leftover.exists():
        leftover.unlink()
        return Protection(False, folders, "a folder mounted read-only was still writable")
    if done.returncode != 0:
        said = (done.stderr.strip().splitlines() or ["no message"])[-1]
        return Protection(False, folders, f"user namespaces are not available here ({said})")
    return Protection(True, folders)


def _wrapped(argv: list[str], folders: tuple[Path, ...]) -> list[str]:
    return [
        "unshare",
        "--user",
        "--map-root-user",
        "--mount",
        "--propagation",
        "private",
        "--",
        "sh",
        "-c",
        _SCRIPT,
        "sh",
        str(len(folders)),
        *(str(folder) for folder in folders),
        *argv,
    ]


def wrap(argv: list[str]) -> list[str]:
    """`argv` as it runs inside the sandbox (the same process id: each step `exec`s the next), or
    unchanged where `protection()` is not active."""
    guard = protection()
    if not guard.active or not guard.folders:
        return list(argv)
    return _wrapped(list(argv), guard.folders)
