"""The connection to a Ray cluster. Ray is an optional extra: it is imported here, when a command
asks for `--executor ray`, and only after that by the executor and on the nodes.

`--ray-address HOST:PORT` (or `RAY_ADDRESS`) names the cluster's head, as `ray start --head`
prints it. A wrong address, a cluster that does not answer, or Ray not installed is a usage error
(exit 2) before anything is built. Ray's usage statistics stay off unless the user turned them on.
A cluster on this machine's loopback stays there: Ray would otherwise replace `127.0.0.1` with the
machine's interface address (`RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0` keeps it, set before Ray is
imported). Ray's auto-connect is off (`RAY_ENABLE_AUTO_CONNECT=0`): a task submitted after the
driver disconnected must fail, never start a new local cluster. Disconnecting is bounded
(`Cluster.close`): an interrupted difftest exits even if Ray's shutdown does not return.
"""

from __future__ import annotations

import atexit
import ipaddress
import os
import socket
import threading
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from difftest.core.errors import ConfigError
from difftest.core.evidence import ProbeNode
from difftest.core.verdicts import one_line

ADDRESS_ENV = "RAY_ADDRESS"
#: Seconds to wait for the head's port before the address is called wrong.
REACH_S = 5.0
#: The label Ray gives every node: its id (scheduling away from a node uses it).
NODE_ID_LABEL = "ray.io/node-id"
#: How long disconnecting from the cluster may take before difftest goes on without it.
CLOSE_S = 10.0


@dataclass(frozen=True)
class ClusterRequest:
    """`--executor ray`: where the cluster is, and where given branches' probes must go."""

    #: The head's HOST:PORT; None: `RAY_ADDRESS`.
    address: str | None = None
    #: Branch -> a custom resource its probes ask for (`--ray-place BRANCH=RESOURCE`).
    place: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class NodeInfo:
    """One live node of the cluster and what it offers (Ray's resource totals)."""

    id: str
    address: str
    resources: dict[str, float] = field(default_factory=dict)

    def probe_node(self, retried: list[str] | None = None) -> ProbeNode:
        return ProbeNode(id=self.id, address=self.address, retried=list(retried or []))


@dataclass
class Cluster:
    """A connected cluster: Ray itself (for the executor) and its head's address."""

    ray: Any
    address: str

    def nodes(self) -> list[NodeInfo]:
        """The nodes alive now."""
        return [
            NodeInfo(str(n["NodeID"]), str(n.get("NodeManagerAddress", "")), dict(n["Resources"]))
            for n in self.ray.nodes()
            if n.get("Alive")
        ]

    def close(self) -> None:
        """Disconnect this driver, waiting at most `CLOSE_S`; a shutdown that does not return by
        then is left to its daemon thread, and Ray's own shutdown at exit is dropped so that it
        cannot hold the exit either."""
        closing = threading.Thread(target=self.ray.shutdown, name="ray-shutdown", daemon=True)
        closing.start()
        closing.join(CLOSE_S)
        if closing.is_alive():
            atexit.unregister(self.ray.shutdown)


def import_ray() -> ModuleType:
    """Ray, or a usage error saying how to install it."""
    try:
        import ray
    except ImportError:
        raise ConfigError(
            "--executor ray needs Ray, which is not installed in difftest's environment",
            "install the extra: `uv pip install 'difftest[ray]'` (or `pip install ray`)",
        ) from None
    return ray


def connect(address: str | None) -> Cluster:
    """Connect this process to the cluster at `address` (or `RAY_ADDRESS`) as Ray's driver."""
    address = (address or os.environ.get(ADDRESS_ENV, "")).strip()
    if not address:
        raise ConfigError(
            "--executor ray needs the cluster's address",
            f"pass --ray-address HOST:PORT or set {ADDRESS_ENV} (`ray start --head` prints it)",
        )
    host, port = _split(address)
    if _loopback(host):
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_ENABLE_AUTO_CONNECT", "0")
    _reachable(address, host, port)
    ray = import_ray()
    try:
        ray.init(
            address=address,
            namespace="difftest",
            logging_level="ERROR",
            log_to_driver=False,
            configure_logging=False,
        )
    except Exception as exc:  # noqa: BLE001 - Ray raises many kinds; each one means the same here
        raise ConfigError(
            f"cannot join the Ray cluster at {address}: {one_line(str(exc))}",
            "check the address (`ray status` on the head) and that this Ray's version is the "
            "cluster's",
        ) from None
    return Cluster(ray, address)


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(
            f"--ray-address {address!r} is not HOST:PORT",
            "pass the head's address as `ray start --head` prints it (e.g. 10.0.0.5:6379)",
        )
    return host.strip("[]"), int(port)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _reachable(address: str, host: str, port: int) -> None:
    """Ray retries an unreachable head for minutes: a closed port is said at once instead."""
    try:
        with socket.create_connection((host, port), timeout=REACH_S):
            pass
    except OSError as exc:
        raise ConfigError(
            f"no Ray cluster answers at {address}: {exc.strerror or exc}",
            "start one (`ray start --head`) or pass the head's address as it prints it",
        ) from None
