"""A branch = a ref plus an ordered patch series, committed without a checkout.

Patches are applied with `git apply --cached` to a temporary index and committed
with `commit-tree`, so the user's working tree, index and HEAD are never
touched (they may be mid-rebase or full of edits). Identity and dates are fixed,
so the same ref and the same patch files give the same SHA on any machine,
which lets results and environments be keyed by that SHA.
"""

from __future__ import annotations

import hashlib
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import git
from git.exc import GitCommandError

from difftest.core.config import BranchSpec
from difftest.core.errors import RefError
from difftest.build.refs._git import fixed_commit_env, git_message
from difftest.build.refs.repo import repo_label, resolve_ref

#: Local branches difftest writes live under this prefix, out of the user's way.
BRANCH_PREFIX = "refs/heads/difftest/"


@dataclass(frozen=True)
class PatchInfo:
    """One applied patch file; its hash ties a result to the exact bytes applied."""

    path: Path
    sha256: str


@dataclass(frozen=True)
class ResolvedBranch:
    """A branch as commits: `ref_sha` is the ref's own commit, `sha` the tip after the patches."""

    name: str
    ref: str
    ref_sha: str
    sha: str
    patches: list[PatchInfo] = field(default_factory=list)

    @property
    def local_ref(self) -> str:
        return BRANCH_PREFIX + self.name


def resolve_branch(repo: git.Repo, spec: BranchSpec) -> ResolvedBranch:
    """Resolve `spec.ref`, commit `spec.patches` on top in order, and point
    `refs/heads/difftest/<name>` at the result (also when there are no patches)."""
    ref_sha = resolve_ref(repo, spec.ref)
    local_ref = BRANCH_PREFIX + spec.name
    _refuse_checked_out(repo, local_ref)
    tip = ref_sha
    infos: list[PatchInfo] = []
    if spec.patches:
        with tempfile.TemporaryDirectory(prefix="difftest-index-") as scratch:
            env = fixed_commit_env(GIT_INDEX_FILE=str(Path(scratch) / "index"))
            try:
                repo.git.read_tree(ref_sha, env=env)
            except GitCommandError as exc:
                raise RefError(
                    f"branch {spec.name!r}: cannot read the tree of {spec.ref} ({ref_sha[:12]}): {git_message(exc)}",
                    f"check that {repo_label(repo)} is intact (`git fsck`)",
                ) from None
            for done, patch in enumerate(spec.patches):
                info = _patch_info(spec, Path(patch))
                tip = _commit_patch(repo, spec, info, tip, env, done)
                infos.append(info)
    try:
        repo.git.update_ref("-m", f"difftest: branch {spec.name}", local_ref, tip)
    except GitCommandError as exc:
        raise RefError(
            f"branch {spec.name!r}: cannot write {local_ref} in {repo_label(repo)}: {git_message(exc)}",
            "check that the repository is writable; a branch named plain `difftest` blocks the `difftest/` "
            "branches, so rename or delete it",
        ) from None
    return ResolvedBranch(name=spec.name, ref=spec.ref, ref_sha=ref_sha, sha=tip, patches=infos)


def _refuse_checked_out(repo: git.Repo, local_ref: str) -> None:
    """Moving the checked-out branch would make the user's working tree look modified."""
    try:
        head = repo.git.symbolic_ref("-q", "HEAD")
    except GitCommandError:
        return  # detached HEAD
    if head == local_ref:
        raise RefError(
            f"{local_ref} is checked out in {repo_label(repo)}, and difftest rewrites that branch",
            "check out another branch (`git switch -`); difftest never needs its branches checked out",
        )


def _patch_info(spec: BranchSpec, patch: Path) -> PatchInfo:
    try:
        data = patch.read_bytes()
    except OSError as exc:
        raise RefError(
            f"branch {spec.name!r}: cannot read patch file {patch}: {exc.strerror}",
            "fix the path under `patches`, or remove the entry",
        ) from None
    if not data.strip():
        raise RefError(
            f"branch {spec.name!r}: patch file {patch} is empty",
            f"regenerate it with `git diff {spec.ref} > {patch.name}` in a checkout with your change, or remove it",
        )
    return PatchInfo(path=patch, sha256=hashlib.sha256(data).hexdigest())


def _commit_patch(
    repo: git.Repo, spec: BranchSpec, info: PatchInfo, parent: str, env: dict[str, str], done: int
) -> str:
    """Apply one patch to the temporary index (which holds `parent`'s tree) and commit it."""
    try:
        repo.git.apply("--cached", "--whitespace=nowarn", str(info.path.absolute()), env=env)
    except GitCommandError as exc:
        after = f" after the {done} patch(es) listed before it" if done else ""
        raise RefError(
            f"branch {spec.name!r}: patch {info.path} does not apply to {spec.ref}{after}:\n"
            f"    {git_message(exc)}",
            f"rebase the patch onto {spec.ref}: apply it in a checkout of {spec.ref}, resolve the conflicts, "
            f"and regenerate it with `git diff {spec.ref} > {info.path.name}`",
        ) from None
    message = f"Apply {info.path.name}\n\nsha256: {info.sha256}\nCommitted by difftest with `git apply --cached`.\n"
    try:
        tree = repo.git.write_tree(env=env)
        return repo.git.commit_tree("--no-gpg-sign", "-p", parent, "-m", message, tree, env=env)
    except GitCommandError as exc:
        raise RefError(
            f"branch {spec.name!r}: committing patch {info.path} failed: {git_message(exc)}",
            f"check that {repo_label(repo)} is writable and has free disk space",
        ) from None
