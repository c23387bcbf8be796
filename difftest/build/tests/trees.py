"""Test trees: a commit's `tests/` and `pyproject.toml` as a folder pytest can run from.

Only those two are written: the repository's own `vllm/` next to `tests/`
would shadow every environment's vLLM (pytest puts the root on sys.path). The
files come from git objects (`git archive`), never from a working tree, so a
user's uncommitted edits cannot leak in. Grafts add copies of other commits'
files (a pull request's changed test modules, under new names) so that several
branches' tests share one pytest session. Folders are cached by content and
built in a temporary folder renamed into place.
"""

from __future__ import annotations

import hashlib
import io
import json
import posixpath
import tarfile
from pathlib import Path

import git
from git.exc import GitCommandError

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
    try:
        data = repo.git.archive("--format=tar", sha, "--", *members, stdout_as_string=False)
    except GitCommandError as exc:
        raise RefError(
            f"cannot read {', '.join(members)} at {sha[:12]}: {git_message(exc)}",
            "check the repository",
        ) from None
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        archive.extractall(dest, filter="data")


def _object(repo: git.Repo, spec: str) -> str | None:
    """The object id of `commit:path`, or None when there is none."""
    try:
        return repo.git.rev_parse("--verify", "--quiet", spec)
    except GitCommandError:
        return None
