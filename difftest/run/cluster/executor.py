"""The host's side of `--executor ray`: a tier's probes as Ray tasks, read back and judged here.

Each (branch, tier) probe is one Ray task (`node.probe_on_node`) asking for the tier's resources:
`probe_cpus` cores, `probe_memory_mb` of memory, a GPU where the tier drives an engine on a CUDA
base (`ProbeTier.probe_gpus`), and the custom resource `--ray-place BRANCH=RESOURCE` names. Ray
places and queues the tasks; the host never starts a task no live node could ever run (it says
which resources no node offers instead of waiting forever).

What comes back is written into `<out>/probe/` exactly where a local probe's files go, then read by
the runner's own reader (`runner.read_delivered`): the host checks every record with the nonce it
chose, and the door judges the runs beside the process outcome as for a local probe. The evidence
names the node of every probe (`ProbeNode`).

A node that dies mid-probe (or is refused because its base is not the host's, or cannot build the
environment) costs the probe one more attempt on another node. A worker that dies while its node
stays up (killed by a signal: the kernel's OOM killer, another process, the branch's own code; or
by Ray's memory monitor) costs one more attempt on that same node, and the cause is named. When the
retry fails too, or no node can run it, the branch's runs read `error` ("could not measure"),
naming the nodes and what ended each try. Ctrl-C (or
any exception here) cancels every task with `ray.cancel(force=True)`: Ray kills the workers, their
probes die with them (`protocol.die_with_host`) and each worker's keeper ends what the probes
started (`keeper.py`). The host's waiting threads stop waiting at the interrupt itself, not at the
end of the cancelled task's stream, which Ray does not always mark.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from difftest.build.envs.base import BaseEnv
from difftest.build.envs.branch import BranchEnv
from difftest.build.envs.shipped import ship
from difftest.core.config import BaseSpec
from difftest.core.evidence import ProbeNode
from difftest.core.outcome import ProcessOutcome
from difftest.probe.protocol import Job
from difftest.run.cluster.connect import NODE_ID_LABEL, Cluster, NodeInfo
from difftest.run.cluster.node import ProbeRequest, probe_on_node
from difftest.run.cluster.waiting import in_daemon_threads, wait_out
from difftest.run.probes.environ import switches
from difftest.run.probes.read_records import check_lines
from difftest.run.probes.runner import (
    BranchRun,
    Ended,
    ProbesStopped,
    Progress,
    hold_remote_probe,
    probe_file_paths,
    probe_stops,
    read_delivered,
    remote_probe_ended,
    stop_all_probes,
)

Log = Callable[[str], None]
#: How much of a placement resource one probe asks for: a marker, not a budget (a node offering
#: `{"gpu_node": 1}` runs up to a thousand such probes at once, as its cores allow).
PLACE_SHARE = 0.001
#: Why a try ended when Ray says the worker died and its node is still live: killed from outside
#: Ray (the kernel's OOM killer, another process, or the branch's own code, which runs as the
#: worker's child) or crashed; Ray does not say which.
WORKER_DIED = (
    "its Ray worker died while the node stayed up (WorkerCrashedError: killed, e.g. by the "
    "kernel's OOM killer or the branch's own code, or crashed)"
)
#: Seconds between looks at a task that has not started: is a node that can run it still alive?
WATCH_S = 5.0
#: Longest single wait for a task's next event: how soon a waiting thread sees an interrupt.
TICK_S = 0.5
#: How long an interrupted run waits for its waiting threads to leave Ray before Ray is shut down.
LEAVE_S = 10.0


@dataclass(frozen=True)
class Resources:
    """What one probe of a tier asks of a node."""

    cpus: float
    gpus: int
    memory_mb: int
    #: A custom resource the node must offer (`--ray-place`), or None.
    place: str | None = None

    def options(self) -> dict[str, Any]:
        """Ray's task options for them."""
        return {
            "num_cpus": self.cpus,
            "num_gpus": self.gpus,
            "memory": self.memory_mb * 1024 * 1024,
            "resources": {self.place: PLACE_SHARE} if self.place else {},
        }

    def fits(self, node: NodeInfo) -> bool:
        have = node.resources
        return (
            have.get("CPU", 0) >= self.cpus
            and have.get("GPU", 0) >= self.gpus
            and have.get("memory", 0) >= self.memory_mb * 1024 * 1024
            and (self.place is None or have.get(self.place, 0) >= PLACE_SHARE)
        )

    def describe(self) -> str:
        parts = [f"{self.cpus:g} CPU", f"{self.memory_mb} MB of memory"]
        if self.gpus:
            parts.append(f"{self.gpus} GPU")
        if self.place:
            parts.append(f"the custom resource {self.place!r} (--ray-place)")
        return ", ".join(parts)


@dataclass(frozen=True)
class TierProbes:
    """One tier's probes: the job, the limits and what each probe asks of a node."""

    tier: str
    job: Job
    probe_s: float
    exit_s: float
    cpus: int
    gpus: int
    memory_mb: int


@dataclass
class RayExecutor:
    """Runs probes on a connected cluster (`connect.connect`)."""

    cluster: Cluster
    spec: BaseSpec
    base: BaseEnv
    #: Branch -> the custom resource its probes must be placed on (`--ray-place`).
    place: dict[str, str] = field(default_factory=dict)
    log: Log = lambda _m: None

    def describe(self) -> str:
        nodes = self.cluster.nodes()
        return f"on the Ray cluster at {self.cluster.address} ({len(nodes)} live node(s))"

    def resources(self, branch: str, probes: TierProbes) -> Resources:
        """The tier's requests for `branch`, cores capped at the largest live node's."""
        largest = max((n.resources.get("CPU", 0) for n in self.cluster.nodes()), default=1)
        cpus = max(min(float(probes.cpus), largest), 0.001)
        return Resources(cpus, probes.gpus, probes.memory_mb, self.place.get(branch))

    def run_branches(
        self,
        targets: list[tuple[str, BranchEnv]],
        probes: TierProbes,
        work_dir: Path,
        progress: Progress | None = None,
        jobs: int | None = None,
    ) -> dict[str, BranchRun]:
        """Every branch's probe on the cluster, at most `jobs` at once (default: all, Ray queues
        them by their resources); results keyed by branch name. Interrupted, it cancels every task
        and raises."""
        work_dir = work_dir.resolve()
        work_dir.mkdir(parents=True, exist_ok=True)
        stops = probe_stops()
        futures = in_daemon_threads(
            {
                name: partial(self._measure, name, env, probes, work_dir, progress, stops)
                for name, env in targets
            },
            jobs or len(targets),
            "ray-probe",
        )
        try:
            return {name: future.result() for name, future in futures.items()}
        except BaseException:
            stop_all_probes()
            # Each waiting thread sees the stop within `TICK_S` and leaves Ray before the driver
            # shuts down; one that Ray keeps is a daemon and does not hold difftest's exit.
            wait_out(futures.values(), LEAVE_S)
            raise

    def _measure(
        self,
        name: str,
        env: BranchEnv,
        probes: TierProbes,
        work_dir: Path,
        progress: Progress | None,
        stops: int,
    ) -> BranchRun:
        """One branch's probe: a node lost (or refusing it) costs one more try on a node not tried
        yet; a worker that died on a node that stays up, one more try on that same node.
        `stops` is the interrupt count when the run began (any other: stop)."""
        shipped = ship(self.spec, self.base, env)
        resources = self.resources(name, probes)
        failed: list[Tried] = []
        while True:
            _unless_stopped(stops)
            excluded = {t.node.id for t in failed if t.node is not None and not t.worker_died}
            again_on = failed[-1].node if failed and failed[-1].worker_died else None
            if again_on is None and not self._can_run(resources, excluded):
                failed.append(Tried(None, _no_node(resources, bool(excluded))))
                break
            request = ProbeRequest(
                name,
                probes.tier,
                shipped,
                probes.job,
                secrets.token_hex(16),
                probes.probe_s,
                probes.exit_s,
                switches(),
                cpus=max(1, round(resources.cpus)),
            )
            tried = self._attempt(request, resources, excluded, again_on, progress, stops)
            if tried.done is not None:
                assert tried.node is not None
                node = tried.node.probe_node([t.named() for t in failed])
                return self._read(name, probes, request, node, tried.done, work_dir)
            failed.append(tried)
            retry = _retry(failed)
            if retry is None:
                break
            ended = "ended early" if tried.worker_died else "lost"
            self.log(
                f"{name}: {probes.tier} probe {ended}: {tried.named()}; trying once more{retry}"
            )
        return _lost(name, probes, failed)

    def _can_run(self, resources: Resources, excluded: set[str]) -> bool:
        """Some live node outside `excluded` offers what the probe asks for."""
        return any(resources.fits(n) for n in self.cluster.nodes() if n.id not in excluded)

    def _attempt(
        self,
        request: ProbeRequest,
        resources: Resources,
        excluded: set[str],
        again_on: NodeInfo | None,
        progress: Progress | None,
        stops: int,
    ) -> Tried:
        """One task, on `again_on` when given, else on any node outside `excluded`: its node and
        what it delivered, or why not; raises ProbesStopped once difftest is interrupted (the
        interrupt count is no longer `stops`)."""
        ray = self.cluster.ray
        options: dict[str, Any] = {**resources.options(), "max_retries": 0}
        if again_on is not None:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(again_on.id, soft=False)
        elif excluded:
            from ray.util.scheduling_strategies import NodeLabelSchedulingStrategy, NotIn

            options["scheduling_strategy"] = NodeLabelSchedulingStrategy(
                hard={NODE_ID_LABEL: NotIn(*sorted(excluded))}
            )
        task = _remote(ray).options(**options).remote(request)
        try:
            hold_remote_probe(task, lambda: _cancel(ray, task))
        except ProbesStopped:  # interrupted while it was being submitted
            _cancel(ray, task)
            raise
        node: NodeInfo | None = None
        looked = time.monotonic()
        try:
            while True:
                ready, _ = ray.wait([task], timeout=TICK_S)
                # Cancelled: Ray does not always end a cancelled task's stream.
                _unless_stopped(stops)
                if not ready:
                    if node is None and time.monotonic() - looked >= WATCH_S:
                        looked = time.monotonic()
                        if not self._still_runnable(resources, excluded, again_on):
                            # Queued for a node that has gone since: it would wait forever.
                            _cancel(ray, task)
                            return Tried(None, _no_node(resources, bool(excluded), again_on))
                    continue
                try:
                    event = ray.get(next(task))
                except StopIteration:
                    return Tried(node, "the task ended without the probe's output")
                kind = event["event"]
                if kind == "started":
                    node = NodeInfo(event["node"]["id"], event["node"]["address"])
                    self.log(f"{request.branch}: {request.tier} probe on {_where(node)}")
                elif kind == "progress" and progress is not None:
                    done, of, scenario, label = event["progress"]
                    progress(request.branch, done, of, scenario, label)
                elif kind == "done":
                    return Tried(node, done=event)
                elif kind == "refused":
                    return Tried(node, f"refused: {event['why']}")
                elif kind == "failed":
                    return Tried(node, f"could not build the environment: {event['why']}")
        except ray.exceptions.TaskCancelledError:
            raise ProbesStopped("difftest was interrupted: the probe was cancelled") from None
        except ray.exceptions.RayTaskError as exc:  # difftest's own code failed there
            _unless_stopped(stops)
            return Tried(node, f"the task failed on the node ({_first_line(exc)})")
        except ray.exceptions.OutOfMemoryError as exc:
            _unless_stopped(stops)
            return Tried(node or again_on, out_of_memory(str(exc)), worker_died=True)
        except ray.exceptions.WorkerCrashedError:
            _unless_stopped(stops)  # a worker killed by the cancel is not a crash
            where = node or again_on
            if where is not None and not self._live(where):
                return Tried(where, "lost mid-probe (its worker died with the node)")
            return Tried(where, WORKER_DIED, worker_died=True)
        except ray.exceptions.TaskUnschedulableError:
            _unless_stopped(stops)  # pinned to a node that has died since
            return Tried(None, _no_node(resources, bool(excluded), again_on))
        except ray.exceptions.RayError as exc:
            _unless_stopped(stops)
            return Tried(node, f"lost mid-probe ({type(exc).__name__}: {_first_line(exc)})")
        finally:
            remote_probe_ended(task)

    def _live(self, node: NodeInfo) -> bool:
        """Ray still counts the node live (it marks a dead one some seconds late)."""
        return any(n.id == node.id for n in self.cluster.nodes())

    def _still_runnable(
        self, resources: Resources, excluded: set[str], again_on: NodeInfo | None
    ) -> bool:
        """A queued task can still start: its node is live (a retry kept there), or some live node
        outside `excluded` offers what it asks for."""
        if again_on is not None:
            return self._live(again_on)
        return self._can_run(resources, excluded)

    def _read(
        self,
        name: str,
        probes: TierProbes,
        request: ProbeRequest,
        node: ProbeNode,
        done: dict[str, Any],
        work_dir: Path,
    ) -> BranchRun:
        """The node's bytes written where a local probe's files go, then read by the same reader."""
        job_path, out_path, log_path = probe_file_paths(work_dir, name, probes.tier)
        job_path.write_text(json.dumps(probes.job, indent=1))
        out_path.unlink(missing_ok=True)
        if done["records"] is not None:
            out_path.write_bytes(done["records"])
        log_path.write_bytes(done["log"])
        run = BranchRun(
            branch=name,
            tier=probes.tier,
            log_path=log_path,
            job_path=job_path,
            records_path=out_path,
            nonce=request.nonce,
            started_at=done["started_at"],
            ended_at=done["ended_at"],
            duration_s=done["duration_s"],
            peak_rss_mb=done["peak_rss_mb"],
            launch="fresh",
            launch_note="",
            node=node,
        )
        ended = Ended(done["returncode"], done["timed_out"], done["exit_overdue"])
        return read_delivered(
            run,
            ended,
            Path(done["python"]),
            probes.job,
            probes.probe_s,
            probes.exit_s,
            unreadable=done["unreadable"],
        )


def _remote(ray: Any) -> Any:
    """`node.probe_on_node` as a Ray task (made once per process: Ray is imported lazily)."""
    global _REMOTE
    if _REMOTE is None:
        _REMOTE = ray.remote(probe_on_node)
    return _REMOTE


_REMOTE: Any = None


def _unless_stopped(stops: int) -> None:
    """Raise ProbesStopped when difftest was interrupted since the count was `stops` (even if the
    interrupt was handled since: `allow_probes` does not reset the count)."""
    if probe_stops() != stops:
        raise ProbesStopped("difftest was interrupted: the probe was cancelled")


def _cancel(ray: Any, task: Any) -> None:
    """Cancel a task and kill its worker (Ctrl-C): what it started dies with it."""
    try:
        ray.cancel(task, force=True)
    except Exception:  # noqa: BLE001 - a task that already ended has nothing left to cancel
        pass


@dataclass(frozen=True)
class Tried:
    """One try of a probe on the cluster: its node (None: it never started), what it delivered,
    or why not."""

    node: NodeInfo | None
    why: str = ""
    done: dict[str, Any] | None = None
    #: Ray's worker died (killed, or by Ray's memory monitor) while its node stayed up.
    worker_died: bool = False

    def named(self) -> str:
        return _named(self.node, self.why)


def _retry(failed: list[Tried]) -> str | None:
    """Where the next try goes (" there", " on another node", "" for anywhere), or None when the
    probe is spent: one more try per kind of loss (a node lost or refusing it; a worker that died
    on a live node, retried on that node when it is known)."""
    last = failed[-1]
    if last.worker_died:
        if sum(t.worker_died for t in failed) > 1:
            return None
        return " there" if last.node is not None else ""
    return " on another node" if sum(not t.worker_died for t in failed) == 1 else None


def out_of_memory(message: str) -> str:
    """Ray's memory monitor killed the worker: what it says of the node's memory, in one line (it
    kills by its own policy, not necessarily the worker that used the memory)."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    said = next((line for line in lines if line.startswith("Memory on the node")), "")
    said = said.split(". Ray killed")[0][:300]
    return "the node ran low on memory: Ray's memory monitor killed its worker" + (
        f" ({said})" if said else ""
    )


def worker_death(message: str) -> str | None:
    """What Ray says ended an actor's worker on a node that stayed up ("Worker exit type: ..."),
    or None when its error is not a worker's death (its node died, or it is unavailable)."""
    marker = "because its worker process has died."
    if marker not in message:
        return None
    detail = message.split(marker, 1)[1].split(" Some common causes", 1)[0].strip()
    return f"its Ray worker died while the node stayed up ({detail[:300]})"


def _where(node: NodeInfo) -> str:
    return f"node {node.id[:12]} at {node.address}"


def _named(node: NodeInfo | None, why: str) -> str:
    return why if node is None else f"{_where(node)}: {why}"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else ""


def _no_node(resources: Resources, other_than_tried: bool, again_on: NodeInfo | None = None) -> str:
    if again_on is not None:
        return f"{_where(again_on)}, where it was to run again, is no longer live"
    other = " other" if other_than_tried else ""
    return f"no{other} live node of the cluster offers {resources.describe()}"


def _lost(name: str, probes: TierProbes, failed: list[Tried]) -> BranchRun:
    """Every run of a probe no node could measure: `error`, naming the nodes and why."""
    reason = "could not measure on the cluster: " + "; then ".join(t.named() for t in failed)
    runs = check_lines([], "", probes.job, probes.tier, exited_cleanly=False).runs(reason)
    last = next((t.node for t in reversed(failed) if t.node is not None), None)
    return BranchRun(
        branch=name,
        tier=probes.tier,
        runs=runs,
        error=reason,
        started_at=time.time(),
        ended_at=time.time(),
        launch=None,
        outcome=ProcessOutcome(host_error=reason),
        node=last.probe_node([t.named() for t in failed]) if last else None,
    )
