"""A change as hunks and any subset of them as a patch series, against real git, on the tiny fake
vLLM tree (no vLLM install): what `difftest blame` searches.

A subset is applied the way every configured patch series is (`resolve_branch`,
`git apply --cached` on a temporary index), so what applies here applies there.
"""

from __future__ import annotations

from pathlib import Path

import git
import pytest
from refs_helpers import VERSION, commit_files

from difftest.build.refs import resolve_branch
from difftest.build.refs.hunks import (
    Step,
    patch_bytes,
    split_change,
    step_commits,
    subset_patches,
)
from difftest.core.config import BranchSpec
from difftest.core.errors import RefError

TAG = f"v{VERSION}"
LONG = "vllm/v1/core/sched/long.py"
METRICS = "vllm/v1/spec_decode/metrics.py"
CORE = "vllm/v1/engine/core.py"
#: 60 numbered lines: edits 20 lines apart are separate hunks.
LINES = [f"line_{i} = {i}\n" for i in range(1, 61)]


@pytest.fixture(autouse=True)
def _isolated(isolated_git: Path) -> Path:
    return isolated_git


@pytest.fixture
def repo(user: git.Repo) -> git.Repo:
    """The user's clone with a long file on the release tag's line (`start`)."""
    user.git.checkout("-q", "-b", "start", TAG)
    commit_files(user, {LONG: "".join(LINES)}, "a long file")
    return user


def edited(changes: dict[int, str | None], extra: dict[int, str] | None = None) -> str:
    """LINES with line N (1-based) replaced by text (None: deleted), `extra` inserted after N."""
    out = []
    for number, line in enumerate(LINES, start=1):
        replaced = changes.get(number, line)
        if replaced is not None:
            out.append(replaced)
        if extra and number in extra:
            out.append(extra[number])
    return "".join(out)


def branch_steps(repo: git.Repo, *edits: dict[str, str | None]) -> tuple[str, list[Step]]:
    """Commit each edit on top of `start` (a branch `work`); the change as steps of hunks."""
    start = repo.head.commit.hexsha
    repo.git.checkout("-q", "-b", "work")
    for number, edit in enumerate(edits, start=1):
        commit_files(repo, edit, f"step {number}")
    tip = repo.head.commit.hexsha
    return start, split_change(repo, step_commits(repo, start, tip))


def apply_subset(
    repo: git.Repo, start: str, steps: list[Step], chosen: list[int], folder: Path, name: str
) -> str:
    """The subset as a patch series on `start`, resolved as a configured branch: its commit."""
    folder.mkdir(parents=True, exist_ok=True)
    patches = []
    for index, text in subset_patches(steps, chosen):
        path = folder / f"{name}-{index + 1}.patch"
        path.write_bytes(patch_bytes(text))
        patches.append(path)
    return resolve_branch(repo, BranchSpec(name=name, ref=start, patches=patches)).sha


def test_a_change_splits_into_numbered_hunks_file_by_file(repo: git.Repo, tmp_path: Path) -> None:
    start, steps = branch_steps(
        repo,
        {
            LONG: edited({5: "line_5 = 'five'\n", 40: None}, extra={25: "added = 25\n"}),
            METRICS: None,
            "vllm/v1/new_helper.py": "HELPER = 1\n",
        },
    )
    (step,) = steps
    assert step.label == "step 1" and step.parent == start
    shape = [(h.number, h.path, h.added, h.removed) for h in step.hunks]
    assert shape == [
        (1, LONG, 1, 1),
        (2, LONG, 1, 0),
        (3, LONG, 0, 1),
        (4, "vllm/v1/new_helper.py", 1, 0),
        (5, METRICS, 0, 2),
    ]
    assert [h.lines for h in step.hunks[:3]] == ["2-8", "23-29", "38-43"]
    assert all("index " not in h.header for h in step.hunks)
    # Every hunk together is the change itself: applied, it gives the branch's tree.
    every = [h.number for h in step.hunks]
    sha = apply_subset(repo, start, steps, every, tmp_path / "p", "all")
    assert repo.commit(sha).tree.hexsha == repo.commit("work").tree.hexsha


@pytest.mark.parametrize("chosen", [[1], [2], [3], [4], [5], [1, 3], [2, 5], [3, 4]])
def test_any_subset_of_one_steps_hunks_applies_alone(
    repo: git.Repo, tmp_path: Path, chosen: list[int]
) -> None:
    start, steps = branch_steps(
        repo,
        {
            LONG: edited({5: "line_5 = 'five'\n", 40: None}, extra={25: "added = 25\n"}),
            METRICS: None,
            "vllm/v1/new_helper.py": "HELPER = 1\n",
        },
    )
    sha = apply_subset(repo, start, steps, chosen, tmp_path / "p", "subset")
    touched = {h.path for h in steps[0].hunks if h.number in chosen}
    changed = set(repo.git.diff("--name-only", start, sha).split())
    assert changed == touched


def test_a_later_hunk_is_renumbered_when_an_earlier_one_is_left_out(repo: git.Repo) -> None:
    _start, steps = branch_steps(
        repo, {LONG: edited({}, extra={5: "a = 1\nb = 2\nc = 3\n", 40: "late = 40\n"})}
    )
    first, late = steps[0].hunks
    assert (first.new_start, late.old_start, late.new_start) == (3, 38, 41)
    (patch,) = [text for _index, text in subset_patches(steps, [late.number])]
    assert "@@ -38,6 +38,7 @@" in patch and "a = 1" not in patch
    (both,) = [text for _index, text in subset_patches(steps, [first.number, late.number])]
    assert "@@ -38,6 +41,7 @@" in both


def test_a_hunk_written_on_an_earlier_steps_lines_does_not_apply_without_it(
    repo: git.Repo, tmp_path: Path
) -> None:
    """Step 2 edits the line step 1 added: alone, its context is missing (what blame reads as "does
    not apply"); with step 1's hunk it applies."""
    start, steps = branch_steps(
        repo,
        {LONG: edited({30: "placeholder = 30\n"}), CORE: "CORE = False\n"},
        {LONG: edited({30: "placeholder = 'the real thing'\n"})},
    )
    assert [len(s.hunks) for s in steps] == [2, 1]
    placeholder, core = steps[0].hunks
    (real,) = steps[1].hunks
    assert (placeholder.path, core.path, real.path) == (LONG, CORE, LONG)
    with pytest.raises(RefError) as info:
        apply_subset(repo, start, steps, [real.number], tmp_path / "p", "alone")
    assert "does not apply" in info.value.problem
    with pytest.raises(RefError):
        apply_subset(repo, start, steps, [core.number, real.number], tmp_path / "q", "core")
    sha = apply_subset(
        repo, start, steps, [placeholder.number, real.number], tmp_path / "r", "both"
    )
    assert "the real thing" in repo.git.show(f"{sha}:{LONG}")
    assert repo.git.show(f"{sha}:{CORE}") == repo.git.show(f"{start}:{CORE}")


def test_a_mode_change_is_one_hunk_of_its_own(repo: git.Repo, tmp_path: Path) -> None:
    start = repo.head.commit.hexsha
    repo.git.checkout("-q", "-b", "work")
    repo.git.update_index("--chmod=+x", CORE)
    repo.git.commit("-q", "-m", "executable")
    (step,) = split_change(repo, step_commits(repo, start, repo.head.commit.hexsha))
    (hunk,) = step.hunks
    assert hunk.header_only and hunk.path == CORE and "new mode 100755" in hunk.text
    sha = apply_subset(repo, start, [step], [hunk.number], tmp_path / "p", "mode")
    assert repo.git.ls_tree(sha, CORE).split()[0] == "100755"


def test_step_commits_follow_the_first_parent_line(repo: git.Repo) -> None:
    start, steps = branch_steps(repo, {CORE: "CORE = 1\n"}, {CORE: "CORE = 2\n"})
    assert [s.label for s in steps] == ["step 1", "step 2"]
    assert steps[0].parent == start and steps[1].parent == steps[0].commit
