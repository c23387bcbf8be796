"""A real Ray cluster on this machine's loopback for the tests: nodes started, checked, ended.

Ray leaves loopback unless told not to (it rewrites 127.0.0.1 to the machine's interface address):
every Ray process and the driver get `RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0` (set here, before Ray is
imported) and `node_ip_address="127.0.0.1"`, and `loopback_only` checks with `ss -ltnp` that every
socket a node listens on is on 127.0.0.1 before a test uses it. Object stores are kept small (the
machine is shared). Nodes are started with Ray's own test helper (`ray.cluster_utils.Cluster`) and
ended by it, by the process ids it started: never `ray stop`, which would end every Ray process of
the machine.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"

from ray._common.utils import get_default_ray_temp_dir
from ray.cluster_utils import Cluster

from tests.processes import alive

LOOPBACK = "127.0.0.1"
#: Tries to start a node: Ray gives one 30 s to register, which a busy machine can miss.
STARTS = 3
#: How long the teardown waits for a run's own disconnect still under way.
DISCONNECT_S = 120
#: Small object stores: probes send back records and logs of a few MB at most.
OBJECT_STORE = 80 * 1024 * 1024


def node_args(cpus: int, resources: dict[str, float], **extra: Any) -> dict[str, Any]:
    """Arguments of one node on loopback (`Cluster.add_node`)."""
    return {
        "node_ip_address": LOOPBACK,
        "num_cpus": cpus,
        "object_store_memory": OBJECT_STORE,
        "resources": resources,
        "include_dashboard": False,
        **extra,
    }


class LoopbackCluster:
    """A `Cluster` whose every node is on loopback, and the pids it started."""

    def __init__(self, head_resources: dict[str, float], cpus: int = 2) -> None:
        # Ray's helper records the head's address in its default folder (`/tmp/ray`) without
        # making it, which a machine that never ran Ray without `temp_dir` lacks.
        Path(get_default_ray_temp_dir()).mkdir(parents=True, exist_ok=True)
        for attempt in range(1, STARTS + 1):
            self.temp = Path(tempfile.mkdtemp(prefix="dtray-", dir="/tmp"))
            try:
                self.cluster = Cluster(
                    initialize_head=True,
                    connect=False,
                    head_node_args=node_args(cpus, head_resources, temp_dir=str(self.temp)),
                )
                break
            except Exception:
                # Ray gives a node 30 s to register: a busy machine can miss it. What the attempt
                # started (this process's children under its folder) is ended; then again.
                _end_started_under(self.temp)
                shutil.rmtree(self.temp, ignore_errors=True)
                if attempt == STARTS:
                    raise
        self.pids: set[int] = set(_pids_of(self.cluster.head_node))
        loopback_only(self.pids)
        #: Set by the fixture: the second node, and its own DIFFTEST_HOME.
        self.node_b: Any = None
        self.home_b: Path | None = None

    @property
    def address(self) -> str:
        return str(self.cluster.address)

    def add(self, cpus: int, resources: dict[str, float], env: dict[str, str] | None = None) -> Any:
        """A node of its own (`env`: its raylet's and so its workers' environment)."""
        for attempt in range(1, STARTS + 1):
            before = _children_of(os.getpid())
            try:
                node = self.cluster.add_node(
                    **node_args(cpus, resources, temp_dir=str(self.temp), env_vars=env or {})
                )
                break
            except Exception:  # as for the head: a busy machine, ended and tried again
                for pid in _children_of(os.getpid()) - before:
                    try:
                        os.kill(pid, 9)
                    except OSError:
                        pass
                if attempt == STARTS:
                    raise
        started = _pids_of(node)
        self.pids |= started
        loopback_only(started)
        return node

    def remove(self, node: Any) -> None:
        """Kill a node outright (`allow_graceful=False`: as a machine that dies)."""
        self.cluster.remove_node(node, allow_graceful=False)

    def wait_dead(self, node: Any, limit_s: float = 60) -> None:
        """Until Ray marks a removed node dead (it keeps it alive for seconds after its end)."""
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            states = {n["NodeID"]: n["Alive"] for n in self.cluster.global_state.node_table()}
            if not states.get(node.node_id, False):
                return
            time.sleep(0.5)
        raise AssertionError(f"node {node.node_id} is still alive after {limit_s} s")

    def shutdown(self) -> list[int]:
        """End every node, then any process it started that is left (by pid); those left. A
        driver still connected is disconnected first (Ray refuses to end the head under it): a
        run's own disconnect (`Cluster.close`) waits only so long and leaves a slow one to finish
        on its thread, which a loaded machine can still be in."""
        loopback_only(self.descendant_pids())
        import ray

        for thread in threading.enumerate():
            if thread.name == "ray-shutdown":
                thread.join(DISCONNECT_S)
        if ray.is_initialized():
            ray.shutdown()
        self.cluster.shutdown()
        if self.cluster.head_node is not None:
            self.cluster.remove_node(self.cluster.head_node)
        left = [pid for pid in self.pids if alive(pid)]
        for pid in left:
            try:
                os.kill(pid, 9)
            except OSError:
                pass
        shutil.rmtree(self.temp, ignore_errors=True)
        return left

    def descendant_pids(self) -> set[int]:
        """Every process the nodes started (workers included): the descendants of their pids."""
        children: dict[int, list[int]] = {}
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    stat = Path(f"/proc/{name}/stat").read_text()
                except OSError:
                    continue
                children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(name))
        found, todo = set(), list(self.pids)
        while todo:
            pid = todo.pop()
            if pid in found:
                continue
            found.add(pid)
            todo += children.get(pid, [])
        return found


def _end_started_under(temp: Path) -> None:
    """SIGKILL this process's descendants whose command line names `temp` (a failed start's)."""
    mine = str(temp).encode()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{name}/cmdline").read_bytes()
        except OSError:
            continue
        if mine in cmdline and _descends_from(int(name), os.getpid()):
            try:
                os.kill(int(name), 9)
            except OSError:
                pass


def _children_of(parent: int) -> set[int]:
    found = set()
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                stat = Path(f"/proc/{name}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == parent:
                found.add(int(name))
    return found


def _descends_from(pid: int, ancestor: int) -> bool:
    while pid > 1:
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return False
        if pid == ancestor:
            return True
    return False


def _pids_of(node: Any) -> set[int]:
    return {
        info.process.pid
        for infos in node.all_processes.values()
        for info in infos
        if info.process is not None
    }


def loopback_only(pids: set[int]) -> None:
    """Every TCP socket these processes listen on is on 127.0.0.1 (`ss -ltnp`)."""
    listing = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout
    outside = []
    for line in listing.splitlines():
        owners = {int(pid) for pid in re.findall(r"pid=(\d+)", line)}
        if owners & pids:
            local = line.split()[3]
            host = local.rsplit(":", 1)[0].strip("[]").removeprefix("::ffff:")
            if host != LOOPBACK:
                outside.append(line)
    assert not outside, "Ray listens outside loopback:\n" + "\n".join(outside)


def home_with(base: Path, root: Path, wheel_hash: str | None = None) -> Path:
    """A DIFFTEST_HOME of its own for a node: the base reached through links (another cache path
    for the same base, made in milliseconds), its fingerprint a copy, with the wheel identity
    replaced by `wheel_hash` if given (a node whose base is another wheel's). Its environments are
    its own; the model folders and vLLM's model-inspection cache are the machine's (built the same
    way on every node, keyed by content: sharing them only saves each node their first build)."""
    from difftest.core import paths

    shared = paths.difftest_home()
    root.mkdir(parents=True)
    for name in ("models", "vllm-cache"):
        (shared / name).mkdir(exist_ok=True)
        (root / name).symlink_to(shared / name)
    folder = root / "envs" / base.name
    folder.mkdir(parents=True)
    for entry in base.iterdir():
        if entry.name != "fingerprint.json":
            (folder / entry.name).symlink_to(entry)
    data = json.loads((base / "fingerprint.json").read_text())
    if wheel_hash is not None:
        data["wheel_hash"] = wheel_hash
    (folder / "fingerprint.json").write_text(json.dumps(data, indent=2))
    return root
