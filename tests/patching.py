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


def insert_after(
    dest: Path, repo, repo_path: str, marker: str, code: str, tag: str = "v0.32.0"
) -> Path:
    """A patch that inserts `code` right after the first `marker` line of `repo_path` at `tag`."""
    from difftest.build.refs import read_blob

    old = read_blob(repo, tag, repo_path).decode()
    assert marker in old, f"{marker!r} not in {repo_path}"
    return make_patch(dest, repo_path, old, old.replace(marker, marker + code, 1))


def prepend(dest: Path, repo, repo_path: str, code: str, tag: str = "v0.32.0") -> Path:
    """A patch that puts `code` at the top of `repo_path` at `tag`."""
    from difftest.build.refs import read_blob

    old = read_blob(repo, tag, repo_path).decode()
    return make_patch(dest, repo_path, old, code + "\n" + old)


def binary_patch(dest: Path, repo_path: str, data: bytes) -> Path:
    """A patch adding the binary file `repo_path` with `data`, as `git diff --binary` writes it."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:

        def run(*args: str) -> bytes:
            done = subprocess.run(["git", "-C", scratch, *args], check=True, capture_output=True)
            return done.stdout

        run("init", "-q")
        target = Path(scratch) / repo_path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        run("add", repo_path)
        dest.write_bytes(run("diff", "--cached", "--binary"))
    return dest


def symlink_patch(dest: Path, repo, folder: str, target: str, tag: str = "v0.32.0") -> Path:
    """A patch replacing the folder `folder` (at `tag`) by a symbolic link to `target`, as
    `git diff` writes it: every file of the folder deleted, the link added."""
    import os
    import subprocess
    import tempfile

    from difftest.build.refs import read_blob

    files = repo.git.ls_tree("-r", "--name-only", tag, folder).splitlines()
    with tempfile.TemporaryDirectory() as scratch:

        def run(*args: str) -> bytes:
            done = subprocess.run(["git", "-C", scratch, *args], check=True, capture_output=True)
            return done.stdout

        run("init", "-q")
        for path in files:
            (Path(scratch) / path).parent.mkdir(parents=True, exist_ok=True)
            (Path(scratch) / path).write_bytes(read_blob(repo, tag, path))
        run("add", "-A")
        run("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "folder")
        run("rm", "-r", "-q", folder)
        (Path(scratch) / folder).parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, Path(scratch) / folder)
        run("add", folder)
        dest.write_bytes(run("diff", "--cached", "--binary"))
    return dest
