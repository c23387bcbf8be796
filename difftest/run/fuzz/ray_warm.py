"""`fuzz --executor ray`: each branch's warm probes as Ray actors on cluster nodes.

An actor (`WarmActor`, on a node) builds or reuses the branch environment from what the host ships
(`build.envs.shipped`, refused when the node's base is not the host's) and holds the same
`WarmProcess` a local fuzz run holds: one probe process that imports vLLM once and answers job after
job. The host's `RayWarmProcess` is what `WarmProbe` asks for answers: it sends each job to one of
the branch's actors in turn (`--ray-actors N`: examples spread over N actors per branch) and gets
the raw answer back; `WarmProbe` checks it on the host with the reader a local answer goes through,
so the search judges the same things and, with the same seed, finds the same findings.

An actor whose node dies costs its job one more try on a new actor on another node; one whose
worker dies while its node stays up (killed, or crashed), one more try on a new actor on that same
node, the cause named. A second loss makes that job's runs `error`, naming the nodes and causes.
Ctrl-C kills every actor (`ray.kill`), and with it its probe (`protocol.die_with_host`) and what
the probe started (the worker's keeper).
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from difftest.build.envs.base import BaseEnv
from difftest.build.envs.branch import BranchEnv
from difftest.build.envs.shipped import BaseMismatch, ShippedEnv, ensure_shipped, ship
from difftest.core.config import BaseSpec
from difftest.core.errors import DifftestError
from difftest.core.evidence import ProbeNode
from difftest.probe.protocol import Job
from difftest.run.cluster.connect import NODE_ID_LABEL, Cluster, NodeInfo
from difftest.run.cluster.executor import Resources, worker_death
from difftest.run.cluster.keeper import scratch_dir
from difftest.run.cluster.node import ensure_keeper, node_environ, this_node
from difftest.run.fuzz.warm_probe import Answer, WarmProbeLimits, WarmProcess
from difftest.run.probes.environ import switches
from difftest.run.probes.runner import ProbesStopped, hold_remote_probe, remote_probe_ended

Log = Callable[[str], None]
#: Seconds an actor may wait for a node to take it.
PLACE_S = 120.0


class WarmActor:
    """On a node: one branch's warm probe process, in an environment built here."""

    def __init__(
        self,
        shipped: ShippedEnv,
        tier: str,
        limits: WarmProbeLimits,
        host_switches: dict[str, str],
        cpus: int,
    ) -> None:
        self.shipped, self.tier, self.limits = shipped, tier, limits
        self.switches, self.cpus = host_switches, cpus
        self.process: WarmProcess | None = None

    def prepare(self) -> dict[str, Any]:
        """Build or reuse the environment: this node, and why it cannot serve (None: it can)."""
        ensure_keeper()
        node = this_node()
        try:
            env = ensure_shipped(self.shipped)
        except BaseMismatch as exc:
            return {"node": node, "why": f"refused: {exc.problem}"}
        except (DifftestError, OSError) as exc:
            why = getattr(exc, "problem", None) or str(exc)
            return {"node": node, "why": f"could not build the environment: {why}"}
        work = scratch_dir(f"fuzz-{self.shipped.name}")
        self.process = WarmProcess(
            self.shipped.name,
            env.python,
            self.tier,
            work,
            self.limits,
            environ=node_environ(self.switches, self.cpus),
        )
        return {"node": node, "why": None}

    def answer(self, job: Job) -> Answer:
        assert self.process is not None, "prepare() first"
        return self.process.answer(job)

    def starts(self) -> int:
        return self.process.starts if self.process is not None else 0

    def close(self) -> None:
        if self.process is not None:
            self.process.close()
            shutil.rmtree(self.process.work_dir, ignore_errors=True)


class _Actor:
    """One actor as the host holds it: its handle and node."""

    def __init__(self, handle: Any, node: NodeInfo) -> None:
        self.handle, self.node = handle, node


class RayWarmProcess:
    """The host's side of one branch's warm probes on the cluster (`warm_probe.Answerer`)."""

    def __init__(
        self,
        cluster: Cluster,
        spec: BaseSpec,
        base: BaseEnv,
        env: BranchEnv,
        tier: str,
        limits: WarmProbeLimits,
        resources: Resources,
        actors: int = 1,
        log: Log = lambda _m: None,
    ) -> None:
        self.cluster, self.tier, self.limits, self.resources = cluster, tier, limits, resources
        self.log = log
        self.shipped = ship(spec, base, env)
        self.branch = env.name
        self._actors: list[_Actor] = []
        self._turn = 0
        self._lost: list[str] = []
        self._starts_of_closed = 0
        #: Actor handles killed by an interrupt (`runner.stop_all_probes`): closed without a word.
        self._killed: set[int] = set()
        self._lock = threading.Lock()
        self.failure: str | None = None
        for _ in range(max(1, actors)):
            actor = self._start(set())
            if actor is None:
                break
            self._actors.append(actor)

    @property
    def node(self) -> ProbeNode | None:
        """Where the first of its actors runs (what the evidence of a finding names)."""
        if not self._actors:
            return None
        return ProbeNode(
            id=self._actors[0].node.id, address=self._actors[0].node.address, retried=self._lost
        )

    @property
    def starts(self) -> int:
        ray = self.cluster.ray
        started = self._starts_of_closed
        for actor in self._actors:
            try:
                started += int(ray.get(actor.handle.starts.remote()))
            except ray.exceptions.RayError:
                pass
        return started

    def answer(self, job: Job) -> Answer:
        with self._lock:
            if not self._actors:
                return Answer([], "refused", None, self.failure or "no actor", "")
            index = self._turn % len(self._actors)
            self._turn += 1
            actor = self._actors[index]
        ray = self.cluster.ray
        try:
            answer: Answer = ray.get(actor.handle.answer.remote(job))
            return answer
        except ray.exceptions.RayActorError as exc:
            remote_probe_ended(actor.handle)  # gone: an interrupt has nothing left to stop there
            died = worker_death(str(exc))
            lost = f"node {actor.node.id[:12]} at {actor.node.address}: " + (
                died or f"lost mid-probe ({str(exc).splitlines()[0][:200]})"
            )
            self._lost.append(lost)
        # A worker that died on a live node is started again there; a lost node, elsewhere.
        replacement = self._start(set(), on=actor.node) if died else self._start({actor.node.id})
        if replacement is None:
            with self._lock:
                self._actors.remove(actor)
            why = f"{lost}; then {self.failure}" if self.failure else lost
            return Answer([], "eof", None, f"could not measure on the cluster: {why}", "")
        with self._lock:
            self._actors[self._actors.index(actor)] = replacement
        self.log(
            f"{self.branch}: warm probe {'ended early' if died else 'lost'} ({lost}); started "
            f"again {'on the same node' if died else 'on another node'}"
        )
        try:
            answer = ray.get(replacement.handle.answer.remote(job))
            return answer
        except ray.exceptions.RayActorError as again:
            then = worker_death(str(again)) or (
                f"lost mid-probe ({str(again).splitlines()[0][:200]})"
            )
            why = f"{lost}; then node {replacement.node.id[:12]}: {then}"
            return Answer([], "eof", None, f"could not measure on the cluster: {why}", "")

    def close(self) -> None:
        ray = self.cluster.ray
        for actor in self._actors:
            if id(actor.handle) in self._killed:
                remote_probe_ended(actor.handle)
                continue
            try:
                self._starts_of_closed += int(ray.get(actor.handle.starts.remote(), timeout=10))
                ray.get(actor.handle.close.remote(), timeout=30)
            except Exception:  # noqa: BLE001 - a lost or stuck actor is killed all the same
                pass
            _kill(ray, actor.handle)
            remote_probe_ended(actor.handle)
        self._actors = []

    def _start(self, excluded: set[str], on: NodeInfo | None = None) -> _Actor | None:
        """A new actor on a node outside `excluded` (on node `on` alone, when given), its
        environment ready; None (`failure` says why) when no node can hold it, after one more try
        on another node."""
        ray = self.cluster.ray
        for _attempt in range(2):
            if not self._can_place(excluded, on):
                self.failure = (
                    f"node {on.id[:12]} at {on.address} is no longer live"
                    if on is not None
                    else f"no live node of the cluster offers {self.resources.describe()}"
                )
                return None
            options: dict[str, Any] = {
                **self.resources.options(),
                "max_restarts": 0,
                "max_task_retries": 0,
            }
            if on is not None:
                from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

                options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(on.id, soft=False)
            elif excluded:
                from ray.util.scheduling_strategies import NodeLabelSchedulingStrategy, NotIn

                options["scheduling_strategy"] = NodeLabelSchedulingStrategy(
                    hard={NODE_ID_LABEL: NotIn(*sorted(excluded))}
                )
            handle = (
                _actor_class(ray)
                .options(**options)
                .remote(
                    self.shipped,
                    self.tier,
                    self.limits,
                    switches(),
                    max(1, round(self.resources.cpus)),
                )
            )
            try:
                hold_remote_probe(handle, partial(self._interrupted, handle))
            except ProbesStopped:
                _kill(ray, handle)
                raise
            try:
                ready = self._placed(handle, excluded, on) and ray.get(handle.prepare.remote())
            except ray.exceptions.RayActorError as exc:
                ready = {"node": None, "why": f"lost ({exc})"}
            if not ready:
                _kill(ray, handle)
                remote_probe_ended(handle)
                self.failure = (
                    f"no node took the actor within {PLACE_S:.0f} s (it asks for "
                    f"{self.resources.describe()}; the cluster's cores may all be held)"
                )
                return None
            node = (
                NodeInfo(ready["node"]["id"], ready["node"]["address"]) if ready["node"] else None
            )
            if ready["why"] is None and node is not None:
                return _Actor(handle, node)
            _kill(ray, handle)
            remote_probe_ended(handle)
            where = f"node {node.id[:12]} at {node.address}: " if node else ""
            self.failure = f"{where}{ready['why']}"
            self.log(f"{self.branch}: warm probe cannot start on {where}{ready['why']}")
            if node is not None:
                excluded = excluded | {node.id}
            on = None  # a node that refused or failed is not tried again
        return None

    def _can_place(self, excluded: set[str], on: NodeInfo | None) -> bool:
        """Some live node outside `excluded` (or `on`, when given) offers what an actor asks."""
        return any(
            self.resources.fits(n)
            for n in self.cluster.nodes()
            if (n.id == on.id if on is not None else n.id not in excluded)
        )

    def _placed(self, handle: Any, excluded: set[str], on: NodeInfo | None = None) -> bool:
        """The actor started on a node within `PLACE_S` (False: none took it; it would wait for
        ever, as an actor holds its cores for its whole life)."""
        ray = self.cluster.ray
        deadline = time.monotonic() + PLACE_S
        ref = handle.starts.remote()
        while time.monotonic() < deadline:
            ready, _ = ray.wait([ref], timeout=5.0)
            if ready:
                return True
            if not self._can_place(excluded, on):
                return False
        return False

    def _interrupted(self, handle: Any) -> None:
        self._killed.add(id(handle))
        _kill(self.cluster.ray, handle)


_ACTOR: Any = None


def _actor_class(ray: Any) -> Any:
    global _ACTOR
    if _ACTOR is None:
        _ACTOR = ray.remote(WarmActor)
    return _ACTOR


def _kill(ray: Any, handle: Any) -> None:
    try:
        ray.kill(handle, no_restart=True)
    except Exception:  # noqa: BLE001 - an actor that is gone has nothing left to kill
        pass
