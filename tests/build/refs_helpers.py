"""Small real trees and repositories for tests/test_refs.py (no vLLM install needed)."""

from __future__ import annotations

from pathlib import Path

import git

VERSION = "1.2.3"

#: Python sources of the fake package, as they must appear in the fixture.
SOURCES: dict[str, bytes] = {
    "vllm/__init__.py": b'__version__ = "1.2.3"\n',
    "vllm/v1/__init__.py": b"",
    "vllm/v1/core/sched/scheduler.py": b"def schedule():\n    return 1\n",
    "vllm/v1/spec_decode/metrics.py": b"def accepted(n):\n    return n\n",
    "vllm/v1/engine/core.py": b"CORE = True\n",
    "vllm/configs/model.json": b'{"a": 1}\n',
    # CRLF bytes prove that no line-ending filter runs (core.autocrlf).
    "vllm/windows.txt": b"line one\r\nline two\r\n",
}

#: Compiled build products that must not reach the fixture.
BINARIES: dict[str, bytes] = {
    "_C.abi3.so": b"\x7fELF\x00\x01binary",
    "lib/libfoo.so.1": b"\x7fELF\x00\x02binary",
    "__pycache__/__init__.cpython-311.pyc": b"\x00pyc",
    "v1/__pycache__/x.cpython-311.pyc": b"\x00pyc",
    "v1/stray.pyc": b"\x00pyc",
}


def make_vllm_tree(root: Path) -> Path:
    """`<root>/site-packages/vllm` with SOURCES and BINARIES; returns the package folder."""
    pkg = root / "site-packages" / "vllm"
    for repo_path, data in SOURCES.items():
        target = pkg / repo_path.removeprefix("vllm/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    for rel, data in BINARIES.items():
        target = pkg / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return pkg


def write_git_config(path: Path, extra: str = "") -> Path:
    """A global git config for tests: identity set, nothing else unless `extra`."""
    identity = "[user]\n\tname = Test User\n\temail = test@example.invalid\n"
    path.write_text(identity + "[init]\n\tdefaultBranch = main\n" + extra)
    return path


HOSTILE_CONFIG = """\
[core]
\tautocrlf = true
\tfileMode = false
[commit]
\tgpgSign = true
[gpg]
\tprogram = false
[i18n]
\tcommitEncoding = ISO-8859-1
[apply]
\twhitespace = fix
"""


def commit_files(repo: git.Repo, files: dict[str, str | None], message: str) -> str:
    """Write (or delete, for None) files in the working tree, commit everything, return the SHA."""
    root = Path(repo.working_tree_dir)
    for rel, text in files.items():
        target = root / rel
        if text is None:
            target.unlink()
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
    repo.git.add("-A")
    repo.git.commit("-q", "-m", message)
    return repo.head.commit.hexsha


def make_patches(fixture: Path, workdir: Path, edits: list[dict[str, str | None]]) -> list[Path]:
    """One patch file per edit, each on top of the previous, made with `git diff` from
    `v<VERSION>`."""
    author = git.Repo.clone_from(str(fixture), str(workdir / "author"))
    author.git.checkout("-q", "-b", "work", f"v{VERSION}")
    patches = []
    previous = author.head.commit.hexsha
    for i, edit in enumerate(edits, start=1):
        current = commit_files(author, edit, f"edit {i}")
        patch = workdir / f"{i:04d}-edit.patch"
        patch.write_text(author.git.diff(previous, current) + "\n")
        patches.append(patch)
        previous = current
    author.close()
    return patches


def tree_listing(repo: git.Repo, rev: str) -> dict[str, str]:
    """path -> mode of every file at `rev`."""
    out = repo.git.ls_tree("-r", "-z", rev)
    listing = {}
    for entry in filter(None, out.split("\0")):
        meta, path = entry.split("\t", 1)
        listing[path] = meta.split()[0]
    return listing


def index_bytes(repo: git.Repo) -> bytes:
    path = Path(repo.git_dir) / "index"
    return path.read_bytes() if path.exists() else b""
