"""`--executor ray` on a real two-node Ray cluster on loopback (slow: real vLLM in every probe).

The cluster (`ray_cluster`, tests/conftest.py): the head (`node_a`) shares the machine's
DIFFTEST_HOME and reuses the environments built there; node B (`node_b`) has a DIFFTEST_HOME of its
own, so it builds every environment from what the host ships. Each test says which item of the
issue it holds: the same verdicts as a local run, placement and the node in the evidence, the
result cache without the node in its key, a node with another base refused, a node killed mid-probe.
Ctrl-C and fuzz: `test_ray_faults.py`; the fault kit through Ray: `tests/faults/`.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import RAY_GROUP
from tests.e2e.cli_helpers import CONTROL, capture_stderr, run_cli
from tests.factories import shipped_branch, write_config
from tests.mailbox import post
from tests.sessions import shipped_scheduler_run

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(RAY_GROUP)]


def ray_args(cluster, *place: str) -> list[str]:
    return [
        "--executor",
        "ray",
        "--ray-address",
        cluster.address,
        *[a for p in place for a in ("--ray-place", p)],
    ]


def evidence(out: Path) -> dict:
    return json.loads((out / "evidence.json").read_text())


#: The shipped branches the Ray comparison runs: the baseline and the two competing fixes.
ON_RAY = ("main", "pr-56137-style", "pr-56195-style")


def judged(out: Path, branches: tuple[str, ...] | None = None) -> list[tuple]:
    """Every result (of `branches`, where given) as the door judged it: verdict, measured and
    expected totals, differences, violations (nothing about time or place)."""
    return sorted(
        (
            r["branch"],
            r["scenario"],
            r["label"],
            r["verdict"],
            json.dumps(r["measured"], sort_keys=True),
            json.dumps(r["expected"], sort_keys=True),
            json.dumps(r["differences"], sort_keys=True),
            json.dumps(r["violations"], sort_keys=True),
            r["error"],
        )
        for r in evidence(out)["results"]
        if branches is None or r["branch"] in branches
    )


def nodes_of(out: Path) -> dict[tuple[str, str], dict | None]:
    return {(p["branch"], p["tier"]): p["node"] for p in evidence(out)["probes"]}


def test_the_shipped_scheduler_run_on_ray_reads_as_the_local_run(
    tmp_path, ray_cluster, monkeypatch, tmp_path_factory
):
    """Every verdict, measured total and difference of three shipped branches (the baseline and the
    two competing fixes: each branch is judged on its own runs and the baseline's, so three say
    what six would, at half the probes) equals the local run's (the session's shipped run,
    `tests/sessions.py`, measured with no result cache); a branch
    forced onto node B was measured there, and node B built its environment from what the host
    shipped (its own DIFFTEST_HOME held none). The result cache's key does not include the node:
    what the cluster measured (`--no-cache`: measured, then stored) is reused by a later local run,
    and judged again to the same verdicts."""
    shipped = shipped_scheduler_run(tmp_path_factory)
    assert shipped.code == 1, shipped.printed
    local = shipped.out
    monkeypatch.setenv("DIFFTEST_RESULT_CACHE", str(tmp_path / "results"))
    config = write_config(tmp_path, [shipped_branch(b) for b in ON_RAY])
    remote, again = tmp_path / "ray", tmp_path / "again"
    common = ("run", "-c", config, "--tier", "scheduler")
    with capture_stderr() as err:
        code = run_cli(
            *common,
            "--no-cache",
            "--out",
            remote,
            *ray_args(ray_cluster, "pr-56195-style=node_b", "main=node_a"),
        )
    assert code == 1, err.getvalue()
    assert judged(remote) == judged(local, ON_RAY)
    nodes = nodes_of(remote)
    assert nodes[("pr-56195-style", "scheduler")]["id"] == ray_cluster.node_b.node_id
    assert nodes[("main", "scheduler")]["id"] == ray_cluster.cluster.head_node.node_id
    assert all(node is not None and node["address"] == "127.0.0.1" for node in nodes.values())
    assert all(node is None for node in nodes_of(local).values())
    built = list((ray_cluster.home_b / "envs").glob("branch-*"))
    assert built, "node B built no environment in its own DIFFTEST_HOME"
    assert "pr-56195-style: scheduler probe on node " + ray_cluster.node_b.node_id[:12] in (
        err.getvalue()
    )
    stored = {
        p["branch"]: p["records_sha256"] for p in evidence(remote)["probes"]
    }  # the cluster's records, byte for byte, are what the cache now holds
    with capture_stderr() as err:
        assert run_cli(*common, "--out", again) == 1
    assert err.getvalue().count("scheduler tier reused from the result cache") == len(ON_RAY), (
        err.getvalue()
    )
    assert {p["branch"]: p["records_sha256"] for p in evidence(again)["probes"]} == stored
    assert judged(again) == judged(local, ON_RAY)


def test_a_node_whose_base_is_another_wheel_is_refused_never_mixed(tmp_path, ray_cluster, base_env):
    """A node whose base records another wheel identity is refused for the probe placed on it,
    which reads "could not measure" naming the node and the wheel hash; main keeps its results."""
    from tests.cluster.ray_nodes import home_with

    home = home_with(base_env.path, tmp_path / "other-home", wheel_hash="0" * 64)
    node = ray_cluster.add(1, {"node_c": 1}, {"DIFFTEST_HOME": str(home)})
    try:
        config = write_config(tmp_path, [shipped_branch("main"), shipped_branch("pr-56137-style")])
        out = tmp_path / "out"
        with capture_stderr() as err:
            code = run_cli(
                "run",
                "-c",
                config,
                "--tier",
                "scheduler",
                "-k",
                CONTROL,
                "--out",
                out,
                *ray_args(ray_cluster, "pr-56137-style=node_c", "main=node_a"),
            )
        assert code == 3, err.getvalue()
        results = evidence(out)["results"]
        assert {r["verdict"] for r in results if r["branch"] == "main"} == {"pass"}
        refused = [r for r in results if r["branch"] == "pr-56137-style"]
        assert refused and {r["verdict"] for r in refused} == {"error"}
        for result in refused:
            assert node.node_id[:12] in result["error"], result["error"]
            assert "base is not the host's" in result["error"] and "0" * 64 in result["error"]
        assert not list((home / "envs").glob("branch-*")), "the refused node built an environment"
    finally:
        ray_cluster.remove(node)
        ray_cluster.wait_dead(node)


def _probe_started(marker: Path, lines: int, limit_s: float = 600) -> list[tuple[str, int]]:
    """The first `lines` (node's model folder, probe pid) the slow branch's probes sent."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        found = [
            (line.split()[0], int(line.split()[1]))
            for line in (marker.read_text() if marker.exists() else "").splitlines()
            if len(line.split()) == 2
        ]
        if len(found) >= lines:
            return found
        time.sleep(0.2)
    raise AssertionError("the slow branch's probe never started")


def test_a_node_that_dies_mid_probe_costs_one_retry_then_could_not_measure(
    tmp_path, ray_cluster, base_env, fixture_repo
):
    """Two nodes offer `spare`; the slow branch's probe is placed there. Its node killed mid-probe,
    the probe is measured again on the other one (the evidence names both). In a second run, the
    survivor killed mid-probe leaves no node to retry on: "could not measure", naming it."""
    from tests.cluster.ray_nodes import home_with
    from tests.e2e.cli_helpers import SCHEDULER
    from tests.patching import prepend
    from tests.processes import alive

    marker = tmp_path / "probes.txt"
    slow = (
        "import json as _json, os as _os, sys as _sys, time as _time\n"
        # The node's home, from the job's model folder (the probe's own folders are scratch).
        "_work = _json.load(open(_sys.argv[_sys.argv.index('--job') + 1]))['work_dir']\n"
        + post(marker, "f'{_work} <sender>\\n'")
        + "\n_time.sleep(8)\n"
    )
    patch = prepend(tmp_path / "slow.patch", fixture_repo, SCHEDULER, slow)
    config = write_config(
        tmp_path,
        [shipped_branch("main"), {"name": "slow", "ref": "main", "patches": [str(patch)]}],
    )
    spare = {}
    for name in ("d", "e"):
        home = home_with(base_env.path, tmp_path / f"home-{name}")
        node = ray_cluster.add(1, {"spare": 1}, {"DIFFTEST_HOME": str(home)})
        spare[str(home.resolve())] = node
    args = ("run", "-c", config, "--tier", "scheduler", "-k", CONTROL)
    place = ray_args(ray_cluster, "slow=spare", "main=node_a")

    def kill_where_it_runs(lines: int, killed: list) -> None:
        home, _pid = _probe_started(marker, lines)[-1]
        node = next(n for h, n in spare.items() if home.startswith(h))
        killed.append(node)
        ray_cluster.remove(node)

    killed: list = []
    killer = threading.Thread(target=kill_where_it_runs, args=(1, killed))
    killer.start()
    with capture_stderr() as err:
        code = run_cli(*args, "--out", tmp_path / "first", *place)
    killer.join()
    assert code == 0, err.getvalue()
    (first_killed,) = killed
    survivor = next(n for n in spare.values() if n is not first_killed)
    node = nodes_of(tmp_path / "first")[("slow", "scheduler")]
    assert node["id"] == survivor.node_id
    assert len(node["retried"]) == 1 and first_killed.node_id[:12] in node["retried"][0]
    assert "trying once more on another node" in err.getvalue()

    ray_cluster.wait_dead(first_killed)
    killer = threading.Thread(target=kill_where_it_runs, args=(3, killed))
    killer.start()
    with capture_stderr() as err:
        code = run_cli(*args, "--out", tmp_path / "second", *place)
    killer.join()
    assert killed[-1] is survivor
    assert code == 3, err.getvalue()
    results = evidence(tmp_path / "second")["results"]
    assert {r["verdict"] for r in results if r["branch"] == "main"} == {"pass"}
    lost = [r for r in results if r["branch"] == "slow"]
    assert lost and {r["verdict"] for r in lost} == {"error"}
    for result in lost:
        assert "could not measure on the cluster" in result["error"]
        assert survivor.node_id[:12] in result["error"], result["error"]
    assert not [pid for _home, pid in _probe_started(marker, 3) if alive(pid)]
    ray_cluster.wait_dead(survivor)


def test_a_worker_killed_while_its_node_stays_up_is_retried_there_naming_what_ended_it(
    tmp_path, ray_cluster, fixture_repo
):
    """#29, case 4: `kill -9` of the Ray worker running the probe (its node alive) is not a lost
    node: the probe runs again on that node (none other offers `node_a`), the branch is measured,
    and the evidence and the log name the worker's death."""
    import os
    import signal

    from tests.e2e.cli_helpers import SCHEDULER
    from tests.patching import prepend
    from tests.processes import alive

    marker = tmp_path / "workers.txt"
    slow = (
        "import os as _os, time as _time\n"
        + post(marker, "'<sender> <starter>\\n'")
        + "\n_time.sleep(4)\n"
    )
    patch = prepend(tmp_path / "slow.patch", fixture_repo, SCHEDULER, slow)
    config = write_config(
        tmp_path,
        [shipped_branch("main"), {"name": "slow", "ref": "main", "patches": [str(patch)]}],
    )

    def kill_the_first_worker() -> None:
        _probe, worker = _probe_started(marker, 1)[0]
        assert worker > 1, "no worker pid came with the message"  # never kill(0) or init
        os.kill(worker, signal.SIGKILL)

    killer = threading.Thread(target=kill_the_first_worker)
    killer.start()
    with capture_stderr() as err:
        code = run_cli(
            "run",
            "-c",
            config,
            "--tier",
            "scheduler",
            "-k",
            CONTROL,
            "--out",
            tmp_path / "out",
            *ray_args(ray_cluster, "slow=node_a", "main=node_b"),
        )
    killer.join()
    assert code == 0, err.getvalue()
    (first, second) = _probe_started(marker, 2)
    assert first[1] != second[1]  # a new worker
    assert not alive(int(first[0]))  # the killed worker's probe died with it
    node = nodes_of(tmp_path / "out")[("slow", "scheduler")]
    assert node["id"] == ray_cluster.cluster.head_node.node_id
    (retried,) = node["retried"]
    assert node["id"][:12] in retried and "its Ray worker died while the node stayed up" in retried
    assert "trying once more there" in err.getvalue()
    assert {r["verdict"] for r in evidence(tmp_path / "out")["results"]} == {"pass"}
