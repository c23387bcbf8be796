"""Is the base's `vllm/` still what was installed? Checked by content, not by inode or size.

Every branch environment's `overlay/vllm` shares the base's files (hard links), so a file changed in
place there (its size, mtime and bytecode kept) changes what every branch runs, and a check by
inode or `stat` does not see it. The base records the sha256 of every file of its `vllm/` tree when
it is built (`vllm-contents.json` beside its fingerprint) and each use compares the tree with it:
Python sources, bytecode and data by content; compiled libraries (`.so`, four fifths of the bytes)
by size and modification time only, as hashing them would cost about a second on every run: a
library changed in place with those kept is not seen here, only the probes' sandbox
(`run.probes.sandbox`) keeps it from happening. Without the sandbox this check catches accidents
and clumsy tampering, not a branch written to defeat it (which could rewrite the record too).

A file is hashed again only when its `stat` (inode, size, mtime, ctime) moved since this process
last found it intact: a change in place always moves its ctime, which no program can set back.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
import threading
from pathlib import Path

from difftest.build.envs.integrity import files_below

CONTENTS_FILE = "vllm-contents.json"
#: Files compared by size and mtime only (see above).
BY_STAT = (".so",)

_Stat = tuple[int, int, int, int]
#: {absolute path: the stat it had when this process last found it intact}.
_INTACT: dict[str, _Stat] = {}
_LOCK = threading.Lock()


def record_contents(base: Path, vllm_dir: Path) -> None:
    """Write what `vllm_dir` holds now (called when the base is built or first seen)."""
    contents = {rel: file_digest(path) for rel, path in _walk(vllm_dir).items()}
    target = base / CONTENTS_FILE
    tmp = target.with_suffix(".tmp")
    tmp.write_text(json.dumps({"version": 1, "files": contents}, sort_keys=True))
    tmp.replace(target)


def has_contents(base: Path) -> bool:
    return (base / CONTENTS_FILE).is_file()


def changed_contents(base: Path, vllm_dir: Path) -> str | None:
    """None when `vllm_dir` holds what was recorded; otherwise the first difference, in words."""
    try:
        recorded: dict[str, str] = json.loads((base / CONTENTS_FILE).read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return f"its record of vllm/'s contents ({CONTENTS_FILE}) is missing or unreadable"
    found = _walk(vllm_dir)
    for rel in sorted(set(recorded) - set(found)):
        return f"vllm/{rel} is missing"
    for rel in sorted(set(found) - set(recorded)):
        return f"vllm/{rel} was added after the base was built"
    for rel, path in sorted(found.items()):
        try:
            st = os.lstat(path)
            if not stat.S_ISREG(st.st_mode):
                return f"vllm/{rel} is no longer a regular file"
            now = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
            with _LOCK:
                if _INTACT.get(path) == now:
                    continue
            if file_digest(path, st) != recorded[rel]:
                return f"vllm/{rel} was changed after the base was built (its content differs)"
        except OSError as exc:
            return f"vllm/{rel} cannot be read ({exc.strerror or exc})"
        with _LOCK:
            _INTACT[path] = now
    return None


def file_digest(path: str, st: os.stat_result | None = None) -> str:
    """sha256 of a regular file, read without following a link or blocking on a FIFO put in its
    place; a compiled library by size and mtime (see above)."""
    st = st or os.lstat(path)
    if path.endswith(BY_STAT):
        return f"stat:{st.st_size}:{st.st_mtime_ns}"
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    digest = hashlib.sha256()
    with os.fdopen(fd, "rb") as stream:
        if not stat.S_ISREG(os.fstat(stream.fileno()).st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _walk(root: Path) -> dict[str, str]:
    """{path relative to `root`: absolute path} of every file below it."""
    return {rel: path for rel, (_inode, path) in files_below(root).items()}
