"""Git refs, patch series and the fixture repository: turning branch specs into commits.

Everything here runs real git through GitPython and writes commits with a fixed
identity and date, so a branch spec gives the same SHA on every machine.
"""

from difftest.build.refs._git import use_system_git
from difftest.build.refs.branch import BRANCH_PREFIX, BranchContext, ResolvedBranch, resolve_branch
from difftest.build.refs.diff import (
    NATIVE_PATHS,
    Change,
    binary_paths,
    changed_files,
    native_changes,
    read_blob,
    special_paths,
    touches,
)
from difftest.build.refs.fixture import (
    build_fixture_repo,
    ensure_fixture_repo,
    fixture_commit,
    fixture_files,
    fixture_repo_path,
    source_digest,
)
from difftest.build.refs.patches import PatchInfo
from difftest.build.refs.repo import fetch, open_repo, repo_label, resolve_ref
from difftest.build.refs.transplant import CommitStep, TransplantInfo

__all__ = [
    "BRANCH_PREFIX",
    "NATIVE_PATHS",
    "BranchContext",
    "Change",
    "CommitStep",
    "PatchInfo",
    "ResolvedBranch",
    "binary_paths",
    "build_fixture_repo",
    "changed_files",
    "ensure_fixture_repo",
    "fetch",
    "fixture_commit",
    "fixture_files",
    "fixture_repo_path",
    "native_changes",
    "open_repo",
    "read_blob",
    "special_paths",
    "repo_label",
    "resolve_branch",
    "resolve_ref",
    "source_digest",
    "touches",
    "TransplantInfo",
    "use_system_git",
]
