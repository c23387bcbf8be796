"""Writing small git-style patches for tests (what `git diff` would print)."""

from __future__ import annotations

import difflib
from pathlib import Path


def make_patch(dest: Path, repo_path: str, old: str, new: str) -> Path:
    """A patch changing `repo_path` from `old` to `new` (`old == ""` creates the file)."""
    created = old == ""
    header = [f"diff --git a/{repo_path} b/{repo_path}\n"]
    if created:
        header.append("new file mode 100644\n")
    body = difflib.unified_diff(
        old.splitlines(keepends=True),
        new.splitlines(keepends=True),
        fromfile="/dev/null" if created else f"a/{repo_path}",
        tofile=f"b/{repo_path}",
    )
    dest.write_text("".join(header) + "".join(body))
    return dest
