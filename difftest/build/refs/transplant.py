"""Transplanting a pull request onto the base wheel's commit: which commits, and one three-way step
each.

A pull request's head sits on a `main` whose native code differs from every
released wheel, but its own commits usually touch Python only. Replaying just
those commits (the ones between the head's merge-base with the mainline and
the head) onto the wheel's commit gives a branch the wheel's binaries match,
which differs from that commit by the PR's own changes only.

Each commit is replayed as a three-way merge of its diff (`git apply --3way
--cached` into a temporary index: git >= 2.32, no working tree, no checkout).
A range that contains merge commits (a PR that merged main into itself) is
replayed as ONE step, its net diff from the merge-base to the head: replaying
a merge commit's first-parent diff would carry main's own changes along.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field

import git
from git.exc import GitCommandError

from difftest.build.refs._git import git_message
from difftest.build.refs.repo import repo_label, resolve_ref
from difftest.core.errors import RefError


@dataclass(frozen=True)
class CommitStep:
    """One replay: the diff from `parent` to `commit` (or the net diff of a squashed range)."""

    parent: str
    commit: str
    subject: str
    #: The original commits this step stands for (more than one when a range is squashed).
    originals: tuple[str, ...]


@dataclass
class TransplantInfo:
    """Where a transplanted branch came from, and what was replayed (filled in while replaying)."""

    branch: str
    ref: str
    original_sha: str
    mainline: str
    merge_base: str
    onto: str
    onto_sha: str
    squashed: bool
    steps: list[CommitStep]
    #: (original commit, commit difftest wrote) per step, in order.
    replayed: list[tuple[str, str]] = field(default_factory=list)


def plan_transplant(
    repo: git.Repo, branch: str, ref: str, mainline: str, onto: str
) -> TransplantInfo:
    """The commits of `ref` since its merge-base with `mainline`, to be replayed onto `onto`."""
    tip = resolve_ref(repo, ref)
    onto_sha = resolve_ref(repo, onto)
    try:
        mainline_sha = resolve_ref(repo, mainline)
    except RefError as exc:
        raise RefError(
            f"branch {branch!r} is transplanted, but the mainline {mainline!r} is not in "
            f"{repo_label(repo)}",
            "set `repo.mainline` to the branch PRs are opened against (e.g. `origin/main`); "
            f"{exc.hint}",
        ) from None
    try:
        merge_base = repo.git.merge_base(mainline_sha, tip)
    except GitCommandError:
        raise RefError(
            f"branch {branch!r}: {ref} ({tip[:12]}) has no common history with the mainline "
            f"{mainline}",
            "check `repo.mainline` and the branch's ref; a shallow clone may need "
            "`git fetch --unshallow`",
        ) from None
    commits = _rev_list(repo, merge_base, tip)
    merges = _rev_list(repo, merge_base, tip, "--merges")
    if merges:
        steps = [
            CommitStep(
                merge_base,
                tip,
                f"{len(commits)} commits up to {tip[:12]}, squashed",
                tuple(commits),
            )
        ]
    else:
        steps = [CommitStep(_first_parent(repo, c), c, _subject(repo, c), (c,)) for c in commits]
    return TransplantInfo(
        branch, ref, tip, mainline, merge_base, onto, onto_sha, bool(merges), steps
    )


def _rev_list(repo: git.Repo, base: str, tip: str, *extra: str) -> list[str]:
    out = repo.git.rev_list("--reverse", "--topo-order", *extra, f"{base}..{tip}")
    return out.split()


def _first_parent(repo: git.Repo, sha: str) -> str:
    return repo.git.rev_parse("--verify", f"{sha}^1")


def _subject(repo: git.Repo, sha: str) -> str:
    return repo.git.log("-1", "--format=%s", sha)


def apply_commit(
    repo: git.Repo, step: CommitStep, env: dict[str, str]
) -> tuple[str, list[str]] | None:
    """Three-way apply `step`'s diff to the temporary index `env` names.

    None when it applied; otherwise (git's complaint, the conflicted paths).
    """
    try:
        diff = repo.git.diff_tree(
            "-p",
            "--binary",
            "--full-index",
            "--no-renames",
            "--no-ext-diff",
            "--no-textconv",
            "--src-prefix=a/",
            "--dst-prefix=b/",
            step.parent,
            step.commit,
            stdout_as_string=False,
            strip_newline_in_stdout=False,
        )
    except GitCommandError as exc:
        return git_message(exc), []
    if not diff.strip():
        return None  # an empty commit: nothing to replay, its commit is still written
    with tempfile.NamedTemporaryFile("wb", suffix=".diff") as handle:
        handle.write(diff)
        handle.flush()
        try:
            repo.git.apply("--cached", "--3way", "--whitespace=nowarn", handle.name, env=env)
        except GitCommandError as exc:
            return git_message(exc), _conflicted(repo, env)
    return None


def _conflicted(repo: git.Repo, env: dict[str, str]) -> list[str]:
    """Paths left at a conflict stage in the temporary index."""
    try:
        out = repo.git.ls_files("-u", "-z", env=env)
    except GitCommandError:
        return []
    paths = [entry.split("\t", 1)[1] for entry in out.split("\0") if "\t" in entry]
    return list(dict.fromkeys(paths))


def replay_message(info: TransplantInfo, step: CommitStep, repo: git.Repo) -> str:
    """The original message (one commit) or a list of the squashed commits, plus where it came
    from."""
    if len(step.originals) == 1:
        body = repo.git.log("-1", "--format=%B", step.commit).rstrip("\n")
    else:
        body = step.subject + "\n\n" + "\n".join(f"{c} {_subject(repo, c)}" for c in step.originals)
    # SHAs only (no ref names): the same commits give the same SHAs whatever the refs are called.
    return (
        f"{body}\n\n"
        f"(difftest: transplanted {step.commit} onto {info.onto_sha}; merge-base "
        f"{info.merge_base})\n"
    )


def describe_step(step: CommitStep) -> str:
    if len(step.originals) == 1:
        return f"commit {step.commit[:12]} ({step.subject!r})"
    return (
        f"the squashed range {step.parent[:12]}..{step.commit[:12]} ({len(step.originals)} "
        "commits, with merges)"
    )
