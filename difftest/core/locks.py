"""The one way difftest opens a lock file of its own (`own_lock`).

Every lock difftest takes lives in a folder of its own (`DIFFTEST_HOME/locks/`,
beside a fixture repository, `--out/.difftest.lock`), and branch code runs with
the user's rights, so it can replace a lock file with a symlink. filelock opens
the lock path with O_NOFOLLOW (from 3.20.1; before, it truncated the symlink's
target): a symlink there makes every later acquire fail with ELOOP, a traceback
on every command. The path is difftest's, so such a file is never followed but
removed and made again as a plain file; only when that fails does the command
stop, with a ConfigError naming the file and the fix.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from filelock import FileLock

from difftest.core.errors import ConfigError

#: How often a lock path that keeps changing under us is looked at again before giving up.
_ATTEMPTS = 3


def own_lock(path: Path, timeout: float = -1) -> FileLock:
    """A FileLock on `path` (`timeout` as FileLock's), once `path` is a regular file or absent.

    Call it right before acquiring: what it repairs is what is there now.
    """
    make_lock_file_regular(path)
    return FileLock(str(path), timeout=timeout)


def make_lock_file_regular(path: Path) -> None:
    """Replace whatever is at `path` that is not a regular file (a symlink, a folder, a FIFO) by a
    fresh, empty regular file, never following it; leave a regular file (or nothing) as it is.

    Raises ConfigError naming the path when it cannot be replaced.
    """
    for _attempt in range(_ATTEMPTS):
        try:
            found = os.lstat(path)
        except FileNotFoundError:
            return  # filelock makes it (with O_NOFOLLOW)
        except OSError as exc:
            raise _unreplaceable(path, "it cannot be examined", exc) from None
        if stat.S_ISREG(found.st_mode):
            return
        try:
            _remove_entry(path, found)
            _create_empty(path)
            return
        except FileNotFoundError:
            continue  # another process replaced it first
        except FileExistsError:
            continue  # another process made it again first: look at what it made
        except OSError as exc:
            raise _unreplaceable(path, f"it is {_kind(found)}", exc) from None
    raise _unreplaceable(
        path, "it keeps changing", OSError(errno.EAGAIN, "changed while it was replaced")
    )


def _remove_entry(path: Path, found: os.stat_result) -> None:
    """Remove the entry itself (the link, never its target); a folder only when it is empty."""
    if stat.S_ISDIR(found.st_mode):
        os.rmdir(path)
    else:
        os.unlink(path)


def _create_empty(path: Path) -> None:
    """A new empty regular file at `path`; fails (FileExistsError) when anything is there."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    os.close(os.open(path, flags, 0o644))


def _kind(found: os.stat_result) -> str:
    """What a lock path holds instead of a regular file, in words."""
    if stat.S_ISLNK(found.st_mode):
        return "a symbolic link"
    if stat.S_ISDIR(found.st_mode):
        return "a folder"
    return "not a regular file"


def _unreplaceable(path: Path, why: str, exc: OSError) -> ConfigError:
    """The error of a lock path difftest cannot make a plain lock file again."""
    detail = errno.errorcode.get(exc.errno or 0, "")
    reason = f"{detail}: {exc.strerror}" if detail and exc.strerror else str(exc)
    return ConfigError(
        f"difftest's lock file {str(path)!r} cannot be used: {why}, and it could not be replaced "
        f"by a plain file ({reason})",
        f"remove {str(path)!r} (difftest makes it again), then run again",
    )
