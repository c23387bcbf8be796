"""Fixtures of the refs tests: a tiny fake vLLM tree, its fixture repository, a user's clone.

`isolated_git` is not autouse here: test_envs.py in this folder uses the shared base.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import git
import pytest
from refs_helpers import VERSION, make_vllm_tree, write_git_config

from difftest.build.refs import build_fixture_repo


@pytest.fixture
def isolated_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own global git config and DIFFTEST_HOME, so tests are
    independent of the machine and safe under xdist."""
    config = write_git_config(tmp_path / "gitconfig")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("DIFFTEST_HOME", str(tmp_path / "home"))
    for var in (
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_INDEX_FILE",
        "GIT_AUTHOR_DATE",
        "GIT_COMMITTER_DATE",
    ):
        monkeypatch.delenv(var, raising=False)
    return config


@pytest.fixture
def src(tmp_path: Path) -> Path:
    return make_vllm_tree(tmp_path / "site")


@pytest.fixture
def fixture(src: Path, tmp_path: Path) -> Path:
    return build_fixture_repo(src, VERSION, tmp_path / "repos" / "fx")


@pytest.fixture
def user(fixture: Path, tmp_path: Path) -> Iterator[git.Repo]:
    """A user's checkout: a non-bare clone of the fixture (origin = fixture)."""
    repo = git.Repo.clone_from(str(fixture), str(tmp_path / "user"))
    yield repo
    repo.close()
