"""The wire format between the host and a probe, and the one loop every probe runs.

A probe runs INSIDE a branch environment, next to that branch's vLLM, so this
module uses the standard library only. The host imports it too (it is the
single source of the record kinds, the counters and the run roles), and checks
every record it reads with its own pydantic models (`difftest.core.records`),
one record at a time: a record it cannot validate becomes an `error` result for
that run, never a crash that loses the other runs.

    host -> probe   JOB.json                      (Job: tier, planned runs per scenario)
                    env DIFFTEST_PROBE_NONCE       (a secret the probe removes at start)
    probe -> host   RUNS.jsonl, one JSON object per line, each carrying the nonce:
                    {"kind": "header", ...}        once, after vLLM imported
                    {"kind": "run", ...}           once per planned run, flushed as it ends
                    {"kind": "coverage", ...}      when the job names files to trace (`tracing`)
                    {"kind": "trailer", "runs": N} last; its absence means the probe died

A persistent probe (`serve_stream`, `python -m difftest.probe --serve`) keeps
vLLM imported and plays job after job: one job per line on stdin, answered on
stdout with exactly the lines above (header, runs, trailer), so the host checks
each answer as it checks a RUNS.jsonl.

Each run is played under `CallInfo.from_call` (the shape of pytest's CallInfo):
the result, or the failure with its kind, a one-line summary (`Type: message`),
where it was raised and whether vLLM's code raised it, plus the duration. A
failure in one run never stops the next one.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NoReturn, NotRequired, Protocol, TextIO, TypedDict, cast

from .tracing import Tracing

PROTOCOL_VERSION = 4
#: A probe reads its nonce from this variable (where no pipe brought it: a fork server given no
#: socket) and removes it before importing vLLM.
NONCE_ENV = "DIFFTEST_PROBE_NONCE"
#: A probe, fresh or forked, reads its nonce from the pipe whose file descriptor this variable
#: names, and closes it: an interpreter's own `/proc/self/environ` is its start environment,
#: readable all its life, and a fork server's requests stay in the memory its later children
#: inherit.
NONCE_FD_ENV = "DIFFTEST_PROBE_NONCE_FD"
#: Names, in the fork server's environment, the descriptor of the Unix socket over which the host
#: sends each forked probe's nonce pipe, and a warm probe's stdin and stdout (`forkserver`).
FORKSERVER_PIPES_FD_ENV = "DIFFTEST_FORKSERVER_PIPES_FD"
#: The host's pid: the probe asks the kernel to kill it when that process dies (`die_with_host`).
HOST_PID_ENV = "DIFFTEST_HOST_PID"
#: The descriptor of the records file the host opened for this probe (a confined probe can write
#: no path outside its scratch folder, so its records come through a descriptor).
RECORDS_FD_ENV = "DIFFTEST_RECORDS_FD"
#: A probe forked from the fork server exits with this code when its branch would import a shared
#: library from another file than the server imported (`forkserver`): the host then starts it fresh.
EXIT_NOT_SHAREABLE = 86
#: ... after a line in its log that starts with this (a branch's own exit 86 has none).
NOT_SHAREABLE_PREFIX = "difftest.probe.forkserver: not shareable: "
#: A probe names what keeps it from exiting (non-daemon threads) on a line that starts with this.
STUCK_PREFIX = "difftest.probe: still running at exit: "
#: The host sends this signal before it kills a probe that overstays (in a run, or after its
#: trailer): the probe writes every thread's stack to its log (`dump_stacks_on_signal`).
STACK_DUMP_SIGNAL = signal.SIGUSR1

#: The run note a probe files each finished request's per-request spec-decode metrics under
#: (`{request id: RequestSpecDecodeMetrics.to_dict()}`), where the scenario asked for them.
REQUEST_METRICS_NOTE = "request_metrics"
#: The run note holding the branch's spec-decode log line of each logging interval, where the
#: scenario sets `log_every` (`probe.common.intervals`).
INTERVALS_NOTE = "log_intervals"
#: The run note naming the requests a `reset_prefix_cache` preempted, where the scenario sets
#: `reset_prefix_cache` (a run the reset never lands in fails instead).
RESET_NOTE = "reset_prefix_cache"
#: The run note holding what the generated-token Prometheus metrics moved by over the run: the
#: `vllm:generation_tokens` counter, and the `vllm:request_generation_tokens` histogram's sum and
#: count (one observation per finished request).
TOKEN_COUNTERS_NOTE = "prometheus_tokens"
TOKEN_COUNTERS = (
    "generation_tokens",
    "request_generation_tokens_sum",
    "request_generation_tokens_count",
)

#: Names a branch may give its "tokens really emitted" counter, most specific first.
EMITTED_FIELDS = (
    "num_emitted_tokens",
    "num_committed_tokens",
    "num_committed_draft_tokens",
    "num_output_tokens",
)

#: A counter is one integer, or one integer per draft position (a list as long as k).
CounterKind = Literal["scalar", "per_position"]


@dataclass(frozen=True)
class Counter:
    """One SpecDecodingStats counter difftest compares, under every name it goes by.

    `COUNTER_TABLE` is the one place the counters are written: the host's models
    (`core.records.Totals`, `StepStats`), the probe's sums, the Prometheus map,
    the report rows and the trace columns are derived from it; the oracle's
    rule for each row lives in `tiers.common.accounting`, which refuses a row
    without one.
    """

    #: The field of SpecDecodingStats, of `Totals` and of the evidence.
    name: str
    #: The row label of a report's counter table.
    label: str
    #: The column header of a step trace.
    short: str
    #: The key of a step trace's stats row (`reports.trace.FIELDS`): what a differing step names.
    trace: str
    #: The Prometheus counter the engine exports it as (no `vllm:` prefix or `_total` suffix).
    prometheus: str | None = None
    kind: CounterKind = "scalar"
    #: The field names a branch may give it instead, most specific first; empty: every branch's
    #: stats carry it as `name`. A branch with none of them leaves it implied (`common.stats`).
    branch_names: tuple[str, ...] = ()

    @property
    def per_position(self) -> bool:
        return self.kind == "per_position"


#: The SpecDecodingStats counters compared against the oracle, in report order.
COUNTER_TABLE: tuple[Counter, ...] = (
    Counter(
        name="num_drafts",
        label="num_drafts",
        short="rows",
        trace="rows",
        prometheus="spec_decode_num_drafts",
    ),
    Counter(
        name="num_draft_tokens",
        label="num_draft_tokens",
        short="drafts",
        trace="draft_tokens",
        prometheus="spec_decode_num_draft_tokens",
    ),
    Counter(
        name="num_accepted_tokens",
        label="num_accepted_tokens",
        short="accepted",
        trace="accepted",
        prometheus="spec_decode_num_accepted_tokens",
    ),
    Counter(
        name="num_accepted_tokens_per_pos",
        label="accepted per pos",
        short="accepted/pos",
        trace="accepted_per_pos",
        prometheus="spec_decode_num_accepted_tokens_per_pos",
        kind="per_position",
    ),
    Counter(
        name="num_draft_tokens_per_pos",
        label="draft tokens per pos",
        short="drafts/pos",
        trace="draft_tokens_per_pos",
        kind="per_position",
    ),
    Counter(
        name="num_emitted_tokens",
        label="num_emitted_tokens",
        short="emitted",
        trace="emitted",
        branch_names=EMITTED_FIELDS,
    ),
)


def counter_names(table: tuple[Counter, ...]) -> tuple[str, ...]:
    """The counters' names, in the table's order."""
    return tuple(c.name for c in table)


def own_named(table: tuple[Counter, ...]) -> tuple[str, ...]:
    """The counters every branch's stats carry under their own name (no `branch_names`)."""
    return tuple(c.name for c in table if not c.branch_names)


def prometheus_fields(table: tuple[Counter, ...]) -> dict[str, str]:
    """Prometheus name -> counter name, for the counters the engine exports."""
    return {c.prometheus: c.name for c in table if c.prometheus is not None}


#: The names of `COUNTER_TABLE`, in report order (what verdicts, gate and invariants compare).
COUNTERS = counter_names(COUNTER_TABLE)

RunRole = Literal["batch", "alone", "reference"]
#: batch: one batch order, judged; alone: one request alone (feeds additivity), judged;
#: reference: an uncut run that only chooses where later runs are cut, recorded, not judged.
RunStatus = Literal["ok", "error", "timeout"]
#: exception: raised while playing; did-not-finish: the driver's step budget ran out;
#: timeout: the run's time limit (`run_timeout_s`) expired.
FailureKind = Literal["exception", "did-not-finish", "timeout"]
#: Where an exception came from: the branch's vLLM, the probe itself, or another library.
Origin = Literal["vllm", "probe", "other"]


class PlannedRun(TypedDict):
    label: str
    order: list[str]
    role: RunRole


class JobScenario(TypedDict):
    name: str
    file: str
    #: What the tier's probe plays (the tier decides its shape).
    data: dict[str, Any]
    runs: list[PlannedRun]


class Job(TypedDict):
    protocol: int
    #: The probe entry to run (`ENTRIES` in `difftest.probe.__main__`).
    entry: str
    work_dir: str
    run_timeout_s: float | None
    scenarios: list[JobScenario]
    #: What to trace (`tracing`): {"site": coverage.py's folder, "paths": ["vllm/..."]}.
    trace: NotRequired[dict[str, Any]]


class StepRecord(TypedDict):
    """One engine step as the probe saw it, per request id."""

    step: int
    scheduled: list[str]
    drafts: dict[str, list[int]]
    invalid: dict[str, int]
    sampled: dict[str, list[int]]
    emitted: dict[str, list[int]]
    finished: dict[str, str]
    #: Every field of the step's SpecDecodingStats, or None if the step had none.
    stats: dict[str, Any] | None
    #: Requests whose drafts for this step the model runner skipped (zero-filled), whether or not
    #: the branch scheduled the zero-fill.
    skipped: list[str]
    #: Tokens the scheduler scheduled per request (prefill chunks, decodes with their drafts).
    tokens: dict[str, int]
    #: Requests the scheduler preempted while scheduling this step.
    preempted: list[str]
    #: Requests the probe aborted between this step's `schedule()` and its `update_from_output()`.
    aborted: list[str]
    #: Requests whose output of this step the scheduler drops: in flight when
    #: `reset_prefix_cache(reset_running_requests=True)` preempted them.
    dropped: list[str]
    #: Requests a `reset_prefix_cache(reset_running_requests=True)` after this step's output
    #: preempted (the scheduler reports them with the next step it schedules, which resumes them).
    reset: list[str]


class Failure(TypedDict):
    kind: FailureKind
    type: str
    #: `Type: message` in one line, as a traceback's last line reads (what reports show).
    summary: str
    #: The innermost frame, `path:line in function`.
    where: str
    origin: Origin
    traceback: str


class RunResult(TypedDict):
    """What a tier's `play` returns for one planned run."""

    steps: list[StepRecord]
    totals: dict[str, Any]
    outputs: dict[str, list[int]]
    finish_reasons: dict[str, str]
    notes: dict[str, Any]


class Session(Protocol):
    """One probe process's state for one tier: vLLM imported, configs and engines built."""

    def header_info(self) -> dict[str, Any]:
        """Tier-specific facts for the header (vLLM's stats fields, the engine config, ...)."""

    def play(self, scenario: JobScenario, run: PlannedRun) -> RunResult:
        """Play one planned run; raise on any failure (the loop records it)."""


class DidNotFinish(RuntimeError):
    """The branch's scheduler or engine did not finish a run within the driver's step budget."""


class RunTimeout(Exception):
    """The run took longer than the job's `run_timeout_s`."""


def step_record(
    step: int,
    scheduled: list[str],
    drafts: dict[str, list[int]],
    invalid: dict[str, int],
    sampled: dict[str, list[int]],
    emitted: dict[str, list[int]],
    finished: dict[str, str],
    stats: dict[str, Any] | None,
    skipped: list[str] | tuple[str, ...] = (),
    *,
    tokens: dict[str, int] | None = None,
    preempted: list[str] | tuple[str, ...] = (),
    aborted: list[str] | tuple[str, ...] = (),
    dropped: list[str] | tuple[str, ...] = (),
    reset: list[str] | tuple[str, ...] = (),
) -> StepRecord:
    """The one place a step record is built (both tiers' drivers call it)."""
    return {
        "step": step,
        "scheduled": list(scheduled),
        "drafts": {rid: list(d) for rid, d in drafts.items() if d},
        "invalid": dict(invalid),
        "sampled": {rid: list(s) for rid, s in sampled.items()},
        "emitted": {rid: list(e) for rid, e in emitted.items()},
        "finished": dict(finished),
        "stats": stats,
        "skipped": list(skipped),
        "tokens": dict(tokens or {}),
        "preempted": list(preempted),
        "aborted": list(aborted),
        "dropped": list(dropped),
        "reset": list(reset),
    }


@contextmanager
def time_limit(seconds: float | None) -> Iterator[None]:
    """Interrupt a run stuck in Python code (a looping or sleeping branch) with RunTimeout.

    The host's process timeout is the last resort (it loses every run not yet
    written); this limit costs only the one run.
    """
    if not seconds:
        yield
        return

    def expire(_signum: int, _frame: object) -> None:
        raise RunTimeout(f"run exceeded its time limit of {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@dataclass
class CallInfo:
    """Result or failure of one call, and how long it took."""

    result: RunResult | None
    failure: Failure | None
    duration_s: float

    @classmethod
    def from_call(cls, func: Callable[[], RunResult], limit_s: float | None) -> CallInfo:
        started = time.perf_counter()
        try:
            with time_limit(limit_s):
                result = func()
        except Exception as exc:  # noqa: BLE001 - the run's failure, whatever it is, is recorded
            return cls(None, describe_failure(exc), round(time.perf_counter() - started, 6))
        return cls(result, None, round(time.perf_counter() - started, 6))

    @property
    def status(self) -> RunStatus:
        if self.failure is None:
            return "ok"
        return "timeout" if self.failure["kind"] == "timeout" else "error"


def describe_failure(exc: BaseException) -> Failure:
    """Kind, last line, innermost frame and origin of an exception (for reports and verdicts)."""
    frames = list(traceback.walk_tb(exc.__traceback__))
    where = ""
    origin: Origin = "other"
    if frames:
        frame, line = frames[-1]
        where = f"{_importable_path(frame.f_code.co_filename)}:{line} in {frame.f_code.co_name}"
        origin = _origin(frames)
    kind: FailureKind = "exception"
    if isinstance(exc, RunTimeout):
        kind = "timeout"
    elif isinstance(exc, DidNotFinish):
        kind = "did-not-finish"
    message = [line for line in str(exc).strip().splitlines() if line.strip()]
    summary = (
        type(exc).__name__
        + (f": {message[0]}" if message else "")
        + (" ..." if len(message) > 1 else "")
    )
    return {
        "kind": kind,
        "type": type(exc).__name__,
        "summary": summary,
        "where": where,
        "origin": origin,
        "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
    }


def _importable_path(filename: str) -> str:
    """`vllm/v1/core/sched/scheduler.py`, not the environment's absolute path: the same in every
    cache and clone, so evidence compares across them (`difftest verify`)."""
    roots = [os.path.join(os.path.abspath(p), "") for p in sys.path if p]
    under = [root for root in roots if filename.startswith(root)]
    return filename[len(max(under, key=len)) :] if under else filename


def _origin(frames: list[tuple[Any, int]]) -> Origin:
    """`vllm` when vLLM code ran below the probe's last frame (the branch raised), else the
    raiser."""
    names = [str(frame.f_globals.get("__name__", "")) for frame, _ in frames]
    probe_at = max((i for i, n in enumerate(names) if n.startswith("difftest.probe")), default=-1)
    below = names[probe_at + 1 :]
    if any(n == "vllm" or n.startswith("vllm.") for n in below):
        return "vllm"
    return "probe" if not below else "other"


class RecordWriter:
    """Writes records as JSON lines, each flushed at once and stamped with the nonce."""

    def __init__(self, stream: TextIO, nonce: str) -> None:
        self.stream = stream
        self.nonce = nonce
        self.runs = 0

    def write(self, record: dict[str, Any]) -> None:
        self.stream.write(json.dumps({**record, "nonce": self.nonce}) + "\n")
        self.stream.flush()

    def header(self, tier_info: dict[str, Any], import_s: float, setup_s: float) -> None:
        import platform

        self.write(
            {
                "kind": "header",
                "protocol": PROTOCOL_VERSION,
                "python": platform.python_version(),
                "import_s": round(import_s, 3),
                "setup_s": round(setup_s, 3),
                "info": tier_info,
                "origin": code_origin(),
            }
        )

    def run(self, scenario: JobScenario, planned: PlannedRun, call: CallInfo) -> None:
        result: dict[str, Any] = dict(call.result or {})
        self.write(
            {
                "kind": "run",
                "scenario": scenario["name"],
                "label": planned["label"],
                "role": planned["role"],
                "order": list(planned["order"]),
                "status": call.status,
                "failure": call.failure,
                "duration_s": call.duration_s,
                "steps": result.get("steps", []),
                "totals": result.get("totals"),
                "outputs": result.get("outputs", {}),
                "finish_reasons": result.get("finish_reasons", {}),
                "notes": result.get("notes", {}),
            }
        )
        self.runs += 1

    def trailer(self) -> None:
        self.write({"kind": "trailer", "runs": self.runs})


def code_origin() -> dict[str, Any]:
    """Where this probe's vLLM came from, so the host can check it ran the branch's code and no
    other (a fresh interpreter and a forked one alike): the package folder, any vLLM module loaded
    from outside it, and the interpreter."""
    vllm_file = getattr(sys.modules.get("vllm"), "__file__", None)
    folder = os.path.dirname(_real_path(vllm_file)) if vllm_file else ""
    elsewhere = sorted(
        name
        for name, module in list(sys.modules.items())
        if (name == "vllm" or name.startswith("vllm."))
        and (module_file := getattr(module, "__file__", None))
        and not _real_path(module_file).startswith(folder + os.sep)
    )
    return {"vllm_dir": folder, "vllm_elsewhere": elsewhere[:5], "executable": sys.executable}


@functools.cache
def _real_path(path: str) -> str:
    """`os.path.realpath`, once per file: a serving probe names its origin in every answer, and
    resolving every loaded vLLM module's path each time cost more than playing a scenario."""
    return os.path.realpath(path)


def without_trace(job: Any) -> Any:
    """A job (or what a file says is one) less what it traces: what its runs depend on."""
    return {k: v for k, v in job.items() if k != "trace"} if isinstance(job, dict) else job


def read_job(path: Path) -> Job:
    return parse_job(Path(path).read_text())


def parse_job(text: str) -> Job:
    """A job from its JSON text; ValueError if it is not one this probe speaks."""
    job = json.loads(text)
    if not isinstance(job, dict) or job.get("protocol") != PROTOCOL_VERSION:
        found = job.get("protocol") if isinstance(job, dict) else None
        raise ValueError(f"job protocol {found!r}; this probe speaks {PROTOCOL_VERSION}")
    return cast(Job, job)  # checked above: a mapping that speaks this protocol


def take_nonce() -> str:
    """Read the nonce (from its pipe, else the environment) and remove every trace of it before any
    branch code is imported."""
    given = os.environ.pop(NONCE_ENV, "")
    fd = os.environ.pop(NONCE_FD_ENV, "")
    if not fd.isdigit():
        return given
    try:
        with os.fdopen(int(fd), "r", encoding="ascii") as pipe:
            return pipe.read().strip()
    except (OSError, ValueError):
        return ""


@dataclass
class _Started:
    """A session and the timings its header reports."""

    session: Session
    info: dict[str, Any]
    import_s: float
    setup_s: float


def _start(job: Job, start: Callable[[Job], Session]) -> _Started | None:
    """Start the tier's session; None (traceback on stderr) if it cannot start."""
    started = time.perf_counter()
    try:
        session = start(job)
        info = session.header_info()
    except Exception:  # noqa: BLE001 - the branch's start failed: printed, then reported
        traceback.print_exc()
        return None
    import_s = float(info.pop("import_s", time.perf_counter() - started))
    return _Started(session, info, import_s, time.perf_counter() - started - import_s)


def _answer(
    job: Job,
    started: _Started,
    stream: TextIO,
    nonce: str,
    tracing: Tracing | None = None,
    again: bool = False,
) -> None:
    """Header, one record per planned run, what was traced (when asked; with `again`, a warm
    probe's tracer is restarted for the next job), trailer: the whole answer to one job."""
    writer = RecordWriter(stream, nonce)
    writer.header(dict(started.info), started.import_s, started.setup_s)
    for scenario in job["scenarios"]:
        for planned in scenario["runs"]:
            play = functools.partial(started.session.play, scenario, planned)
            call = CallInfo.from_call(play, job.get("run_timeout_s"))
            writer.run(scenario, planned, call)
    if tracing is not None:
        writer.write({"kind": "coverage", **tracing.record(again)})
    writer.trailer()


#: Called by `vllm_imported`: the fork server's child registers its check of the environment here.
AFTER_VLLM_IMPORT: list[Callable[[], None]] = []


def vllm_imported() -> None:
    """A probe entry calls this right after `import vllm`, before anything else (no-op in a fresh
    probe)."""
    for hook in AFTER_VLLM_IMPORT:
        hook()


def dump_stacks_on_signal() -> None:
    """Write every thread's stack to stderr (the probe's log) on `STACK_DUMP_SIGNAL`: the host asks
    before it kills a stuck probe, so the report can say where the branch's code was."""
    import faulthandler

    try:
        faulthandler.register(STACK_DUMP_SIGNAL, file=sys.stderr, all_threads=True)
    except (
        AttributeError,
        ValueError,
        OSError,
    ):  # no such signal, or stderr has no file descriptor
        pass


def name_waiting_threads() -> None:
    """Say which non-daemon threads the exit is about to wait for (a branch's thread that never ends
    would otherwise hang the probe silently)."""
    waiting = [
        t
        for t in threading.enumerate()
        if t is not threading.main_thread() and not t.daemon and t.is_alive()
    ]
    if not waiting:
        return
    named = []
    for thread in waiting:
        target = getattr(thread, "_target", None)
        where = getattr(target, "__qualname__", None) or type(thread).__qualname__
        module = getattr(target, "__module__", None) or type(thread).__module__
        named.append(f"non-daemon thread {thread.name!r} running {module}.{where}")
    print(STUCK_PREFIX + "; ".join(named), file=sys.stderr, flush=True)


def finish(code: int) -> NoReturn:
    """End the probe as the interpreter's own exit would, less the teardown of torch and vLLM
    (seconds on a busy machine, for nothing): threading's exit hooks run and non-daemon threads
    joined (the interpreter's `threading._shutdown`), atexit handlers run (any the branch
    registered too), streams flushed, then `os._exit`. Fresh and forked probes both end here."""
    try:
        name_waiting_threads()
        threading._shutdown()  # type: ignore[attr-defined]  # what exit does first: its own hooks, then joins
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)


def die_with_host() -> None:
    """Ask Linux to SIGKILL this probe when the host process dies, however it dies (even SIGKILL).

    The host kills its probes on a timeout, an interrupt or exit; this covers
    the host being killed outright, which no handler of its own can see.
    """
    host = os.environ.pop(HOST_PID_ENV, "")
    if not sys.platform.startswith("linux") or not host.isdigit():
        return
    import ctypes

    pr_set_pdeathsig = 1
    try:
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    except (OSError, AttributeError):
        return
    if os.getppid() != int(host):  # the host died before the request was made
        os._exit(3)


def take_records_fd() -> int | None:
    """The descriptor the host opened for this probe's records, if it gave one (removed from the
    environment before any branch code runs)."""
    given = os.environ.pop(RECORDS_FD_ENV, "")
    return int(given) if given.isdigit() else None


def serve(job: Job, out: Path | int, nonce: str, start: Callable[[Job], Session]) -> int:
    """Start the tier's session, play every planned run, write header, runs and trailer to `out`
    (a path, or the descriptor the host opened).

    A session that cannot start (vLLM does not import, the engine does not
    build) exits 3 with its traceback on stderr: nothing could be measured.
    """
    # Before the session imports vLLM: the stats-path modules' own import is traced too.
    tracing = Tracing.start(job.get("trace"))
    started = _start(job, start)
    if started is None:
        return 3
    opened = (
        open(out, "w", encoding="utf-8")
        if isinstance(out, int)
        else Path(out).open("w", encoding="utf-8")
    )
    with opened as stream:
        _answer(job, started, stream, nonce, tracing)
    sys.stdout.flush()
    return 0


def serve_stream(jobs: TextIO, channel: TextIO, nonce: str, start: Callable[[Job], Session]) -> int:
    """Answer job after job (one JSON job per line of `jobs`) on `channel`, vLLM imported once.

    The session starts with the first job; every later job must name the same
    entry and work folder (one process serves one branch and one tier). Exits
    0 when `jobs` ends, 2 on a job it cannot read, 3 if the session cannot start.
    """
    started: _Started | None = None
    first: Job | None = None
    tracing: Tracing | None = None
    for line in jobs:
        if not line.strip():
            continue
        try:
            job = parse_job(line)
        except ValueError as exc:
            print(f"difftest.probe: cannot read a job: {exc}", file=sys.stderr)
            return 2
        if first is None:
            first = job
            # Before the session imports vLLM, as `serve` does; every later job's record holds
            # what that job executed.
            tracing = Tracing.start(job.get("trace"))
            started = _start(job, start)
            if started is None:
                return 3
        elif (job.get("entry"), job.get("work_dir")) != (first.get("entry"), first.get("work_dir")):
            print(
                "difftest.probe: a served job must keep the first job's entry and work_dir",
                file=sys.stderr,
            )
            return 2
        assert started is not None
        _answer(job, started, channel, nonce, _tracing_for(job, first, tracing), again=True)
    return 0


def _tracing_for(job: Job, first: Job, tracing: Tracing | None) -> Tracing | None:
    """The tracer that answers this job's `trace` (None when it asks for none): a warm probe's
    tracer starts with its first job, before vLLM is imported, and cannot start or change files
    later."""
    if not job.get("trace"):
        return None
    if tracing is None:
        return Tracing("this warm probe started without a tracer (its first job asked for none)")
    if job.get("trace") != first.get("trace"):
        return Tracing("this warm probe traces the files its first job named, not these")
    return tracing
