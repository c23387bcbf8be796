"""Test trees: a commit's `tests/` and `pyproject.toml` as a folder pytest can run from.

Only those two are written: the repository's own `vllm/` next to `tests/`
would shadow every environment's vLLM (pytest puts the root on sys.path). The
files come from git objects, never from a working tree, so a user's uncommitted
edits cannot leak in, and as git stores them (not through `git archive`, which runs the filter
programs a repository's config names). Grafts add copies of other commits'
files (a pull request's changed test modules, under new names) so that several
branches' tests share one pytest session. Folders are cached by content and
built in a temporary folder renamed into place.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import posixpath
import tarfile
from pathlib import Path

import git
from git.exc import BadName, GitCommandError
from git.objects import Blob, Submodule, Tree

from difftest.build.refs import changed_files, read_blob, repo_label
from difftest.build.refs._git import git_message
from difftest.build.tests.folders import build_once
from difftest.core import paths
from difftest.core.errors import RefError
from difftest.core.suites import BranchTests, ChangedFile

TESTS = "tests"
PYTEST_CONFIG = "pyproject.toml"
DONE = ".difftest-tree.json"


def branch_tests(repo: git.Repo, name: str, sha: str, baseline_sha: str) -> BranchTests:
    """What commit `sha` changes under `tests/` since its merge base with the baseline (as a pull
    request's diff reads: the baseline's own later changes are not the branch's), with both
    texts."""
    try:
        base = repo.git.merge_base(baseline_sha, sha)
    except GitCommandError:
        base = baseline_sha  # unrelated histories: compare with the baseline itself
    changes = []
    for change in changed_files(repo, base, sha):
        if not change.path.startswith(TESTS + "/"):
            continue
        old = None if change.status == "A" else _text(repo, base, change.path)
        new = None if change.status == "D" else _text(repo, sha, change.path)
        changes.append(ChangedFile(status=change.status, path=change.path, old=old, new=new))
    return BranchTests(name=name, sha=sha, changes=changes)


def _text(repo: git.Repo, sha: str, path: str) -> str:
    return read_blob(repo, sha, path).decode("utf-8", errors="replace")


def has_tests(repo: git.Repo, sha: str) -> bool:
    """Whether commit `sha` holds a `tests/` folder."""
    return _object(repo, f"{sha}:{TESTS}") is not None


class CommitTree:
    """One commit's files as the tiers' `BaselineTree` reads them (from git objects, so a user's
    uncommitted edits do not count)."""

    def __init__(self, repo: git.Repo, sha: str, name: str) -> None:
        self.repo, self.sha = repo, sha
        self.label = f"{name} ({sha[:12]})"

    def exists(self, path: str) -> bool:
        return _object(self.repo, self._spec(path)) is not None

    def names_in(self, folder: str) -> list[str]:
        try:
            listing = self.repo.git.ls_tree("--name-only", self._spec(folder))
        except GitCommandError:
            return []
        return listing.splitlines()

    def _spec(self, path: str) -> str:
        """`commit:path` with `path` as git names it from the root (`sha:` is the root tree): no
        `./`, no doubled or trailing slash, whether the repository is bare or not."""
        normal = posixpath.normpath(path or ".")
        return f"{self.sha}:" if normal == "." else f"{self.sha}:{normal}"


def suite_tree(repo: git.Repo, sha: str, grafts: dict[str, tuple[str, str]] | None = None) -> Path:
    """The folder for commit `sha` plus `grafts` (path in the tree -> (commit, path to copy))."""
    grafts = dict(grafts or {})
    tree = _object(repo, f"{sha}:{TESTS}")
    if tree is None:
        raise RefError(
            f"commit {sha[:12]} in {repo_label(repo)} has no {TESTS}/ folder",
            "use a commit of vLLM's repository (the fixture repo has the release's tests when its "
            "sdist is pinned)",
        )
    config = _object(repo, f"{sha}:{PYTEST_CONFIG}")
    sources = {
        path: _object(repo, f"{commit}:{original}")
        for path, (commit, original) in sorted(grafts.items())
    }
    for path, blob in sources.items():
        if blob is None:
            commit, original = grafts[path]
            raise RefError(
                f"{original} is not a file at {commit[:12]}",
                "report this: the test plan named a missing file",
            )
    identity = json.dumps({"tests": tree, "config": config, "grafts": sources}, sort_keys=True)

    def build(tmp: Path) -> None:
        _archive(repo, sha, [TESTS] + ([PYTEST_CONFIG] if config else []), tmp)
        for path, (commit, original) in grafts.items():
            target = tmp / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(read_blob(repo, commit, original))
        (tmp / DONE).write_text(identity + "\n")

    return build_once(
        paths.test_roots_dir() / hashlib.sha256(identity.encode()).hexdigest()[:16], DONE, build
    )


def _archive(repo: git.Repo, sha: str, members: list[str], dest: Path) -> None:
    """Write `members` (folders or files) of commit `sha` under `dest`, each file's bytes as git
    stores them, executable bits and symbolic links kept, dated the commit's time.

    Not `git archive`: it runs the smudge filter that a repository's `.git/config` names for a
    path's `filter` attribute (set in `.git/info/attributes`), and a branch can write both in a
    user's clone (issue #47). The files go through a tar read with tarfile's `data` filter as
    before, so no link leads out of `dest` and no special mode comes in.
    """
    buffer = io.BytesIO()
    try:
        commit = repo.commit(sha)
        with tarfile.open(fileobj=buffer, mode="w") as archive:
            for member in members:
                for blob in _blobs(commit.tree / member):
                    _add(archive, blob, commit.committed_date)
    except (GitCommandError, BadName, ValueError, KeyError) as exc:
        reason = git_message(exc) if isinstance(exc, GitCommandError) else repr(exc)
        raise RefError(
            f"cannot read {', '.join(members)} at {sha[:12]}: {reason}", "check the repository"
        ) from None
    buffer.seek(0)
    with tarfile.open(fileobj=buffer) as archive:
        archive.extractall(dest, filter="data")


def _blobs(item: Tree | Blob | Submodule) -> list[Blob]:
    """The files at or under `item` (a submodule's commit holds none here, as in `git archive`)."""
    if isinstance(item, Blob):
        return [item]
    if isinstance(item, Tree):
        return [found for found in item.traverse() if isinstance(found, Blob)]
    return []


def _add(archive: tarfile.TarFile, blob: Blob, mtime: int) -> None:
    """One file into the tar as `git archive` wrote it (mode 644 or 755, or a symbolic link), but
    its bytes unconverted: no attribute of the tree (`eol`, `export-subst`, `export-ignore`) or of
    the repository applies, so none can name a program."""
    data = blob.data_stream.read()
    info = tarfile.TarInfo(os.fspath(blob.path))
    info.mtime = mtime
    if blob.mode == Blob.link_mode:
        info.type = tarfile.SYMTYPE
        info.linkname = os.fsdecode(data)
        archive.addfile(info)
        return
    info.mode = 0o755 if blob.mode & 0o111 else 0o644
    info.size = len(data)
    archive.addfile(info, io.BytesIO(data))


def _object(repo: git.Repo, spec: str) -> str | None:
    """The object id of `commit:path`, or None when there is none."""
    try:
        return repo.git.rev_parse("--verify", "--quiet", spec)
    except GitCommandError:
        return None
