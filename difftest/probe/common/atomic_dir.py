"""Building a cached folder atomically, so a killed build is never mistaken for a finished one.

Probes of several branches may build the same model folder at once: each builds
into its own temporary folder and renames it into place; the loser of the race
discards its copy, which is only fine once the winner's marker file exists.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any


def ensure_built(work_dir: Path, name: str, marker: str, build: Callable[[Path], Any]) -> Path:
    """Return `work_dir/name`, running `build(tmp)` first if `name/marker` does not exist yet."""
    final = work_dir / name
    if (final / marker).is_file():
        return final
    work_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=work_dir))
    try:
        build(tmp)
        try:
            os.rename(tmp, final)
        except OSError:
            if not (final / marker).is_file():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final
