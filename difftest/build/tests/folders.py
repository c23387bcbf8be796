"""One way to build a cached folder: under a lock, into a temporary sibling, renamed into place.

A folder counts as built only when its marker file exists, so a build killed
half-way is never mistaken for a finished one; processes building the same
folder wait on one lock instead of racing.
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Callable
from pathlib import Path

from difftest.core import paths
from difftest.core.locks import own_lock


def build_once(dest: Path, marker: str, build: Callable[[Path], None]) -> Path:
    """Return `dest`, running `build(tmp)` first unless `dest/marker` exists; `build` writes the
    marker."""
    if (dest / marker).is_file():
        return dest
    with own_lock(paths.locks_dir() / f"{dest.parent.name}-{dest.name}.lock"):
        if (dest / marker).is_file():
            return dest
        shutil.rmtree(dest, ignore_errors=True)
        tmp = dest.with_name(f".{dest.name}.{os.getpid()}-{secrets.token_hex(4)}")
        tmp.mkdir(parents=True)
        try:
            build(tmp)
            if not (tmp / marker).is_file():
                raise RuntimeError(f"building {dest.name} did not write its marker {marker}")
            os.rename(tmp, dest)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return dest
