"""Opening a vLLM repository and turning user-written refs into commit SHAs.

Everything downstream (environments, results) is keyed by full SHAs, never by
names, because a branch name moves and a SHA does not. Errors say which ref in
which repository, and whether fetching or a spelling fix is the way out.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from pathlib import Path

import git
from git.exc import GitCommandError, InvalidGitRepositoryError, NoSuchPathError

from difftest.build.refs._git import git_message, host_git
from difftest.core.errors import RefError

_PULL_HEAD = re.compile(r"^(?:refs/)?pull/(\d+)/head$")
_REPO_HINT = (
    "set repo.path to a vLLM git checkout (`git clone` one), or to null to use the fixture "
    "repository"
)


def repo_label(repo: git.Repo) -> str:
    """How a repository is named in messages: its working tree, or its git folder if bare."""
    return str(repo.working_tree_dir or repo.git_dir)


def open_repo(path: str | Path) -> git.Repo:
    """The git repository at exactly `path` (parent folders are not searched, so a
    folder inside some other repository is not silently taken for vLLM), set to run every git
    command the host's way (`host_git`: the system's git, no hook, no program named by a config
    file a branch could write)."""
    path = Path(path).expanduser()
    if not path.exists():
        raise RefError(f"repository {path} does not exist", _REPO_HINT)
    try:
        repo = git.Repo(path)
    except (InvalidGitRepositoryError, NoSuchPathError):
        raise RefError(f"{path} is not a git repository", _REPO_HINT) from None
    host_git(repo.git)
    return repo


def fetch(repo: git.Repo, remote: str = "origin", refs: Iterable[str] = ()) -> None:
    """`git fetch <remote>` (only on `--fetch`). GitHub pull-request heads named in
    `refs` (`pull/N/head`) are fetched explicitly: a plain fetch skips them."""
    names = [r.name for r in repo.remotes]
    if remote not in names:
        raise RefError(
            f"{repo_label(repo)} has no remote {remote!r} (remotes: {names or 'none'})",
            f"add it with `git -C {repo_label(repo)} remote add {remote} URL`, or run without "
            "--fetch",
        )
    refspecs = []
    for ref in refs:
        match = _PULL_HEAD.match(ref)
        if match:
            refspecs.append(f"+refs/pull/{match[1]}/head:refs/pull/{match[1]}/head")
    no_prompt = {"GIT_TERMINAL_PROMPT": "0"}  # fail on missing credentials instead of hanging
    # git's own upload-pack: `remote.<name>.uploadpack` in `.git/config` (which a branch can write)
    # is a shell command, run here for a local or ssh remote.
    options = ["--quiet", "--upload-pack=git-upload-pack"]
    try:
        repo.git.fetch(*options, remote, env=no_prompt)
        if refspecs:
            repo.git.fetch(*options, remote, *refspecs, env=no_prompt)
    except GitCommandError as exc:
        raise RefError(
            f"`git fetch {remote}` failed in {repo_label(repo)}: {git_message(exc)}",
            "check the network and the remote's URL (`git remote -v`), or run without --fetch to "
            "use the refs you have",
        ) from None


def resolve_ref(repo: git.Repo, ref: str) -> str:
    """Full SHA of the commit `ref` names (branch, tag, remote ref, `pull/N/head`, SHA)."""
    if not ref or ref.startswith("-") or any(c.isspace() for c in ref):
        raise RefError(
            f"{ref!r} is not a git revision",
            "write a branch, tag or commit SHA, e.g. `main` or `v0.32.0`",
        )
    try:
        return repo.git.rev_parse("--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}")
    except GitCommandError:
        close = closest_ref(repo, ref)
        guess = f": did you mean {close!r}?" if close else ""
        raise RefError(
            f"ref {ref!r} not found in {repo_label(repo)}{guess}", _missing_ref_hint(repo, ref)
        ) from None


def closest_ref(repo: git.Repo, ref: str) -> str | None:
    """The existing branch or tag name closest in spelling to `ref` (`mian` -> `main`), if any is
    close enough to be a typo."""
    try:
        names = repo.git.for_each_ref("--format=%(refname:short)", "refs/heads", "refs/tags")
        names += "\n" + repo.git.for_each_ref("--format=%(refname:short)", "refs/remotes")
    except GitCommandError:
        return None
    found = difflib.get_close_matches(ref, [n for n in names.splitlines() if n], n=1, cutoff=0.75)
    return found[0] if found else None


def _missing_ref_hint(repo: git.Repo, ref: str) -> str:
    where = repo_label(repo)
    match = _PULL_HEAD.match(ref)
    if match:
        n = match[1]
        return (
            f"fetch the pull request: `git -C {where} fetch origin "
            f"pull/{n}/head:refs/pull/{n}/head` (or rerun with --fetch); otherwise check the number"
        )
    return (
        f"check the spelling (`git -C {where} branch -a`, `git -C {where} tag`), "
        f"or fetch it: `git -C {where} fetch` or rerun with --fetch"
    )
