"""A branch spec as commits: a start commit plus steps (patch files, replayed commits), written
without a checkout.

Three kinds of branch spec, one mechanism:
- `ref` (+ `patches`): start at the ref, apply the patch files in order;
- `ref` + `transplant: true` (+ `patches`): start at `repo.base_ref` (the base
  wheel's commit), replay the ref's own commits (since its merge-base with
  `repo.mainline`) three-way, then the patches;
- `stack: [a, b, ...]`: the named branches' steps in order, from their common start.

Every step is applied to ONE temporary index (`GIT_INDEX_FILE`) and committed
with `commit-tree`, fixed identity and dates, so the user's working tree, index
and HEAD are never touched and the same inputs give the same SHAs anywhere.
The tip is written to `refs/heads/difftest/<name>`.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import git
from git.exc import GitCommandError

from difftest.build.refs._git import fixed_commit_env, git_message
from difftest.build.refs.patches import PatchInfo, apply_patch, patch_info, patch_message
from difftest.build.refs.repo import repo_label, resolve_ref
from difftest.build.refs.transplant import (
    CommitStep,
    TransplantInfo,
    apply_commit,
    describe_step,
    plan_transplant,
    replay_message,
)
from difftest.core.config import BranchSpec
from difftest.core.errors import RefError

#: Local branches difftest writes live under this prefix, out of the user's way.
BRANCH_PREFIX = "refs/heads/difftest/"


@dataclass(frozen=True)
class BranchContext:
    """What a branch may need beyond its own spec: the base's commit, the mainline, the other
    branches."""

    base_ref: str | None = None
    mainline: str = "main"
    branches: Mapping[str, BranchSpec] = field(default_factory=dict)


@dataclass(frozen=True)
class ResolvedBranch:
    """A branch as commits: `ref_sha` is where its steps start, `sha` the tip after them."""

    name: str
    #: The ref it starts from as written (a stack: its members' common start; transplanted:
    #: repo.base_ref).
    ref: str
    ref_sha: str
    sha: str
    patches: list[PatchInfo] = field(default_factory=list)
    transplants: list[TransplantInfo] = field(default_factory=list)
    #: The member branches, for a stack.
    stack: list[str] = field(default_factory=list)

    @property
    def local_ref(self) -> str:
        return BRANCH_PREFIX + self.name


@dataclass
class _Plan:
    start: str
    start_sha: str
    #: (owning branch, step) in order.
    steps: list[tuple[str, PatchInfo | CommitStep]]
    transplants: list[TransplantInfo]


def resolve_branch(
    repo: git.Repo, spec: BranchSpec, context: BranchContext | None = None
) -> ResolvedBranch:
    """Plan the branch, commit its steps, and point `refs/heads/difftest/<name>` at the tip."""
    context = context or BranchContext()
    local_ref = BRANCH_PREFIX + spec.name
    _refuse_checked_out(repo, local_ref)
    plan = _plan(repo, spec, context)
    tip = _commit_steps(repo, spec, plan) if plan.steps else plan.start_sha
    try:
        repo.git.update_ref("-m", f"difftest: branch {spec.name}", local_ref, tip)
    except GitCommandError as exc:
        raise RefError(
            f"branch {spec.name!r}: cannot write {local_ref} in {repo_label(repo)}: "
            f"{git_message(exc)}",
            "check that the repository is writable; a branch named plain `difftest` blocks the "
            "`difftest/` branches, so rename or delete it",
        ) from None
    return ResolvedBranch(
        name=spec.name,
        ref=plan.start,
        ref_sha=plan.start_sha,
        sha=tip,
        patches=[step for _owner, step in plan.steps if isinstance(step, PatchInfo)],
        transplants=plan.transplants,
        stack=list(spec.stack),
    )


def _plan(repo: git.Repo, spec: BranchSpec, context: BranchContext) -> _Plan:
    if spec.stack:
        return _plan_stack(repo, spec, context)
    assert spec.ref is not None
    steps: list[tuple[str, PatchInfo | CommitStep]] = []
    transplants: list[TransplantInfo] = []
    if spec.transplant:
        if not context.base_ref:
            raise RefError(
                f"branch {spec.name!r} is transplanted, but no base commit is known to transplant "
                "it onto",
                "set `repo.base_ref` (the commit the base wheel was built from, e.g. tag v0.32.0)",
            )
        info = plan_transplant(repo, spec.name, spec.ref, context.mainline, context.base_ref)
        transplants.append(info)
        steps += [(spec.name, step) for step in info.steps]
        start, start_sha = context.base_ref, info.onto_sha
    else:
        start, start_sha = spec.ref, resolve_ref(repo, spec.ref)
    steps += [(spec.name, patch_info(spec.name, Path(p), spec.ref)) for p in spec.patches]
    return _Plan(start, start_sha, steps, transplants)


def _plan_stack(repo: git.Repo, spec: BranchSpec, context: BranchContext) -> _Plan:
    """The members' steps in order, from the one commit they all start at."""
    plans = []
    for member in spec.stack:
        member_spec = context.branches.get(member)
        if member_spec is None:
            raise RefError(
                f"stack {spec.name!r}: {member!r} is not a configured branch",
                "list names of branches under `branches` (with their refs, patches or transplant)",
            )
        if not member_spec.patches and not member_spec.transplant:
            raise RefError(
                f"stack {spec.name!r}: member {member!r} brings no changes of its own (no patches, "
                "no transplant)",
                "stack branches that carry patches or `transplant: true`; a plain ref has no "
                "changes to compose",
            )
        plans.append((member, _plan(repo, member_spec, context)))
    first_name, first = plans[0]
    for name, plan in plans[1:]:
        if plan.start_sha != first.start_sha:
            raise RefError(
                f"stack {spec.name!r}: {first_name!r} starts at {first.start} "
                f"({first.start_sha[:12]}) but {name!r} at {plan.start} ({plan.start_sha[:12]}), "
                "so their changes cannot be composed",
                "stack branches that start from the same commit: patch series on the same ref, "
                "or branches with `transplant: true` (they all start at repo.base_ref)",
            )
    return _Plan(
        first.start,
        first.start_sha,
        [step for _name, plan in plans for step in plan.steps],
        [info for _name, plan in plans for info in plan.transplants],
    )


def _commit_steps(repo: git.Repo, spec: BranchSpec, plan: _Plan) -> str:
    """Apply and commit every step on one temporary index; raise RefError naming the step that
    fails."""
    replays = {id(step): info for info in plan.transplants for step in info.steps}
    tip = plan.start_sha
    with tempfile.TemporaryDirectory(prefix="difftest-index-") as scratch:
        env = fixed_commit_env(GIT_INDEX_FILE=str(Path(scratch) / "index"))
        try:
            repo.git.read_tree(tip, env=env)
        except GitCommandError as exc:
            raise RefError(
                f"branch {spec.name!r}: cannot read the tree of {plan.start} ({tip[:12]}): "
                f"{git_message(exc)}",
                f"check that {repo_label(repo)} is intact (`git fsck`)",
            ) from None
        for done, (owner, step) in enumerate(plan.steps):
            if isinstance(step, PatchInfo):
                problem = apply_patch(repo, step, env)
                if problem is not None:
                    raise _patch_error(spec, plan, owner, step, done, problem)
                message = patch_message(step)
            else:
                failed = apply_commit(repo, step, env)
                if failed is not None:
                    raise _replay_error(spec, plan, owner, step, done, *failed)
                info = replays[id(step)]
                message = replay_message(info, step, repo)
            tip = _commit(repo, spec, env, tip, message)
            if not isinstance(step, PatchInfo):
                replays[id(step)].replayed.append((step.commit, tip))
    return tip


def _commit(
    repo: git.Repo, spec: BranchSpec, env: dict[str, str], parent: str, message: str
) -> str:
    try:
        tree = repo.git.write_tree(env=env)
        return repo.git.commit_tree("--no-gpg-sign", "-p", parent, "-m", message, tree, env=env)
    except GitCommandError as exc:
        raise RefError(
            f"branch {spec.name!r}: committing a step failed: {git_message(exc)}",
            f"check that {repo_label(repo)} is writable and has free disk space",
        ) from None


def _before(spec: BranchSpec, plan: _Plan, owner: str, done: int) -> str:
    """What the failing step was applied on top of, for the message (naming the other stack
    members)."""
    if spec.stack:
        earlier = list(dict.fromkeys(o for o, _s in plan.steps[:done] if o != owner))
        if earlier:
            return f" on top of the changes of {', '.join(repr(e) for e in earlier)}"
    if done:
        kind = (
            "patch(es)"
            if all(isinstance(s, PatchInfo) for _o, s in plan.steps[:done])
            else "step(s)"
        )
        return f" after the {done} {kind} listed before it"
    return ""


def _patch_error(
    spec: BranchSpec, plan: _Plan, owner: str, info: PatchInfo, done: int, problem: str
) -> RefError:
    where = f"stack {spec.name!r}: {owner!r}'s" if spec.stack else f"branch {spec.name!r}:"
    if spec.stack:
        hint = (
            f"the two changes conflict: rebase {info.path.name} onto {owner}'s predecessors in the "
            "stack (apply them first, then regenerate the patch), or stack them in the other order"
        )
    else:
        hint = (
            f"rebase the patch onto {plan.start}: apply it in a checkout of {plan.start}, resolve "
            f"the conflicts, and regenerate it with `git diff {plan.start} > {info.path.name}`"
        )
    return RefError(
        f"{where} patch {info.path} does not apply to "
        f"{plan.start}{_before(spec, plan, owner, done)}:\n    {problem}",
        hint,
    )


def _replay_error(
    spec: BranchSpec,
    plan: _Plan,
    owner: str,
    step: CommitStep,
    done: int,
    problem: str,
    files: list[str],
) -> RefError:
    where = (
        f"stack {spec.name!r}: {owner!r}'s"
        if spec.stack
        else f"branch {spec.name!r}: transplanting"
    )
    conflicted = f"; conflicting files: {', '.join(files)}" if files else ""
    return RefError(
        f"{where} {describe_step(step)} conflicts with {plan.start} ({plan.start_sha[:12]})"
        f"{_before(spec, plan, owner, done)}{conflicted}:\n    {problem}",
        "the branch depends on code that is on the mainline but not in the base release: set "
        "`base.requirement` to a wheel built from the branch's merge-base (GPU: the per-commit "
        "wheel) and drop `transplant`, or rebase the branch onto the release tag",
    )


def _refuse_checked_out(repo: git.Repo, local_ref: str) -> None:
    """Moving the checked-out branch would make the user's working tree look modified."""
    try:
        head = repo.git.symbolic_ref("-q", "HEAD")
    except GitCommandError:
        return  # detached HEAD
    if head == local_ref:
        raise RefError(
            f"{local_ref} is checked out in {repo_label(repo)}, and difftest rewrites that branch",
            "check out another branch (`git switch -`); difftest never needs its branches checked "
            "out",
        )
