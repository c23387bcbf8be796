"""What runs on a cluster node: one probe, played as the host would play it, sent back as bytes.

The host's Ray task (`executor.py`) calls `probe_on_node` in a Ray worker of the chosen node. It
yields events the host reads as they come: `started` (which node), `progress` (runs finished, as
the records grow), and last `done` (the records and log bytes and how the process ended), or
`refused` (this node's base is not the host's) or `failed` (the environment could not be built
here). Nothing is judged or trusted here: the host reads the bytes with its own reader.

The probe runs with the host's job (its `work_dir`, where models are built, is this node's own),
the host's nonce, limits and `VLLM_*`-style switches, and this node's own basics (PATH, home,
locale, devices: `environ.machine_environ`).
"""

from __future__ import annotations

import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from difftest.build.envs.shipped import BaseMismatch, ShippedEnv, ensure_shipped
from difftest.core import paths
from difftest.core.errors import DifftestError
from difftest.probe.protocol import Job
from difftest.run.cluster.keeper import scratch_dir
from difftest.run.probes.environ import machine_environ, probe_environ
from difftest.run.probes.files import MAX_PROBE_FILE_BYTES, read_probe_file
from difftest.run.probes.runner import play_probe

#: The last bytes of a probe's log sent back (what the host quotes and reads stacks from).
LOG_TAIL_BYTES = 4 * 1024 * 1024
#: Seconds between progress events at most.
PROGRESS_EVERY_S = 0.5


@dataclass(frozen=True)
class ProbeRequest:
    """One probe for a node: which branch and tier, the environment to build, the job and limits."""

    branch: str
    tier: str
    shipped: ShippedEnv
    job: Job
    nonce: str
    probe_s: float
    exit_s: float
    #: The host's variables that change what a probe does (`environ.switches`).
    switches: dict[str, str]
    #: Cores the task holds (the probe's threads are sized to them).
    cpus: int = 1


def this_node() -> dict[str, str]:
    """This worker's node: Ray's id and the node's address."""
    import ray

    return {
        "id": ray.get_runtime_context().get_node_id(),
        "address": ray.util.get_node_ip_address(),
    }


def node_environ(switches: dict[str, str], cpus: int) -> dict[str, str]:
    """A probe's environment on this node: its own basics, the host's switches, difftest's
    settings with caches in this node's `DIFFTEST_HOME`."""
    parallel = max(1, (os.cpu_count() or 1) // max(1, cpus))
    return probe_environ(parallel, {**machine_environ(), **switches})


def probe_on_node(request: ProbeRequest) -> Iterator[dict[str, Any]]:
    """The Ray task's body (a generator: Ray streams each event to the host as it is yielded)."""
    yield {"event": "started", "node": this_node()}
    ensure_keeper()
    try:
        env = ensure_shipped(request.shipped)
    except BaseMismatch as exc:
        yield {"event": "refused", "why": exc.problem}
        return
    except (DifftestError, OSError, subprocess.SubprocessError) as exc:
        yield {"event": "failed", "why": getattr(exc, "problem", None) or f"{exc}"}
        return
    job: Job = {**request.job, "work_dir": str(paths.models_dir())}
    scratch = scratch_dir(request.branch)
    events: queue.Queue[tuple[int, int, str, str]] = queue.Queue()
    played: dict[str, Any] = {}

    def play() -> None:
        try:
            played["run"], played["ended"] = play_probe(
                request.branch,
                env.python,
                job,
                request.tier,
                scratch,
                request.probe_s,
                lambda _b, done, expected, scenario, label: events.put(
                    (done, expected, scenario, label)
                ),
                exit_s=request.exit_s,
                nonce=request.nonce,
                environ=node_environ(request.switches, request.cpus),
            )
        except BaseException as exc:  # noqa: BLE001 - said to the host, never lost in a thread
            played["error"] = f"{type(exc).__name__}: {exc}"

    worker = threading.Thread(target=play, name=f"probe-{request.branch}")
    worker.start()
    try:
        while worker.is_alive() or not events.empty():
            latest = None
            try:
                latest = events.get(timeout=PROGRESS_EVERY_S)
                while not events.empty():
                    latest = events.get_nowait()
            except queue.Empty:
                pass
            if latest is not None:
                yield {"event": "progress", "progress": latest}
        worker.join()
        if "error" in played:
            yield {"event": "failed", "why": f"difftest failed on the node: {played['error']}"}
            return
        yield {"event": "done", **_delivered(played["run"], played["ended"], env.path)}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _delivered(run: Any, ended: Any, env_path: Path) -> dict[str, Any]:
    """What the host needs to read the probe as its own: the bytes it wrote, how it ended."""
    records: bytes | None = None
    unreadable: str | None = None
    try:
        records = read_probe_file(run.records_path, limit=MAX_PROBE_FILE_BYTES)
    except FileNotFoundError:
        records = b""
    except (
        OSError
    ) as exc:  # a FIFO, a device, too large: the branch's doing, read as the host would
        unreadable = f"{type(exc).__name__}: {exc}"
    try:
        log = read_probe_file(run.log_path)[-LOG_TAIL_BYTES:]
    except OSError:
        log = b""
    return {
        "python": str(Path(os.path.realpath(env_path)) / "bin" / "python"),
        "returncode": ended.returncode,
        "timed_out": ended.timed_out,
        "exit_overdue": ended.exit_overdue,
        "started_at": run.started_at,
        "ended_at": run.ended_at,
        "duration_s": run.duration_s,
        "peak_rss_mb": run.peak_rss_mb,
        "records": records,
        "unreadable": unreadable,
        "log": log,
    }


#: This worker's keeper: its pid, and the pipe whose end tells it the worker is gone.
_KEEPER: tuple[int, Any] | None = None
_KEEPER_LOCK = threading.Lock()


def ensure_keeper() -> None:
    """Start this worker's keeper once (`keeper.py`): it ends this worker's probes if Ray kills the
    worker (Ctrl-C on the host cancels with `force=True`)."""
    global _KEEPER
    with _KEEPER_LOCK:
        if _KEEPER is not None and _alive(_KEEPER[0]):
            return
        starter = subprocess.Popen(
            [sys.executable, "-m", "difftest.run.cluster.keeper", str(os.getpid())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            cwd=tempfile.gettempdir(),
        )
        assert starter.stdout is not None
        pid = int(starter.stdout.readline() or 0)
        starter.stdout.close()
        starter.wait()  # the starter exits at once; the keeper lives on, holding the pipe
        _KEEPER = (pid, starter.stdin)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True
