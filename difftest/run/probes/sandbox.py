"""Probes run where what other branches read is read-only: a hostile branch's code cannot reach it.

A branch's probe runs the branch's own code, and difftest shares files between branches to stay
cheap: every branch environment's `overlay/vllm` is a hard-linked copy of the base's `vllm/` (the
same inodes), a base built by an older difftest shares inodes with uv's cache, and the git
mirrors, test trees and result cache serve every branch. A probe that rewrote one of those files
in place (keeping its size, mtime and bytecode) would change every other branch's results, and a
check by inode or size would not see it.

So every probe process (fresh, fork server and its children, fuzz's warm probes, tests-tier
sessions, a cluster node's probes) is started inside a user and mount namespace where those folders,
the interpreters' installations, difftest's own code and the system's programs and libraries are
bind-mounted read-only, and then inside a second, nested user namespace, in which the kernel locks
those mounts: the probe can neither remount them writable nor unmount them (mount_namespaces(7),
"locked mounts"), nor reach the host's view through `/proc/PID/root`
(`tests/unit/test_sandbox.py`). The nested namespace maps the probe back to the caller's own user
and group. A write fails with "Read-only file system", so the branch's own code fails, and it reads
as that branch's fault. The programs that set this up are found on a fixed system path, never the
caller's `PATH` (which a probe could write to).

What stays writable to a probe (and so to a hostile branch): its own `--out` folder (the other
probes' records files in it included), the tiny models it builds, vLLM's and Hugging Face's caches
inside difftest's home, the temporary folder, and the rest of the caller's home. The probes of one
tests-tier session share one namespace (one pytest session, one worker per branch).

It needs Linux user namespaces and util-linux's `unshare` and `mount`. Where they are missing or
forbidden, probes run as before and `protection()` says so; the run log repeats it.
`DIFFTEST_SANDBOX=off` turns it off (a host that already isolates each probe, or debugging).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from difftest.core import paths

SANDBOX_ENV = "DIFFTEST_SANDBOX"
#: The exit code of the wrapper itself when a read-only mount fails (never the probe's).
MOUNT_FAILED = 121
#: Where the programs that build the sandbox are looked up (root's, read-only inside it).
SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
#: The package difftest runs from: a probe must not rewrite the judge.
PACKAGE_ROOT = Path(__file__).resolve().parents[2]
#: The system's programs, libraries and settings, read-only to probes (where they exist).
SYSTEM_FOLDERS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc", "/opt")


@dataclass(frozen=True)
class Protection:
    """Whether probes run with the shared folders read-only, which folders, or why not."""

    active: bool
    folders: tuple[Path, ...]
    why_not: str = ""
    #: Absolute paths of `unshare`, `mount` and `sh` (found on `SYSTEM_PATH`).
    tools: tuple[str, str, str] = ("unshare", "mount", "sh")

    def describe(self) -> str:
        if self.active:
            return f"shared files read-only to probes ({len(self.folders)} folders)"
        return f"shared files NOT write-protected from probes: {self.why_not}"


def shared_folders() -> tuple[Path, ...]:
    """What other branches, the base, a cache or difftest itself read, and no probe needs to
    write: the environments (base and overlays, and what a linked environment points at), the git
    mirrors, sources, test trees and test-only packages, stand-in model configs, the result cache,
    uv's cache, the interpreters' installations, difftest's code, the system's folders. Not the
    models: the first probe that needs one builds it there (`probe.common.atomic_dir`)."""
    envs = paths.envs_dir()
    found: list[Path | None] = [
        envs,
        *_link_targets(envs),
        paths.repos_dir(),
        paths.sources_dir(),
        paths.test_roots_dir(),
        paths.test_deps_dir(),
        paths.hf_standins_dir(),
        paths.results_dir(),
        _uv_cache(),
        Path(sys.base_prefix),
        Path(sys.prefix),
        PACKAGE_ROOT,
        *(Path(folder) for folder in SYSTEM_FOLDERS),
    ]
    unique: dict[Path, None] = {}
    for folder in found:
        if folder is not None and folder.is_dir():
            unique.setdefault(folder.resolve(), None)
    return tuple(unique)


def _link_targets(envs: Path) -> list[Path]:
    """Where the environments linked into `envs` (a node's home reaching the machine's base) lie."""
    try:
        return [entry.resolve() for entry in envs.iterdir() if entry.is_symlink()]
    except OSError:
        return []


def _uv_cache() -> Path | None:
    explicit = os.environ.get("UV_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "uv"


_CHECKED: dict[tuple[str, tuple[Path, ...]], Protection] = {}
_LOCK = threading.Lock()


def protection() -> Protection:
    """What `wrap` will do for this process's shared folders: tried once per setting and set of
    folders."""
    key = (os.environ.get(SANDBOX_ENV, "").lower(), shared_folders())
    with _LOCK:
        if key not in _CHECKED:
            _CHECKED[key] = _try(key[1])
        return _CHECKED[key]


def _try(folders: tuple[Path, ...]) -> Protection:
    if os.environ.get(SANDBOX_ENV, "").lower() == "off":
        return Protection(False, folders, f"{SANDBOX_ENV}=off")
    found = {tool: shutil.which(tool, path=SYSTEM_PATH) for tool in ("unshare", "mount", "sh")}
    missing = [tool for tool, where in found.items() if where is None]
    if missing:
        return Protection(False, folders, f"{', '.join(missing)} not found on {SYSTEM_PATH}")
    tools = (str(found["unshare"]), str(found["mount"]), str(found["sh"]))
    guard = Protection(True, folders, tools=tools)
    if not folders:
        return guard
    # The real question: can a process in the nested namespace write a shared folder?
    target = folders[0] / ".difftest-sandbox-check"
    probe = [tools[2], "-c", 'test ! -w "$1" || ! : > "$1/.difftest-sandbox-check"', "sh"]
    try:
        done = subprocess.run(
            _wrapped([*probe, str(folders[0])], guard), capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return Protection(False, folders, f"user namespaces did not start ({error})")
    if target.exists():
        target.unlink()
        return Protection(False, folders, "a folder mounted read-only was still writable")
    if done.returncode != 0:
        said = (done.stderr.strip().splitlines() or ["no message"])[-1]
        return Protection(False, folders, f"user namespaces are not available here ({said})")
    return guard


def _wrapped(argv: list[str], guard: Protection) -> list[str]:
    unshare, mount, sh = guard.tools
    mount, inner = shlex.quote(mount), shlex.quote(unshare)
    script = (
        'n="$1"; shift; '
        'while [ "$n" -gt 0 ]; do '
        f'{mount} --rbind "$1" "$1" && {mount} -o remount,bind,ro "$1" || exit {MOUNT_FAILED}; '
        "shift; n=$((n - 1)); done; "
        f"exec {inner} --user --map-user={os.getuid()} --map-group={os.getgid()} --mount -- "
        '"$@"'
    )
    return [
        unshare,
        "--user",
        "--map-root-user",
        "--mount",
        "--propagation",
        "private",
        "--",
        sh,
        "-c",
        script,
        "sh",
        str(len(guard.folders)),
        *(str(folder) for folder in guard.folders),
        *argv,
    ]


def wrap(argv: list[str]) -> list[str]:
    """`argv` as it runs inside the sandbox (the same process id: each step `exec`s the next), or
    unchanged where `protection()` is not active."""
    guard = protection()
    if not guard.active or not guard.folders:
        return list(argv)
    return _wrapped(list(argv), guard)
