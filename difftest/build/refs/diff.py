"""What a branch changes relative to the base, for overlaying its Python on a compiled base.

The environment layer copies a branch's changed Python files over the base
wheel (the offline form of vLLM's `VLLM_USE_PRECOMPILED=1`). That is only sound
when no native code changed, and only worth a probe run when a stats-path file
changed; these helpers answer both questions from two commits.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

import git
from git.exc import BadName, GitCommandError

from difftest.build.refs._git import git_message
from difftest.build.refs.repo import repo_label, resolve_ref
from difftest.core.errors import RefError

#: Paths of vLLM's repository that feed the compiled extensions.
NATIVE_PATHS = ("csrc/", "cmake/", "CMakeLists.txt", "setup.py")
#: Compiled files and native sources wherever they are (`vllm/_C.abi3.so`, a kernel next to Python
#: code).
NATIVE_FILE = re.compile(r"\.(so|pyd|dylib|dll)(\.\d+)*$|\.(cu|cuh|c|cc|cpp|cxx|h|hh|hpp|hip)$")


@dataclass(frozen=True)
class Change:
    """One changed path; renames and copies appear as D + A, type changes as M."""

    status: Literal["A", "M", "D"]
    path: str


def changed_files(repo: git.Repo, base: str, head: str) -> list[Change]:
    """Files that differ between two revisions, in git's path order (POSIX, repository-relative)."""
    fields = _diff_tree(repo, base, head, "--name-status").split("\0")
    changes = []
    for status, path in zip(fields[0::2], fields[1::2], strict=False):
        if status:
            changes.append(Change(status=_STATUS.get(status[0], "M"), path=path))
    return changes


_STATUS: dict[str, Literal["A", "M", "D"]] = {"A": "A", "D": "D", "M": "M", "T": "M"}


#: A hunk header of `git diff -U0`: where the new side's lines start, and how many there are.
_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@", re.MULTILINE)


def changed_lines(repo: git.Repo, base: str, head: str, path: str) -> set[int]:
    """The lines of `path` at `head` that differ from `path` at `base` (1-based, as Python numbers
    them: git counts lines as the tokenizer does, at newlines); a pure deletion counts the lines on
    both sides of it."""
    base_sha, head_sha = resolve_ref(repo, base), resolve_ref(repo, head)
    try:
        text = repo.git.diff(
            "-U0",
            # Pinned: a user's diff.algorithm or indent heuristic would move insertions among
            # identical lines, and the lines counted with them.
            "--diff-algorithm=myers",
            "--no-indent-heuristic",
            "--no-color",
            "--no-ext-diff",
            "--no-textconv",
            "--no-renames",
            base_sha,
            head_sha,
            "--",
            path,
        )
    except GitCommandError as exc:
        raise RefError(
            f"cannot diff {path} between {base} and {head} in {repo_label(repo)}: "
            f"{git_message(exc)}",
            f"check that {repo_label(repo)} is intact (`git fsck`)",
        ) from None
    return hunk_lines(text)


def hunk_lines(diff: str) -> set[int]:
    """The new side's lines named by the hunk headers of a `git diff -U0`."""
    lines: set[int] = set()
    for match in _HUNK.finditer(diff):
        start, count = int(match[1]), int(match[2]) if match[2] is not None else 1
        if count:
            lines.update(range(start, start + count))
        else:  # removed after line `start`: what ran before and after the removed lines
            lines.update(n for n in (start, start + 1) if n > 0)
    return lines


def read_blob(repo: git.Repo, sha: str, path: str) -> bytes:
    """The bytes of `path` at commit `sha` (read through GitPython's persistent cat-file)."""
    try:
        commit = repo.commit(sha)
        root = commit.tree  # reads the commit: a well-formed but unknown SHA fails here
    except (BadName, ValueError):
        raise RefError(
            f"commit {sha!r} not found in {repo_label(repo)}",
            "resolve the branch again (its SHA may be from another repository)",
        ) from None
    try:
        obj = root / path
    except KeyError:
        obj = None
    if obj is None or obj.type != "blob":
        raise RefError(
            f"{path!r} is not a file at commit {commit.hexsha[:12]} in {repo_label(repo)}",
            "take the path from `changed_files` (statuses A or M), relative to the repository root",
        )
    return obj.data_stream.read()


def _under(path: str, prefix: str) -> bool:
    """A prefix ending in '/' is a folder; otherwise it names a file (or a folder written without
    '/')."""
    prefix = prefix.removeprefix("./")
    if prefix.endswith("/"):
        return path.startswith(prefix)
    return path == prefix or path.startswith(prefix + "/")


def touches(changes: Iterable[Change], prefixes: Iterable[str]) -> list[str]:
    """The changed paths under any of `prefixes` (e.g. the config's `stats_paths`)."""
    prefixes = list(prefixes)
    return list(dict.fromkeys(c.path for c in changes if any(_under(c.path, p) for p in prefixes)))


def native_changes(changes: Iterable[Change], binary: Iterable[str] = ()) -> list[str]:
    """The changed paths a Python overlay cannot reproduce: anything that feeds or is compiled code,
    and (`binary`, from `binary_paths`) any file git sees as binary."""
    changes = list(changes)
    found = touches(changes, NATIVE_PATHS) + [c.path for c in changes if NATIVE_FILE.search(c.path)]
    return list(dict.fromkeys([*found, *binary]))


def binary_paths(repo: git.Repo, base: str, head: str) -> list[str]:
    """The changed files git diffs as binary between two revisions (`--numstat` prints `-` for
    them)."""
    found = []
    for entry in _diff_tree(repo, base, head, "--numstat").split("\0"):
        added, _, rest = entry.partition("\t")
        deleted, _, path = rest.partition("\t")
        if added == "-" and deleted == "-" and path:
            found.append(path)
    return found


#: git's modes for what is not a regular file: a symbolic link, a submodule.
_LINK_MODES = {"120000": "a symbolic link", "160000": "a submodule"}


def special_paths(repo: git.Repo, base: str, head: str) -> dict[str, str]:
    """{path: what it is} of the changed paths that the head makes a symbolic link or a submodule
    (`--raw` gives each change's new mode)."""
    fields = _diff_tree(repo, base, head, "--raw").split("\0")
    found: dict[str, str] = {}
    for meta, path in zip(fields[0::2], fields[1::2], strict=False):
        modes = meta.lstrip(":").split(" ")
        if len(modes) > 1 and modes[1] in _LINK_MODES and path:
            found[path] = _LINK_MODES[modes[1]]
    return found


def _diff_tree(repo: git.Repo, base: str, head: str, form: str) -> str:
    """`git diff-tree -r -z --no-renames FORM base head`, NUL-separated.

    diff-tree is plumbing: diff.renames, diff.relative and friends in the user's config don't apply.
    """
    base_sha, head_sha = resolve_ref(repo, base), resolve_ref(repo, head)
    try:
        return repo.git.diff_tree("-r", "-z", "--no-renames", form, base_sha, head_sha)
    except GitCommandError as exc:
        raise RefError(
            f"cannot diff {base} against {head} in {repo_label(repo)}: {git_message(exc)}",
            f"check that {repo_label(repo)} is intact (`git fsck`)",
        ) from None
