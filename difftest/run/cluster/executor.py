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
environment) costs the probe one more attempt on another node; when that one fails too, or no other
node can run it, the branch's runs read `error` ("could not measure"), naming the nodes. Ctrl-C (or
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
#: Attempts per probe: the first, and one more on another node.
ATTEMPTS = 2
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
        """One branch's probe: up to `ATTEMPTS` tries, each on a node the ones before did not
        use; `stops` is the interrupt count when the run began (any other: stop)."""
        shipped = ship(self.spec, self.base, env)
        resources = self.resources(name, probes)
        failed: list[tuple[NodeInfo | None, str]] = []
        for _attempt in range(ATTEMPTS):
            _unless_stopped(stops)
            excluded = {node.id for node, _why in failed if node is not None}
            if not self._can_run(resources, excluded):
                failed.append((None, _no_node(resources, bool(failed))))
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
            node, done, why = self._attempt(request, resources, excluded, progress, stops)
            if done is not None:
                assert node is not None
                tried = [_named(n, w) for n, w in failed]
                return self._read(name, probes, request, node.probe_node(tried), done, work_dir)
            failed.append((node, why))
            if len(failed) < ATTEMPTS:
                self.log(
                    f"{name}: {probes.tier} probe lost: {_named(node, why)}; "
                    "trying once more on another node"
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
        progress: Progress | None,
        stops: int,
    ) -> tuple[NodeInfo | None, dict[str, Any] | None, str]:
        """One task: (its node, what it delivered or None, why not); raises ProbesStopped once
        difftest is interrupted (the interrupt count is no longer `stops`)."""
        ray = self.cluster.ray
        options: dict[str, Any] = {**resources.options(), "max_retries": 0}
        if excluded:
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
                        if not self._can_run(resources, excluded):
                            # Queued for a node that has gone since: it would wait forever.
                            _cancel(ray, task)
                            return None, None, _no_node(resources, bool(excluded))
                    continue
                try:
                    event = ray.get(next(task))
                except StopIteration:
                    return node, None, "the task ended without the probe's output"
                kind = event["event"]
                if kind == "started":
                    node = NodeInfo(event["node"]["id"], event["node"]["address"])
                    self.log(f"{request.branch}: {request.tier} probe on {_where(node)}")
                elif kind == "progress" and progress is not None:
                    done, of, scenario, label = event["progress"]
                    progress(request.branch, done, of, scenario, label)
                elif kind == "done":
                    return node, event, ""
                elif kind == "refused":
                    return node, None, f"refused: {event['why']}"
                elif kind == "failed":
                    return node, None, f"could not build the environment: {event['why']}"
        except ray.exceptions.TaskCancelledError:
            raise ProbesStopped("difftest was interrupted: the probe was cancelled") from None
        except ray.exceptions.RayTaskError as exc:  # difftest's own code failed there
            _unless_stopped(stops)
            return node, None, f"the task failed on the node ({_first_line(exc)})"
        except ray.exceptions.RayError as exc:
            _unless_stopped(stops)  # a worker killed by the cancel is not a node lost
            return node, None, f"lost mid-probe ({type(exc).__name__}: {_first_line(exc)})"
        finally:
            remote_probe_ended(task)

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


def _where(node: NodeInfo) -> str:
    return f"node {node.id[:12]} at {node.address}"


def _named(node: NodeInfo | None, why: str) -> str:
    return why if node is None else f"{_where(node)}: {why}"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else ""


def _no_node(resources: Resources, other_than_tried: bool) -> str:
    other = " other" if other_than_tried else ""
    return f"no{other} live node of the cluster offers {resources.describe()}"


def _lost(name: str, probes: TierProbes, failed: list[tuple[NodeInfo | None, str]]) -> BranchRun:
    """Every run of a probe no node could measure: `error`, naming the nodes and why."""
    reason = "could not measure on the cluster: " + "; then ".join(
        _named(node, why) for node, why in failed
    )
    runs = check_lines([], "", probes.job, probes.tier, exited_cleanly=False).runs(reason)
    last = next((node for node, _why in reversed(failed) if node is not None), None)
    return BranchRun(
        branch=name,
        tier=probes.tier,
        runs=runs,
        error=reason,
        started_at=time.time(),
        ended_at=time.time(),
        launch=None,
        outcome=ProcessOutcome(host_error=reason),
        node=last.probe_node([_named(n, w) for n, w in failed]) if last else None,
    )
