"""Reading what a probe left behind without letting its branch's code block or swamp the host.

A branch writes into its probe's folder with the host's rights: it can replace
its records file or its log with a FIFO (an `open` would block forever), a
device, a link, or a file far larger than any probe writes. Every host read of
a probe's file goes through `read_probe_file`, which opens without blocking,
refuses anything that is not a regular file, and caps the size; the caller
turns the OSError into that branch's `error`.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

#: Far above what a probe writes (the shipped engine tier's records are a few MB).
MAX_PROBE_FILE_BYTES = 256 * 1024 * 1024


def open_records(path: Path) -> int:
    """A new, empty file for a probe to write (its records or its log), opened here and given to
    it as a descriptor (a confined probe can open no path outside its scratch folder): whatever
    was at `path`, a link included, is removed first, never followed."""
    path.unlink(missing_ok=True)
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)


def open_log_for_append(path: Path) -> int:
    """A warm probe's log, appended to across its restarts; never through a link."""
    return os.open(
        path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644
    )


def open_probe_file(path: Path) -> int:
    """A file descriptor for reading `path`, which must be a regular file (not a FIFO, a device or a
    link)."""
    fd = os.open(
        path,
        os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0),
    )
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(
                errno.EINVAL, f"{path.name} is not a regular file (something replaced it)"
            )
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_probe_file(path: Path, offset: int = 0, limit: int = MAX_PROBE_FILE_BYTES) -> bytes:
    """The bytes of `path` from `offset`; OSError when it is not a regular file or holds more than
    `limit`."""
    fd = open_probe_file(path)
    try:
        size = os.fstat(fd).st_size
        if size > limit:
            raise OSError(
                errno.EFBIG, f"{path.name} holds {size} bytes, more than a probe writes ({limit})"
            )
        os.lseek(fd, offset, os.SEEK_SET)
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_probe_text(path: Path, limit: int = MAX_PROBE_FILE_BYTES) -> str:
    """`read_probe_file` decoded as UTF-8, bad bytes replaced."""
    return read_probe_file(path, limit=limit).decode("utf-8", errors="replace")
