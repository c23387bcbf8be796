"""Running a tier's probe inside each branch environment, in parallel, and reading what it wrote.

One interpreter start per branch and tier: importing vLLM costs ~10 s and
dominates everything else, so every scenario of a tier runs in that one
process. Branches run concurrently as separate processes; a thread per branch
only waits on its process, so a plain thread pool is enough.

What the probe wrote is read record by record (`records.read_delivery`): every
planned run ends up with exactly one `ProbeRun`, measured or an `error` with
its reason, so a crash, a hang, a bad or forged record costs the runs it
touches and never the other runs or branches.
"""

from __future__ import annotations

import atexit
import dataclasses
import json
import os
import secrets
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NamedTuple

from difftest.core import tally
from difftest.core.evidence import ProbeNode, ReusedProbe
from difftest.core.outcome import ProcessOutcome
from difftest.core.records import ProbeCoverage, ProbeHeader, ProbeRun
from difftest.core.text import clean
from difftest.core.verdicts import one_line
from difftest.probe import confine
from difftest.probe.protocol import (
    HOST_PID_ENV,
    NONCE_ENV,
    NONCE_FD_ENV,
    RECORDS_FD_ENV,
    STACK_DUMP_SIGNAL,
    STUCK_PREFIX,
    Job,
)
from difftest.run.probes import descendants, sandbox
from difftest.run.probes.environ import probe_environ
from difftest.run.probes.files import open_probe_file, open_records, read_probe_text
from difftest.run.probes.forking import ForkServer, ProbeProcess, refusal, start_fork_server
from difftest.run.probes.prebuilt import ensure_prebuilt
from difftest.run.probes.read_records import check_lines, read_delivery
from difftest.run.probes.scratch import Scratch

#: (branch, finished runs, expected runs, scenario and label of the last finished run). Called once
#: with 0 runs and an empty scenario when the branch's probe process starts (it then imports vLLM):
#: until then the branch waits for a free slot (`jobs`).
Progress = Callable[[str, int, int, str, str], None]

_CAPTURE_TAIL = 40

#: How long a probe may take to exit after its trailer (`timeouts.exit_s` overrides it).
EXIT_S = 10.0
#: How long a stuck probe gets to write its threads' stacks before it is killed.
STACK_DUMP_S = 1.0
#: The exit code a probe that could not start reports (`protocol.serve`'s): its runs could not
#: be measured.
SETUP_FAILED = 3


class ProbesStopped(Exception):
    """Raised instead of starting a probe after `stop_all_probes` (the user interrupted
    difftest)."""


class _LiveProbes:
    """Every probe process this difftest started and that has not ended yet.

    Probes run in their own session (a Ctrl-C in the terminal does not reach
    them, and the host kills their whole process group on a timeout), so the
    host must stop them itself when it is interrupted or exits for any reason.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._procs: set[Any] = set()
        #: Each started process's scratch folder (by pid), removed when it ends.
        self._scratches: dict[int, Scratch] = {}
        self._killed: set[int] = set()
        #: Processes killed with the probes but not counted as probes (fork servers).
        self._helpers: set[int] = set()
        #: Probes running elsewhere (a Ray task on a cluster node), each with its way to stop it.
        self._remote: dict[object, Callable[[], None]] = {}
        self._remote_stopped = 0
        self._stopped = False
        #: How many times every probe was stopped; never reset, so a probe can tell it was stopped
        #: (rather than dying on its own) even after the stop was handled.
        self.stops = 0

    def start(
        self,
        argv: list[str],
        writable: Sequence[Path] = (),
        scratch: Scratch | None = None,
        own_pids: bool = True,
        **kwargs: Any,
    ) -> subprocess.Popen[Any]:
        """Start a probe process confined (`sandbox`): it can write its `scratch` folder (its
        `HOME` and `TMPDIR`, made here when not given, removed when it ends) and `writable`, and
        nothing else; with `own_pids`, in a pid namespace of its own (`sandbox.wrap`)."""
        scratch = scratch or Scratch.create()
        kwargs["env"] = {**kwargs.get("env", {}), **scratch.environ()}
        try:
            argv = sandbox.wrap(argv, [scratch.root, *writable], own_pids)
            with self._lock:
                if self._stopped:
                    raise ProbesStopped("difftest was interrupted: no new probe is started")
                proc = subprocess.Popen(argv, **kwargs)
                self._procs.add(proc)
                self._scratches[proc.pid] = scratch
                return proc
        except BaseException:
            scratch.remove()
            raise

    def start_helper(self, argv: list[str], **kwargs: Any) -> subprocess.Popen[Any]:
        """`start`, for a process that serves probes (a fork server) rather than being one."""
        proc = self.start(argv, own_pids=False, **kwargs)
        with self._lock:
            self._helpers.add(proc.pid)
        return proc

    def remove_scratches(self) -> None:
        """At exit: every scratch folder of a probe still listed."""
        with self._lock:
            scratches = list(self._scratches.values())
            self._scratches.clear()
        for scratch in scratches:
            scratch.remove()

    def add(self, proc: Any) -> None:
        """Hold a probe started some other way (a child of the fork server); killed as the others
        are."""
        with self._lock:
            if self._stopped:
                kill_group(proc, wait=False)
                raise ProbesStopped("difftest was interrupted: no new probe is started")
            self._procs.add(proc)

    def ended(self, proc: Any) -> None:
        with self._lock:
            self._procs.discard(proc)
            self._helpers.discard(proc.pid)
            scratch = self._scratches.pop(proc.pid, None)
        if scratch is not None:
            scratch.remove()

    def add_remote(self, key: object, stop: Callable[[], None]) -> None:
        """Hold a probe that runs on another machine (`run.cluster`): `stop` ends it there."""
        with self._lock:
            if self._stopped:
                raise ProbesStopped("difftest was interrupted: no new probe is started")
            self._remote[key] = stop

    def ended_remote(self, key: object) -> None:
        with self._lock:
            self._remote.pop(key, None)

    def stop_all(self) -> StoppedProbes:
        """Kill every live probe's process group (and stop every remote probe) and start no more;
        how many were stopped since the stop began (calling it again, say from the command line's
        handler, counts them once)."""
        with self._lock:
            self._stopped = True
            self.stops += 1
            procs = [p for p in self._procs if p.pid not in self._killed]
            self._killed.update(p.pid for p in procs)
            remote = list(self._remote.values())
            self._remote.clear()
            self._remote_stopped += len(remote)
        for proc in procs:
            kill_group(proc, wait=False)
        for stop in remote:
            stop()
        return StoppedProbes(len(self._killed - self._helpers), self._remote_stopped)

    def allow_again(self) -> None:
        """After an interrupt was handled (tests call `main` again in one process). A fork server
        kept for the next run stays a helper: the next interrupt does not count it as a probe."""
        with self._lock:
            self._stopped = False
            self._killed.clear()
            self._remote_stopped = 0


class StoppedProbes(NamedTuple):
    """What an interrupt stopped: probe processes here, and probes on cluster nodes (a Ray task is
    cancelled whether it ran or still waited for a node, which this machine cannot tell apart)."""

    local: int
    remote: int

    def __str__(self) -> str:
        parts = [f"{self.local} running probe(s) stopped"] if self.local or not self.remote else []
        if self.remote:
            cancelled = "probe task(s) cancelled on the cluster (running or queued)"
            parts.append(f"{self.remote} {cancelled}")
        return ", ".join(parts)


_LIVE = _LiveProbes()


def stop_all_probes() -> StoppedProbes:
    """Kill every probe process group still running; later probes are not started."""
    return _LIVE.stop_all()


def allow_probes() -> None:
    _LIVE.allow_again()


def probe_stops() -> int:
    """How many times every probe was stopped so far: a wait that began at one count and sees
    another was interrupted, even if the stop was handled (`allow_probes`) since."""
    return _LIVE.stops


def hold_remote_probe(key: object, stop: Callable[[], None]) -> None:
    """Register a probe running elsewhere (a Ray task): an interrupt calls `stop` with the local
    probes' kill; raises ProbesStopped once difftest was interrupted."""
    _LIVE.add_remote(key, stop)


def remote_probe_ended(key: object) -> None:
    _LIVE.ended_remote(key)


def start_probe_process(
    *args: Any, nonce: str | None = None, records: Path | None = None, **kwargs: Any
) -> subprocess.Popen[Any]:
    """`subprocess.Popen`, for a probe: confined (`_LiveProbes.start`), killed with the others on
    an interrupt or at exit, told to die with this host (`protocol.die_with_host`); raises
    ProbesStopped once difftest was interrupted. The `nonce` goes over a pipe
    (`protocol.take_nonce`), never into the environment, which a process can read from
    `/proc/self/environ` all its life; `records` is created here and given as a descriptor
    (`protocol.take_records_fd`)."""
    kwargs["env"] = {**kwargs.get("env", {}), HOST_PID_ENV: str(os.getpid())}
    kwargs["env"].pop(NONCE_ENV, None)
    given: list[int] = []
    try:
        if nonce is not None:
            read_end, write_end = os.pipe()
            given.append(read_end)
            os.write(write_end, nonce.encode("ascii"))
            os.close(write_end)
            kwargs["env"][NONCE_FD_ENV] = str(read_end)
        if records is not None:
            given.append(open_records(records))
            kwargs["env"][RECORDS_FD_ENV] = str(given[-1])
        kwargs["pass_fds"] = (*kwargs.get("pass_fds", ()), *given)
    except BaseException:
        if kwargs.get("scratch") is not None:
            kwargs["scratch"].remove()  # never handed over: `start` would have removed it
        for fd in given:
            os.close(fd)
        raise
    try:
        return _LIVE.start(*args, **kwargs)
    finally:
        for fd in given:
            os.close(fd)


def probe_process_ended(proc: ProbeProcess) -> None:
    _LIVE.ended(proc)


def hold_forked_probe(proc: ProbeProcess) -> None:
    """Hold a probe forked by a fork server outside `run_probe` (a fuzz search's warm probe): killed
    with the others on an interrupt or at exit; raises ProbesStopped once difftest was
    interrupted."""
    _LIVE.add(proc)


atexit.register(_LIVE.remove_scratches)  # runs after the stop below (atexit: last in, first out)
atexit.register(stop_all_probes)  # no probe outlives difftest, whatever way it exits


@dataclass(frozen=True)
class BranchRun:
    """What one branch's probe process delivered: one ProbeRun per planned run.

    Frozen: once a probe has ended, what it delivered is a fact the door judges, the cache stores
    and the evidence cites; nothing downstream changes it (`_Building` assembles it meanwhile)."""

    branch: str
    tier: str
    header: ProbeHeader | None = None
    runs: list[ProbeRun] = field(default_factory=list)
    #: Why the process as a whole failed (import error, crash, timeout), in one line; None if it
    #: exited cleanly.
    error: str | None = None
    #: The last lines the probe printed, for reports of a failed process.
    log_tail: str = ""
    timed_out: bool = False
    #: The probe exited 0 on its own (not killed, no timeout).
    exited_cleanly: bool = False
    duration_s: float = 0.0
    #: Wall-clock start and end (epoch seconds): shows which branches overlapped.
    started_at: float = 0.0
    ended_at: float = 0.0
    log_path: Path | None = None
    job_path: Path | None = None
    records_path: Path | None = None
    #: The secret the probe stamped its records with; kept so the records can be re-validated later.
    nonce: str = ""
    #: The probe process's peak resident memory (VmHWM, sampled while it ran), in MB; None if
    #: unknown.
    peak_rss_mb: float | None = None
    #: Set when these runs were not measured now but read from the result cache
    #: (`run.cache.results`).
    reused: ReusedProbe | None = None
    #: How the probe process started: "fresh" (its own interpreter) or "forked" (from the tier's
    #: warm fork server, `run.probes.forking`); None when the runs were reused.
    launch: Literal["fresh", "forked"] | None = "fresh"
    #: Why a probe asked to fork started fresh instead ("" when it did not have to).
    launch_note: str = ""
    #: How the process ended (what the judging door weighs beside the records); None: never started.
    outcome: ProcessOutcome | None = None
    #: The cluster node that ran it (`run.cluster`, `--executor ray`); None: this machine.
    node: ProbeNode | None = None
    #: What the probe traced of the stats path (`probe.tracing`); None: the job asked for none.
    coverage: ProbeCoverage | None = None


class _Building:
    """A probe's `BranchRun` while it runs: each change replaces the frozen record."""

    def __init__(self, run: BranchRun) -> None:
        self.run = run

    def set(self, **changes: Any) -> None:
        self.run = dataclasses.replace(self.run, **changes)


def planned_count(job: Job) -> int:
    return sum(len(s["runs"]) for s in job["scenarios"])


def probe_file_paths(work_dir: Path, branch: str, tier: str) -> tuple[Path, Path, Path]:
    """Where one branch's probe of one tier keeps its job, its records and its log."""
    return (
        work_dir / f"{branch}-{tier}-job.json",
        work_dir / f"{branch}-{tier}-runs.jsonl",
        work_dir / f"{branch}-{tier}-probe.log",
    )


@dataclass(frozen=True)
class Ended:
    """How a probe process ended, as its watcher saw it (before anything it wrote is read)."""

    #: Its exit status (negative: killed by that signal).
    returncode: int | None
    #: Killed at `probe_s` while still reporting runs.
    timed_out: bool = False
    #: Killed for not exiting within `exit_s` of its trailer.
    exit_overdue: bool = False


def run_probe(
    branch: str,
    python: Path,
    job: Job,
    tier: str,
    work_dir: Path,
    timeout_s: float,
    progress: Progress | None = None,
    parallel: int = 1,
    server: ForkServer | None = None,
    launch_note: str = "",
    exit_s: float = EXIT_S,
) -> BranchRun:
    """Run `python -m difftest.probe` on one job, forked from `server` if one is given (a fresh
    interpreter otherwise, or if forking this branch is refused); never raises for the branch's own
    failures, nor for anything of its output the host cannot read (that is this branch's error)."""
    run, ended = play_probe(
        branch,
        python,
        job,
        tier,
        work_dir,
        timeout_s,
        progress,
        parallel,
        server,
        launch_note,
        exit_s,
    )
    return read_delivered(run, ended, python, job, timeout_s, exit_s)


def play_probe(
    branch: str,
    python: Path,
    job: Job,
    tier: str,
    work_dir: Path,
    timeout_s: float,
    progress: Progress | None = None,
    parallel: int = 1,
    server: ForkServer | None = None,
    launch_note: str = "",
    exit_s: float = EXIT_S,
    nonce: str | None = None,
    environ: dict[str, str] | None = None,
) -> tuple[BranchRun, Ended]:
    """Start the probe and watch it to its end, under the time limits; what it wrote is left in
    `work_dir` for `read_delivered`. A cluster node calls this (`run.cluster.node`) with its host's
    `nonce` and the variables that reach its probes (`environ`); by default a fresh nonce and this
    process's (`environ.probe_environ`)."""
    work_dir = (
        work_dir.resolve()
    )  # the probe runs in `work_dir`: paths it is given must not be relative
    work_dir.mkdir(parents=True, exist_ok=True)
    job_path, out_path, log_path = probe_file_paths(work_dir, branch, tier)
    job_path.write_text(json.dumps(job, indent=1))
    out_path.unlink(missing_ok=True)
    nonce = nonce or secrets.token_hex(16)
    result = _Building(
        BranchRun(
            branch=branch,
            tier=tier,
            log_path=log_path,
            job_path=job_path,
            records_path=out_path,
            nonce=nonce,
            started_at=time.time(),
            launch_note=launch_note,
        )
    )
    started = time.monotonic()
    expected = planned_count(job)
    if progress is not None:
        progress(branch, 0, expected, "", "")
    argv = ["-m", "difftest.probe", "--job", str(job_path)]
    try:
        seed = ensure_prebuilt(job, python).vllm_cache
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        # difftest's own setup, not the branch's: its runs read "could not measure", saying why.
        log_path.write_text(f"difftest: {one_line(str(exc))}\n")
        result.set(launch_note="", duration_s=0.0, ended_at=time.time())
        return result.run, Ended(SETUP_FAILED)
    token = descendants.new_token()
    env = {
        **(environ if environ is not None else probe_environ(parallel)),
        HOST_PID_ENV: str(os.getpid()),
        descendants.TOKEN_ENV: token,
    }
    stops = _LIVE.stops
    proc: ProbeProcess | None = None
    watch = _Watch(out_path, branch, expected, progress, timeout_s, exit_s)
    try:
        if server is not None:
            proc = _forked(
                server, python, argv, env, nonce, work_dir, (log_path, out_path), result, seed
            )
        if proc is not None:
            assert server is not None
            watch.follow(proc, started, result)
            why_fresh = _why_again_fresh(
                proc, server, log_path, watch.timed_out or watch.exit_overdue
            )
            if why_fresh and _LIVE.stops == stops:  # never after an interrupt killed it
                result.set(launch_note=why_fresh, peak_rss_mb=None)
                out_path.unlink(missing_ok=True)
                proc = None
                # The fresh probe gets the whole time limit, and reports only its own memory.
                started = time.monotonic()
                watch = _Watch(out_path, branch, expected, progress, timeout_s, exit_s)
        if proc is None:
            if (
                _LIVE.stops != stops
            ):  # a fork that failed because difftest was interrupted meanwhile
                raise ProbesStopped("difftest was interrupted: no new probe is started")
            result.set(launch="fresh")
            tally.count("probe-fresh", branch=branch, tier=tier)
            with open(log_path, "wb") as log:
                proc = start_probe_process(
                    [str(python), *argv],
                    records=out_path,
                    scratch=Scratch.create(seed),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    # Not the caller's folder: `-m` puts the working directory first on sys.path,
                    # and a difftest checkout there would shadow the environment's own copy of the
                    # probe.
                    cwd=work_dir,
                    env=env,
                    start_new_session=True,
                    nonce=nonce,
                )
            watch.follow(proc, started, result)
    finally:
        descendants.end_descendants(token)
        _drop_if_empty(out_path)
    assert proc is not None
    result.set(duration_s=round(time.monotonic() - started, 2), ended_at=time.time())
    return result.run, Ended(proc.returncode, watch.timed_out, watch.exit_overdue)


def _drop_if_empty(records: Path) -> None:
    """The host creates each records file before its probe starts (the probe writes through the
    descriptor): one still empty at the end is removed, so that a probe that wrote nothing reads
    as one that left no records, as it always did."""
    try:
        if records.lstat().st_size == 0:
            records.unlink()
    except OSError:
        pass


def read_delivered(
    run: BranchRun,
    ended: Ended,
    python: Path,
    job: Job,
    timeout_s: float,
    exit_s: float,
    unreadable: str | None = None,
) -> BranchRun:
    """`run` completed from the records and log files it names and how its process ended: the
    records checked line by line (`read_records`), the process outcome the door judges.

    Every probe's output comes through here, wherever the probe ran: a local one's files as it
    left them, a cluster node's as the node sent them back (`run.cluster`; `unreadable`: why the
    node could not read them). Never raises for anything of the branch's."""
    result = _Building(run)
    if unreadable is not None:
        _unreadable(result, job, run.tier, unreadable, ended.returncode)
        return result.run
    try:
        _read_output(result, ended, python, job, timeout_s, exit_s)
    except Exception as exc:  # noqa: BLE001 - whatever the branch left behind costs this branch only
        _unreadable(result, job, run.tier, f"{type(exc).__name__}: {exc}", ended.returncode)
    return result.run


def _read_output(
    result: _Building, ended: Ended, python: Path, job: Job, timeout_s: float, exit_s: float
) -> None:
    """The probe's records, checked, and the outcome of its process."""
    returncode, timed_out, exit_overdue = ended.returncode, ended.timed_out, ended.exit_overdue
    run = result.run
    tier = run.tier
    assert run.records_path is not None and run.log_path is not None
    log = _log_lines(run.log_path)
    log_tail = clean("\n".join(log[-_CAPTURE_TAIL:]))
    result.set(log_tail=log_tail)  # kept whatever goes wrong below
    confining = [line for line in log[:5] if line.startswith(confine.FAILED_PREFIX)]
    if returncode == sandbox.MOUNT_FAILED and confining:
        # The wrapper could not confine the probe (before any of the branch's code ran): difftest's
        # own failure, never the branch's.
        why = confining[0].removeprefix(confine.FAILED_PREFIX)
        _unreadable(result, job, tier, f"it could not be confined ({clean(why)})", returncode)
        return
    # What it said it waited for counts only when it was killed for it (a pool thread that ends is
    # no hang).
    stuck = _stuck(log) if exit_overdue or timed_out else ""
    error: str | None = None
    if exit_overdue:
        error = f"the probe did not exit within {exit_s:g} s after its last run" + (
            f": {stuck}" if stuck else ""
        )
    elif timed_out:
        error = (
            f"probe timed out after {timeout_s:.0f} s "
            "(raise `timeouts.probe_s` if the branch is just slow)"
        )
    elif returncode != 0:
        error = f"probe exited with code {returncode}: {one_line(log_tail or 'no output')}"
    exited_cleanly = returncode == 0 and not timed_out and not exit_overdue
    # Kept even when the records below cannot be read (`_unreadable` then sets the rest).
    result.set(timed_out=timed_out, error=error, exited_cleanly=exited_cleanly)
    delivery = read_delivery(run.records_path, run.nonce, job, tier, exited_cleanly=exited_cleanly)
    foreign = foreign_code(delivery.header, python)
    if foreign:
        delivery.untrusted.append(foreign)
    result.set(
        header=delivery.header,
        runs=delivery.runs(None if exit_overdue else error),
        coverage=delivery.coverage(),
        outcome=delivery.outcome(
            exit_code=returncode,
            timed_out=timed_out,
            exit_overdue=exit_overdue,
            stuck=stuck,
            last_line=one_line(log_tail) if returncode != 0 and log_tail else "",
            duration_s=run.duration_s,
        ),
    )


def _unreadable(result: _Building, job: Job, tier: str, why: str, exit_code: int | None) -> None:
    """Everything of this probe is `error`: difftest could not read what it left (truncated,
    removed, replaced by something that is not a file)."""
    reason = f"difftest could not read this probe's output: {why}"
    nothing = check_lines([], "", job, tier, exited_cleanly=False)
    result.set(
        error=reason,
        header=None,
        runs=nothing.runs(reason),
        coverage=nothing.coverage(),
        outcome=ProcessOutcome(
            exit_code=exit_code, host_error=why, duration_s=result.run.duration_s
        ),
    )


def _stuck(lines: list[str]) -> str:
    """What the probe said in its log `lines` kept it running (threads it waited for at exit; the
    first frames of the stack dump it wrote when asked), in one short line; "" when it said
    nothing."""
    said = [line[len(STUCK_PREFIX) :] for line in lines if line.startswith(STUCK_PREFIX)]
    frames = _innermost_frames(lines)
    parts = [*said[-1:], *([f"stack: {frames}"] if frames else [])]
    return clean("; ".join(parts))[:600]


def _innermost_frames(lines: list[str]) -> str:
    """The innermost frame of each thread in a faulthandler dump ("file:line in function", the stuck
    main thread first), from the last dump in the log."""
    starts = [
        i for i, line in enumerate(lines) if line.startswith(("Thread 0x", "Current thread 0x"))
    ]
    if not starts:
        return ""
    first = starts[0]
    for i in range(
        len(starts) - 1, 0, -1
    ):  # the last dump: its threads follow each other without a gap
        if starts[i] - starts[i - 1] > 200:
            first = starts[i]
            break
    frames = []
    for i in (j for j in starts if j >= first):
        frame = lines[i + 1].strip() if i + 1 < len(lines) else ""
        if frame.startswith("File "):
            frames.append(f"{lines[i].split(' (most')[0].strip()}: {frame}")
    return " | ".join(frames[:4])


def _forked(
    server: ForkServer,
    python: Path,
    argv: list[str],
    env: dict[str, str],
    nonce: str,
    work_dir: Path,
    files: tuple[Path, Path],
    result: _Building,
    seed: Path | None = None,
) -> ProbeProcess | None:
    """Fork the probe from the warm server; None (the reason in `result.launch_note`) if it
    cannot."""
    if not server.usable:
        result.set(launch_note=server.failure or "the fork server ended before this probe started")
        return None
    try:
        log_path, records = files
        proc = server.spawn(python, argv[2:], env, work_dir, log_path, nonce, seed, records)
    except OSError as exc:
        result.set(launch_note=str(exc))
        return None
    _LIVE.add(proc)
    result.set(launch="forked")
    tally.count("probe-forked")
    return proc


def _why_again_fresh(proc: ProbeProcess, server: ForkServer, log_path: Path, killed: bool) -> str:
    """Why a forked probe's branch is probed again in a fresh interpreter ("" when it is not): it
    would import a shared library from elsewhere, or the server failed under it."""
    refused = refusal(proc.returncode, _tail(log_path))
    if refused:
        return refused
    if proc.returncode != 0 and not killed and not server.usable:
        return server.failure or "the fork server ended while this probe ran"
    return ""


class _Watch:
    """Waits for one probe: progress and peak memory as it goes; its records followed as they grow,
    so that once the trailer is written the probe gets `exit_s` to exit, not the rest of `probe_s`.
    A probe that overstays either limit is asked for its threads' stacks, then its group is
    killed."""

    def __init__(
        self,
        out_path: Path,
        branch: str,
        expected: int,
        progress: Progress | None,
        timeout_s: float,
        exit_s: float,
    ) -> None:
        self.out_path, self.branch, self.expected, self.progress = (
            out_path,
            branch,
            expected,
            progress,
        )
        self.timeout_s, self.exit_s = timeout_s, exit_s
        self.timed_out = False
        self.exit_overdue = False
        self._offset = 0
        self._partial = b""
        self._runs = 0
        self._last: dict[str, Any] = {}
        self._trailer_at: float | None = None

    def follow(self, proc: ProbeProcess, started: float, result: _Building) -> None:
        try:
            while proc.poll() is None:
                now = time.monotonic()
                if self._trailer_at is not None and now - self._trailer_at > self.exit_s:
                    self.exit_overdue = True
                    _dump_then_kill(proc)
                    break
                if now - started > self.timeout_s:
                    self.timed_out = True
                    _dump_then_kill(proc)
                    break
                self._read_new()
                peak = _peak_rss_mb(proc.pid)
                if peak is not None and peak > (result.run.peak_rss_mb or 0):
                    result.set(peak_rss_mb=peak)
                time.sleep(0.2)
            self._read_new()
        finally:
            if proc.poll() is None:
                kill_group(proc)
            else:
                kill_group(
                    proc, wait=False
                )  # what of its group is left: no child outlives the probe
            _LIVE.ended(proc)

    def _read_new(self) -> None:
        """Count the run records written since the last look (tolerating a file that shrinks or
        goes)."""
        try:  # never a blocking open: the branch may have put a FIFO there (`run.probes.files`)
            fd = open_probe_file(self.out_path)
        except OSError:
            return
        try:
            size = os.fstat(fd).st_size
            if size < self._offset:  # truncated or replaced: count again from the start
                self._offset, self._partial, self._runs = 0, b"", 0
            os.lseek(fd, self._offset, os.SEEK_SET)
            chunk = os.read(fd, min(size - self._offset, 1 << 24)) if size > self._offset else b""
        except OSError:
            return
        finally:
            os.close(fd)
        self._offset += len(chunk)
        data = self._partial + chunk
        lines = data.split(b"\n")
        self._partial = lines.pop()
        before = self._runs
        for line in lines:
            if b'"kind": "trailer"' in line and self._trailer_at is None:
                self._trailer_at = time.monotonic()
            elif b'"kind": "run"' in line:
                self._runs += 1
                try:
                    record = json.loads(line)
                except ValueError:
                    record = {}
                self._last = record if isinstance(record, dict) else {}
        if self.progress is not None and self._runs != before:
            self.progress(
                self.branch,
                self._runs,
                self.expected,
                clean(str(self._last.get("scenario", ""))),
                clean(str(self._last.get("label", ""))),
            )


def _dump_then_kill(proc: ProbeProcess) -> None:
    """Ask the probe for its threads' stacks (`protocol.dump_stacks_on_signal`), then kill its
    group."""
    try:
        os.kill(proc.pid, STACK_DUMP_SIGNAL)
    except OSError:
        pass
    else:
        deadline = time.monotonic() + STACK_DUMP_S
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
    kill_group(proc)


def foreign_code(header: ProbeHeader | None, python: Path) -> str | None:
    """Why the probe's records are not the branch environment's own, judging by where its vLLM came
    from (`protocol.code_origin`): the environment of `python` (ENV/bin/python) has it under
    ENV/overlay/vllm."""
    if header is None or header.origin is None:
        return None if header is None else "the probe did not say where its vLLM came from"
    expected = os.path.realpath(Path(python).parent.parent / "overlay" / "vllm")
    if os.path.realpath(header.origin.vllm_dir) != expected:
        return (
            f"the probe imported vLLM from {header.origin.vllm_dir or 'nowhere'}, "
            f"not from its branch environment ({expected})"
        )
    if header.origin.vllm_elsewhere:
        return (
            "the probe loaded vLLM modules from outside its branch environment: "
            f"{', '.join(header.origin.vllm_elsewhere)}"
        )
    return None


def run_branches(
    targets: list[tuple[str, Path]],
    job: Job,
    tier: str,
    work_dir: Path,
    timeout_s: float,
    jobs: int,
    progress: Progress | None = None,
    fork: bool = False,
    log: Callable[[str], None] = lambda _m: None,
    exit_s: float = EXIT_S,
    shared: SharedServer | None = None,
    share_key: str | None = None,
) -> dict[str, BranchRun]:
    """Probe every (branch, interpreter) concurrently; results keyed by branch name.

    With `fork`, one warm fork server imports the shared libraries once and
    every probe is forked from it (`run.probes.forking`); where it cannot, every probe
    starts fresh and says why. A `shared` server (`shared_fork_server`: one
    caller probing batch after batch) is used instead, and left running.
    Interrupted (Ctrl-C, SIGTERM, any exception here), it kills every probe at
    once and does not wait for the ones not started: the caller exits in
    moments, not after `probe_s`.
    """
    if shared is not None:
        (server, note), parallel = shared.get(), shared.parallel
    else:
        parallel = min(jobs, len(targets))
        server, note = _announced(
            fork_server_for(targets[0][1], tier, work_dir, timeout_s, parallel, share_key)
            if fork and targets
            else (None, ""),
            tier,
            log,
        )
    pool = ThreadPoolExecutor(max_workers=max(1, jobs))
    try:
        futures = {
            name: pool.submit(
                run_probe,
                name,
                python,
                job,
                tier,
                work_dir,
                timeout_s,
                progress,
                parallel,
                server,
                note,
                exit_s,
            )
            for name, python in targets
        }
        delivered = {name: future.result() for name, future in futures.items()}
    except BaseException:
        stop_all_probes()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    finally:
        if server is not None and shared is None and not _release(server):
            server.close()
            _LIVE.ended(server.process)
    pool.shutdown()
    return delivered


#: Set to 1 by a long-lived host process that runs many comparisons (the test suite runs the CLI
#: in-process, test after test): each fork server is kept for the next run that would start the
#: same one (same interpreter, tier, probes at once and environment) instead of importing the
#: shared libraries again. Unset (a CLI run), each run starts its own and ends it.
KEEP_FORK_SERVERS_ENV = "DIFFTEST_KEEP_FORK_SERVERS"
#: At most this many kept servers not in use (each holds the shared libraries, ~0.4 GB).
MAX_KEPT_SERVERS = 3


@dataclass
class _Kept:
    server: ForkServer
    #: `_LIVE.stops` when it was started: a stop since (an interrupt) killed it.
    stops: int
    #: Runs using it now: it is never ended under them.
    users: int = 0


_KEPT: dict[tuple[Any, ...], _Kept] = {}
_KEPT_LOCK = threading.Lock()


def share_key_of(base: Path) -> str:
    """What a kept fork server serving every branch over the base at `base` is known by: the
    folder and which build of it (a base rebuilt in place is another folder to the kernel), so a
    server that imported the old build's libraries never serves the new one."""
    found = base.stat()
    return f"{base}@{found.st_ino}:{found.st_ctime_ns}"


def keeps_fork_servers() -> bool:
    """This process keeps fork servers for later runs (`KEEP_FORK_SERVERS_ENV`)."""
    return os.environ.get(KEEP_FORK_SERVERS_ENV) == "1"


def fork_server_for(
    python: Path,
    tier: str,
    work_dir: Path,
    timeout_s: float,
    parallel: int,
    share_key: str | None = None,
) -> tuple[ForkServer | None, str]:
    """A warm fork server for this run: a kept one where `DIFFTEST_KEEP_FORK_SERVERS` is 1 and one
    was started the same way, still usable, and no stop (an interrupt) came since; else a new one
    (`warm_fork_server`), kept in its turn. The caller hands a kept one back (`_release`).

    `share_key` names what every branch it serves shares (their base environment): a server
    started with one branch's interpreter serves every branch over the same base, as it does
    within one run; without it, only runs that start it with the same interpreter share it."""
    if not keeps_fork_servers():
        return warm_fork_server(python, tier, work_dir, timeout_s, parallel)
    key = (share_key or str(python), tier, parallel, tuple(sorted(probe_environ(parallel).items())))
    with _KEPT_LOCK:
        kept = _KEPT.pop(key, None)
        if kept is not None and not (kept.server.usable and kept.stops == _LIVE.stops):
            if kept.users == 0:
                _close_server(kept.server)
            kept = None
        if kept is None:
            server, why = warm_fork_server(python, tier, work_dir, timeout_s, parallel)
            if server is None:
                return None, why
            kept = _Kept(server, _LIVE.stops)
        kept.users += 1
        _KEPT[key] = kept  # the newest
        idle = [k for k, held in _KEPT.items() if held.users == 0]
        for old in idle[: max(0, len(idle) - MAX_KEPT_SERVERS)]:
            _close_server(_KEPT.pop(old).server)
        return kept.server, ""


def close_kept_fork_servers() -> None:
    """End every kept fork server (a test that counts this process's servers starts with none)."""
    with _KEPT_LOCK:
        for kept in _KEPT.values():
            _close_server(kept.server)
        _KEPT.clear()


def _release(server: ForkServer) -> bool:
    """Hand a kept server back after a run; False when `server` is not a kept one."""
    with _KEPT_LOCK:
        for kept in _KEPT.values():
            if kept.server is server:
                kept.users -= 1
                return True
    return False


def _close_server(server: ForkServer) -> None:
    server.close()
    _LIVE.ended(server.process)


class SharedServer:
    """A tier's fork server kept for several `run_branches` calls (`difftest blame`: batch after
    batch) or a fuzz search's warm probes, started when the first of them has a probe to start (a
    kept one where `DIFFTEST_KEEP_FORK_SERVERS` is 1, as `fork_server_for`), and the probes-at-once
    it was started for: every probe forked from it gets that same environment, which its shared
    libraries were imported under. Where probes must start fresh it holds None and why."""

    def __init__(
        self,
        python: Path,
        tier: str,
        work_dir: Path,
        timeout_s: float,
        parallel: int,
        fork: bool,
        log: Callable[[str], None],
        share_key: str | None = None,
    ) -> None:
        self.parallel = parallel
        self._start = (python, tier, work_dir, timeout_s, fork, log)
        self._share_key = share_key
        self._lock = threading.Lock()
        self._started: tuple[ForkServer | None, str] | None = None

    def get(self) -> tuple[ForkServer | None, str]:
        """The server (started now if it was not), or None and why probes start fresh."""
        with self._lock:
            if self._started is None:
                python, tier, work_dir, timeout_s, fork, log = self._start
                self._started = _announced(
                    fork_server_for(
                        python, tier, work_dir, timeout_s, self.parallel, self._share_key
                    )
                    if fork
                    else (None, ""),
                    tier,
                    log,
                )
            return self._started

    def close(self) -> None:
        with self._lock:
            server = self._started[0] if self._started is not None else None
            if server is not None and not _release(server):
                _close_server(server)


@contextmanager
def shared_fork_server(
    python: Path,
    tier: str,
    work_dir: Path,
    timeout_s: float,
    parallel: int,
    fork: bool = True,
    log: Callable[[str], None] = lambda _m: None,
    share_key: str | None = None,
) -> Iterator[SharedServer]:
    """One tier's fork server for a caller that probes batch after batch: its warm-up is paid once,
    by the first batch with a probe to start; it ends with the block, whatever way it is left."""
    shared = SharedServer(python, tier, work_dir, timeout_s, parallel, fork, log, share_key)
    try:
        yield shared
    finally:
        shared.close()


def _announced(
    started: tuple[ForkServer | None, str], tier: str, log: Callable[[str], None]
) -> tuple[ForkServer | None, str]:
    """The fork server (or why probes start fresh), said in the log."""
    server, note = started
    if note:
        log(f"{tier} tier: probes start in fresh interpreters: {note}")
    elif server is not None:
        log(
            f"{tier} tier: fork server ready, "
            f"{len(server.state.modules)} shared libraries imported once in "
            f"{server.state.import_s:.1f} s; "
            "each probe is forked from it (--no-fork: fresh interpreters)"
        )
    return server, note


def warm_fork_server(
    python: Path, tier: str, work_dir: Path, timeout_s: float, parallel: int
) -> tuple[ForkServer | None, str]:
    """The tier's fork server, its shared libraries imported; (None, why) when probes must start
    fresh."""
    work_dir = work_dir.resolve()
    work_dir.mkdir(parents=True, exist_ok=True)
    env = {**probe_environ(parallel), HOST_PID_ENV: str(os.getpid())}
    tally.count("fork-server", tier=tier)
    server = start_fork_server(
        python,
        env,
        work_dir,
        work_dir / f"{tier}-forkserver.log",
        min(timeout_s, 600.0),
        _LIVE.start_helper,
    )
    if server.usable:
        return server, ""
    server.close()
    _LIVE.ended(server.process)
    return None, server.failure or server.state.why or "the fork server stopped"


def kill_group(proc: ProbeProcess, wait: bool = True) -> None:
    """SIGKILL a probe's whole process group (it runs in its own session) and every process below
    it (a confined probe's pid namespace: its init and the probe); wait for them all unless told
    not to. A child forked a moment ago may not lead its own group yet: then the process itself is
    killed."""
    pidfds = descendants.kill_below(proc.pid)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        try:
            os.kill(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    if wait:
        proc.wait()
        descendants.wait_ended(pidfds)
    else:
        descendants.wait_ended(pidfds, limit_s=0)


def _peak_rss_mb(pid: int) -> float | None:
    """The largest resident-memory high-water mark so far (Linux `/proc`, in MB) of the process and
    those below it: a confined probe is two processes below the one the host started."""
    peaks = []
    for each in (pid, *descendants.below(pid)):
        try:
            status = Path(f"/proc/{each}/status").read_text()
        except OSError:
            continue
        peaks += [
            int(line.split()[1]) / 1024 for line in status.splitlines() if line.startswith("VmHWM:")
        ]
    return max(peaks, default=None)


def _log_lines(path: Path) -> list[str]:
    try:
        return read_probe_text(path).splitlines()
    except OSError:  # gone, or replaced by something that is not a file
        return []


def _tail(path: Path) -> str:
    return clean("\n".join(_log_lines(path)[-_CAPTURE_TAIL:]))
