"""Patch files as steps of a branch: read, hashed, applied to a temporary index.

Patches are applied with `git apply --cached` to a temporary index (whose tree
is the previous step's commit), so the user's working tree, index and HEAD are
never touched. The sha256 of each file ties a result to the exact bytes applied.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import git
from git.exc import GitCommandError

from difftest.build.refs._git import git_message
from difftest.core.errors import RefError


@dataclass(frozen=True)
class PatchInfo:
    """One applied patch file; its hash ties a result to the exact bytes applied."""

    path: Path
    sha256: str


def patch_info(branch: str, patch: Path, ref: str) -> PatchInfo:
    """Read and hash a patch file, or raise RefError naming the branch and the file."""
    try:
        data = patch.read_bytes()
    except OSError as exc:
        raise RefError(
            f"branch {branch!r}: cannot read patch file {patch}: {exc.strerror}",
            "fix the path under `patches`, or remove the entry",
        ) from None
    if not data.strip():
        raise RefError(
            f"branch {branch!r}: patch file {patch} is empty",
            f"regenerate it with `git diff {ref} > {patch.name}` in a checkout with your change, "
            "or remove it",
        )
    if not _holds_a_diff(data):
        raise RefError(
            f"branch {branch!r}: patch file {patch} holds no diff (no `diff --git` or `---`/`+++` "
            "file header): a description or a commit message alone changes nothing",
            f"write the change into it with `git diff {ref} > {patch.name}` (or `git "
            "format-patch`) in a checkout with your change, or remove it",
        )
    return PatchInfo(path=patch, sha256=hashlib.sha256(data).hexdigest())


def _holds_a_diff(data: bytes) -> bool:
    """Whether a patch file has at least one file's diff header (what `git apply` needs)."""
    lines = data.splitlines()
    if any(line.startswith(b"diff --git ") for line in lines):
        return True
    return any(
        old.startswith(b"--- ") and new.startswith(b"+++ ")
        for old, new in zip(lines, lines[1:], strict=False)
    )


def apply_patch(repo: git.Repo, info: PatchInfo, env: dict[str, str]) -> str | None:
    """Apply one patch to the temporary index `env` names; git's complaint if it does not apply."""
    try:
        repo.git.apply("--cached", "--whitespace=nowarn", str(info.path.absolute()), env=env)
    except GitCommandError as exc:
        return git_message(exc)
    return None


def patch_message(info: PatchInfo) -> str:
    return (
        f"Apply {info.path.name}\n\n"
        f"sha256: {info.sha256}\nCommitted by difftest with `git apply --cached`.\n"
    )
