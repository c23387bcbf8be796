"""A warm probe: one probe process per branch and tier that plays job after job over a pipe.

`run` starts one probe process per branch and tier for all its scenarios;
`fuzz` asks for one small job at a time, thousands of times, and importing
vLLM (~10 s) per job would cost more than everything else together. So the
process is started once (`python -m difftest.probe --serve`) and kept: each job
is one JSON line on its stdin, each answer is the job's header, run records and
trailer on its stdout, checked by `delivery.check_lines` exactly as a
RUNS.jsonl from `run` is.

The time limits are the config's: the first job of a process may take
`start_s` more (the import); every job may take `run_s` per planned run plus a
little slack. A process that dies or hangs costs the runs of that job (each an
`error` with the reason, as in `run`) and is started afresh for the next job.

A branch whose probe dies again and again would cost a restart per job (a
shrinking search tries hundreds): after `max_starts` processes the server stops
starting them, and every later job reads `error` at once, saying why.

Given a fork server (`runner.SharedServer`), each process is forked from it with its stdin and
stdout as pipes (`ForkServer.spawn_with_pipes`): the shared libraries are imported once for every
branch, not once per branch and restart. A child that refuses (its branch would see other shared
libraries) or whose server fails under it is started again fresh, and that job played again.

The interface is deliberately small (`play`, `close`, `starts`): how a process
is started is this module's business alone (`WarmProcess`; a cluster node's actor holds one,
`run.cluster.warm`), and every answer is checked here, on the host, wherever it came from.
`play` is safe to call from several threads; they take turns.
"""

from __future__ import annotations

import json
import os
import secrets
import selectors
import subprocess
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any, Protocol

from difftest.core import tally
from difftest.core.verdicts import one_line
from difftest.probe.protocol import Job
from difftest.run.probes import descendants
from difftest.run.probes.environ import probe_environ
from difftest.run.probes.forking import ForkedPipes, ForkServer, refusal
from difftest.run.probes.prebuilt import ensure_prebuilt
from difftest.run.probes.read_records import check_lines
from difftest.run.probes.runner import (
    BranchRun,
    ProbesStopped,
    SharedServer,
    hold_forked_probe,
    kill_group,
    planned_count,
    probe_process_ended,
    start_probe_process,
)
from difftest.run.probes.scratch import Scratch

#: Seconds a closing probe gets to exit after its stdin is closed.
CLOSE_GRACE_S = 5.0
#: Lines of the probe's log quoted when it fails.
_LOG_TAIL = 40


@dataclass(frozen=True)
class WarmProbeLimits:
    #: Extra seconds for the first job of a process: importing vLLM, building the first configs.
    start_s: float
    #: Seconds per planned run of a job.
    run_s: float
    #: Seconds a job may take beyond `run_s` per planned run (writing and reading the records).
    slack_s: float = 10.0
    #: Processes started at most (restarts cost a vLLM import each); then every job reads `error`.
    max_starts: int = 20


@dataclass(frozen=True)
class Answer:
    """A warm probe's answer to one job as its process gave it, before anything of it is checked."""

    #: The lines it wrote up to and including its trailer.
    lines: list[str]
    #: `trailer` (it answered), `eof` (it exited), `timeout` (killed), or `refused` (no process was
    #: started: it died `max_starts` times).
    ending: str
    #: The process's exit status when it ended with this job (0 while it keeps serving).
    code: int | None
    #: Why the job failed as a whole (None when it was answered).
    error: str | None
    nonce: str
    log_tail: str = ""
    started_at: float = 0.0
    duration_s: float = 0.0
    ended_at: float = 0.0


class WarmProbe:
    """One branch's warm probe for one tier, as the fuzz search sees it: each job's answer checked
    here, by the reader `run` uses, wherever the process that gave it runs (`WarmProcess` on this
    machine; a Ray actor on a cluster node, `run.cluster.warm`)."""

    def __init__(
        self,
        branch: str,
        python: Path,
        tier: str,
        work_dir: Path,
        limits: WarmProbeLimits,
        parallel: int = 1,
        process: Answerer | None = None,
        fork: SharedServer | None = None,
    ) -> None:
        self.branch = branch
        self.tier = tier
        self.process: Answerer = process or WarmProcess(
            branch, python, tier, work_dir, limits, parallel, fork=fork
        )
        self.log_path = work_dir / f"{branch}-{tier}-server.log"

    @property
    def starts(self) -> int:
        """Processes started so far (1 + restarts after a crash or hang)."""
        return self.process.starts

    @property
    def limits(self) -> WarmProbeLimits:
        """The time limits and restarts its process keeps to."""
        return self.process.limits

    @limits.setter
    def limits(self, limits: WarmProbeLimits) -> None:
        self.process.limits = limits

    def __enter__(self) -> WarmProbe:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.process.close()

    def play(self, job: Job, keep: Path | None = None) -> BranchRun:
        """One job: exactly one ProbeRun per planned run, measured or an `error` with its reason.

        With `keep`, the job and the probe's answer are also written there, as `run` writes a
        probe's job and RUNS.jsonl (named in the result with the nonce), so the evidence can cite
        them.
        """
        answer = self.process.answer(job)
        result = self._check(job, answer)
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
            job_path = keep / f"{self.branch}-{self.tier}-job.json"
            records_path = keep / f"{self.branch}-{self.tier}-runs.jsonl"
            job_path.write_text(json.dumps(job, indent=1))
            records_path.write_text("".join(line + "\n" for line in answer.lines), encoding="utf-8")
            result = replace(result, job_path=job_path, records_path=records_path)
        return result

    def _check(self, job: Job, answer: Answer) -> BranchRun:
        result = BranchRun(
            branch=self.branch,
            tier=self.tier,
            log_path=self.log_path,
            started_at=answer.started_at,
            node=getattr(self.process, "node", None),
        )
        if answer.ending == "refused":
            nothing = check_lines([], "", job, self.tier, exited_cleanly=False)
            return replace(
                result,
                error=answer.error,
                runs=nothing.runs(answer.error),
                coverage=nothing.coverage(),
            )
        exited_cleanly = answer.ending == "trailer"
        delivery = check_lines(
            answer.lines, answer.nonce, job, self.tier, exited_cleanly=exited_cleanly
        )
        timed_out = answer.ending == "timeout"
        return replace(
            result,
            error=answer.error,
            log_tail=answer.log_tail,
            timed_out=timed_out,
            nonce=answer.nonce,
            exited_cleanly=exited_cleanly,
            header=delivery.header,
            runs=delivery.runs(answer.error),
            coverage=delivery.coverage(),
            duration_s=answer.duration_s,
            # A warm probe's "process" for one job is its answer: a trailer is a clean end of it.
            outcome=delivery.outcome(
                exit_code=answer.code, timed_out=timed_out, duration_s=answer.duration_s
            ),
            ended_at=answer.ended_at,
        )


class Answerer(Protocol):
    """What gives a warm probe's answers: a process here, or an actor on a cluster node."""

    limits: WarmProbeLimits

    @property
    def starts(self) -> int: ...

    def answer(self, job: Job) -> Answer: ...

    def close(self) -> None: ...


class WarmProcess:
    """The probe process behind a warm probe, on this machine (a cluster node's actor holds one
    too). Safe to call from several threads: they take turns."""

    def __init__(
        self,
        branch: str,
        python: Path,
        tier: str,
        work_dir: Path,
        limits: WarmProbeLimits,
        parallel: int = 1,
        environ: dict[str, str] | None = None,
        fork: SharedServer | None = None,
    ) -> None:
        self.branch = branch
        self.python = python
        #: Where processes are forked from (None: each starts fresh).
        self.fork = fork
        #: Why this branch's processes start fresh after all ("" while they are forked).
        self.fresh_because = ""
        #: How the current (or last) process started: "forked", "fresh" ("" before the first).
        self.launch = ""
        self.tier = tier
        self.work_dir = work_dir
        self.limits = limits
        self.parallel = parallel
        self.environ = environ
        self.log_path = work_dir / f"{branch}-{tier}-server.log"
        #: Processes started so far (1 + restarts after a crash or hang).
        self.starts = 0
        self._proc: subprocess.Popen[bytes] | ForkedPipes | None = None
        self._nonce = ""
        self._token = ""
        self._buffer = bytearray()
        self._log_offset = 0
        self._answered = 0
        self._last_death = ""
        #: The fork server the current process was forked from (None: it started fresh).
        self._server: ForkServer | None = None
        #: The server the process that ended last was forked from (None: it started fresh).
        self._ended_server: ForkServer | None = None
        self._lock = threading.Lock()

    def answer(self, job: Job) -> Answer:
        with self._lock:
            answer = self._answer(job)
            if answer.ending == "eof" and self._forked_in_vain(answer.code):
                answer = self._answer(job)  # from a fresh process this time
            return answer

    def _forked_in_vain(self, code: int | None) -> bool:
        """The process that just ended was forked and refused its branch (it would see other
        shared libraries than a fresh one), or its server failed under it: not the branch's doing.
        Its processes start fresh from now on; the failed start is not counted."""
        server, self._ended_server = self._ended_server, None
        if server is None:
            return False
        why = refusal(code, self._log_tail()) or (
            "" if server.usable else server.failure or "the fork server ended under it"
        )
        if not why:
            return False
        self.fresh_because = why
        self.starts -= 1
        return True

    def _answer(self, job: Job) -> Answer:
        started_at = time.time()
        started = time.monotonic()
        if self._proc is None and self.starts >= self.limits.max_starts:
            refused = (
                f"not started again: the probe stopped {self.starts} times "
                f"(last: {self._last_death})"
            )
            return Answer([], "refused", None, refused, "", started_at=started_at)
        if self._proc is None:
            self._spawn(job)
        assert self._proc is not None and self._proc.stdin is not None
        limit = self.limits.run_s * planned_count(job) + self.limits.slack_s
        if self._answered == 0:
            limit += self.limits.start_s
        try:
            self._proc.stdin.write(json.dumps(job).encode() + b"\n")
            self._proc.stdin.flush()
            lines, ending = self._read_answer(time.monotonic() + limit)
        except BrokenPipeError:
            lines, ending = [], "eof"
        error: str | None = None
        log_tail = ""
        code: int | None = 0
        nonce = self._nonce
        if ending == "timeout":
            self._stop()
            error = (
                f"probe did not answer within {limit:.0f} s (timeouts.run_s per run; raise it if "
                "the branch is just slow)"
            )
            self._last_death = error
            code = None
        elif ending == "eof":
            code = self._stop(grace_s=CLOSE_GRACE_S)
            log_tail = self._log_tail()
            error = f"probe exited with code {code}: {one_line(log_tail or 'no output')}"
            self._last_death = error
        else:
            self._answered += 1
        return Answer(
            lines,
            ending,
            code,
            error,
            nonce,
            log_tail=log_tail,
            started_at=started_at,
            duration_s=round(time.monotonic() - started, 4),
            ended_at=time.time(),
        )

    def close(self) -> None:
        """Let the probe exit at the end of its input; stop it if it does not. A probe still busy
        with a job (closing after Ctrl-C) is killed at once; that job reads `error`."""
        if not self._lock.acquire(blocking=False):
            proc = self._proc
            if proc is not None and proc.poll() is None:
                kill_group(proc, wait=False)
            self._lock.acquire()
        try:
            self._close()
        finally:
            self._lock.release()

    def _close(self) -> None:
        proc = self._proc
        if proc is None:
            return
        try:
            assert proc.stdin is not None
            proc.stdin.close()
        except OSError:
            pass
        self._stop(grace_s=CLOSE_GRACE_S)

    # -- the process ---------------------------------------------------------

    def _spawn(self, job: Job) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        # What every job of this probe reads (its model folder), built before it starts; a build
        # that fails leaves the probe to fail on its own, saying why, as a fresh probe would.
        try:
            seed = ensure_prebuilt(job, self.python).vllm_cache
        except (OSError, subprocess.SubprocessError, ValueError):
            seed = None
        self.starts += 1
        self._nonce = secrets.token_hex(16)
        self._token = descendants.new_token()
        self._buffer = bytearray()
        self._answered = 0
        self._ended_server = None
        env = {
            **(self.environ or probe_environ(self.parallel)),
            descendants.TOKEN_ENV: self._token,
        }
        with open(self.log_path, "ab") as log:
            log.write(
                (
                    f"--- difftest: probe process {self.starts} "
                    f"for {self.branch} ({self.tier}) ---\n"
                ).encode()
            )
            self._log_offset = log.tell()
        self._proc = self._forked(env, seed)
        if self._proc is not None:
            self.launch = "forked"
            return
        self.launch = "fresh"
        with open(self.log_path, "ab") as log:
            tally.count("warm-probe", branch=self.branch, tier=self.tier)
            self._proc = start_probe_process(
                [str(self.python), "-m", "difftest.probe", "--serve"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                bufsize=0,
                # As in `runner.run_probe`: not the caller's folder, whose difftest would shadow the
                # env's probe.
                cwd=self.work_dir,
                env=env,
                nonce=self._nonce,
                start_new_session=True,
                scratch=Scratch.create(seed),
            )

    def _forked(self, env: dict[str, str], seed: Path | None) -> ForkedPipes | None:
        """A process forked from the fork server, its stdin and stdout piped here; None (it starts
        fresh) without a usable server, or once this branch's forks were refused."""
        if self.fork is None or self.fresh_because:
            return None
        server, note = self.fork.get()
        if server is None or not server.usable:
            self.fresh_because = note or (server.failure if server else "") or "no fork server"
            return None
        try:
            proc = server.spawn_with_pipes(
                self.python,
                ["--serve"],  # the arguments after `python -m difftest.probe`
                env,
                self.work_dir,
                self.log_path,
                self._nonce,
                seed,
            )
        except OSError as exc:
            self.fresh_because = str(exc)
            return None
        try:
            hold_forked_probe(proc)
        except ProbesStopped:
            kill_group(proc, wait=False)
            for stream in (proc.stdin, proc.stdout):
                _close_quietly(stream)
            raise
        self._server = server
        tally.count("warm-probe-forked", branch=self.branch, tier=self.tier)
        return proc

    def _stop(self, grace_s: float = 0.0) -> int | None:
        """Kill the process group (if still running after `grace_s`) and forget the process; its
        exit code."""
        proc, self._proc = self._proc, None
        if proc is None:
            return None
        self._ended_server, self._server = self._server, None
        try:
            proc.wait(timeout=grace_s)  # a probe that closed its output is exiting: let it say how
        except subprocess.TimeoutExpired:
            pass
        if proc.poll() is None:
            kill_group(proc, wait=False)
        code = proc.wait()
        kill_group(proc, wait=False)  # what is left of its group
        probe_process_ended(proc)
        descendants.end_descendants(self._token)  # and what left the group
        for stream in (proc.stdin, proc.stdout):
            _close_quietly(stream)
        return code

    def _read_answer(self, deadline: float) -> tuple[list[str], str]:
        """Lines up to and including this probe's trailer; the ending: `trailer`, `eof` or
        `timeout`."""
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        lines: list[str] = []
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            while True:
                while (end := self._buffer.find(b"\n")) >= 0:
                    raw = bytes(self._buffer[:end])
                    del self._buffer[: end + 1]
                    lines.append(raw.decode("utf-8", errors="replace"))
                    if self._is_trailer(raw):
                        return lines, "trailer"
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return lines, "timeout"
                if not selector.select(remaining):
                    continue
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    if self._buffer:
                        lines.append(bytes(self._buffer).decode("utf-8", errors="replace"))
                        self._buffer.clear()
                    return lines, "eof"
                self._buffer += chunk

    def _is_trailer(self, raw: bytes) -> bool:
        if b'"trailer"' not in raw:
            return False
        try:
            record = json.loads(raw)
        except ValueError:
            return False
        return (
            isinstance(record, dict)
            and record.get("kind") == "trailer"
            and record.get("nonce") == self._nonce
        )

    def _log_tail(self) -> str:
        """The last lines the current (just ended) process wrote to the log."""
        try:
            with open(self.log_path, "rb") as log:
                log.seek(self._log_offset)
                text = log.read().decode("utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-_LOG_TAIL:])


def _close_quietly(stream: IO[Any] | None) -> None:
    if stream is None:
        return
    try:
        stream.close()
    except OSError:
        pass
