"""The probe's side of the wire format (`difftest.probe.protocol`), exercised in-process.

A probe plays each run under `CallInfo.from_call` and describes any failure
with `describe_failure`; both are plain Python, so the failures are raised
here on purpose. Code "from vLLM" is a function compiled into a module whose
`__name__` is `vllm....`, which is all `describe_failure` looks at.
"""

from __future__ import annotations

import io
import json
import os
import time
import types
from collections.abc import Callable
from typing import Any

import pytest

from difftest.probe import protocol
from difftest.probe.protocol import (
    CallInfo,
    DidNotFinish,
    RecordWriter,
    RunTimeout,
    describe_failure,
    step_record,
)

RESULT: protocol.RunResult = {
    "steps": [],
    "totals": {"num_drafts": 1},
    "outputs": {"a": [1]},
    "finish_reasons": {},
    "notes": {},
}


def module_function(module_name: str, source: str, filename: str) -> Callable[..., Any]:
    """`boom` from `source`, compiled as if it lived in module `module_name` (file `filename`)."""
    module = types.ModuleType(module_name)
    exec(compile(source, filename, "exec"), module.__dict__)
    return module.boom


VLLM_BOOM = module_function(
    "vllm.v1.core.sched.fake",
    "def boom():\n    raise KeyError('req-1')\n",
    "vllm/v1/core/sched/fake.py",
)
#: vLLM code calling back into the probe (the scripted model), which raises.
PROBE_CALLBACK = module_function(
    "difftest.probe.scheduler.fake",
    "def boom():\n    raise ValueError('script ran out')\n",
    "difftest/probe/scheduler/fake.py",
)
VLLM_CALLING_PROBE = module_function(
    "vllm.v1.worker.fake", "def boom(callback):\n    callback()\n", "vllm/v1/worker/fake.py"
)


def raise_here() -> protocol.RunResult:
    raise ValueError("bad value\nsecond line of the message")


def test_a_call_that_returns_is_ok_and_takes_what_its_clock_says(monkeypatch) -> None:
    """The duration is the clock's reading after the call less the one before (a stand-in clock:
    what is checked is what is recorded, not how fast the call was)."""
    ticks = iter([100.0, 100.25])
    monkeypatch.setattr(
        protocol, "time", types.SimpleNamespace(perf_counter=lambda: next(ticks))
    )  # this module's clock only
    call = CallInfo.from_call(lambda: RESULT, limit_s=5)
    assert (call.result, call.failure, call.status) == (RESULT, None, "ok")
    assert call.duration_s == 0.25


def test_a_call_that_raises_is_an_error_summarised_in_one_line() -> None:
    call = CallInfo.from_call(raise_here, limit_s=None)
    assert call.result is None and call.status == "error"
    failure = call.failure
    assert failure is not None
    assert (failure["kind"], failure["type"]) == ("exception", "ValueError")
    # `Type: message` as a traceback ends, first line only, the rest marked as cut.
    assert failure["summary"] == "ValueError: bad value ..."
    assert not failure["summary"].startswith("Traceback")
    assert failure["traceback"].startswith("Traceback (most recent call last)")
    assert failure["where"].endswith(
        f"{raise_here.__code__.co_filename.split('/')[-1]}:"
        f"{raise_here.__code__.co_firstlineno + 1} in raise_here"
    )


def test_summary_is_type_and_message() -> None:
    try:
        raise KeyError("req-1")
    except KeyError as exc:
        failure = describe_failure(exc)
    assert failure["summary"] == "KeyError: 'req-1'"
    assert describe_failure(RuntimeError())["summary"] == "RuntimeError"


def test_a_call_past_its_time_limit_is_a_timeout() -> None:
    finished: list[bool] = []

    def slow() -> protocol.RunResult:
        time.sleep(5)
        finished.append(True)
        return RESULT

    call = CallInfo.from_call(slow, limit_s=0.05)
    assert not finished, (
        "the call was interrupted at its limit, not waited for and then called late"
    )
    assert call.status == "timeout" and call.result is None
    assert (
        call.failure is not None
        and call.failure["kind"] == "timeout"
        and call.failure["type"] == "RunTimeout"
    )
    assert "0.05 s" in call.failure["summary"]


def test_the_time_limit_fires_again_in_the_same_process() -> None:
    """A probe keeps going after a run hit its limit: the next hung run must be stopped too, and a
    run after both must still complete (the fault kit's sched-hang hangs once per probe)."""

    def hung() -> protocol.RunResult:
        time.sleep(5)
        return RESULT

    first = CallInfo.from_call(hung, limit_s=0.05)
    second = CallInfo.from_call(hung, limit_s=0.05)
    after = CallInfo.from_call(lambda: RESULT, limit_s=0.05)
    assert (first.status, second.status, after.status) == ("timeout", "timeout", "ok")


def test_the_nonce_is_read_from_its_pipe_and_leaves_no_trace(monkeypatch) -> None:
    """A fresh probe's nonce comes over a pipe (`NONCE_FD_ENV` names its fd): after `take_nonce`
    neither variable is left for branch code to read, and the pipe is closed."""
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, b"s3cret-nonce\n")
    finally:
        os.close(write_end)
    monkeypatch.setenv(protocol.NONCE_FD_ENV, str(read_end))
    monkeypatch.setenv(protocol.NONCE_ENV, "stale-nonce")
    assert protocol.take_nonce() == "s3cret-nonce"
    assert protocol.NONCE_FD_ENV not in os.environ and protocol.NONCE_ENV not in os.environ
    with pytest.raises(OSError):
        os.fstat(read_end)  # closed by take_nonce (and so not leaked to what the probe starts)


def test_a_forked_probes_nonce_is_taken_from_the_environment_and_removed(monkeypatch) -> None:
    monkeypatch.delenv(protocol.NONCE_FD_ENV, raising=False)
    monkeypatch.setenv(protocol.NONCE_ENV, "forked-nonce")
    assert protocol.take_nonce() == "forked-nonce"
    assert protocol.NONCE_ENV not in os.environ


def test_the_time_limit_is_lifted_after_the_call() -> None:
    CallInfo.from_call(lambda: RESULT, limit_s=0.05)
    time.sleep(0.1)  # a leftover alarm would raise RunTimeout here


def test_a_driver_out_of_steps_did_not_finish() -> None:
    def stuck() -> protocol.RunResult:
        raise DidNotFinish("3 requests unfinished after 500 steps")

    call = CallInfo.from_call(stuck, limit_s=None)
    assert call.status == "error"
    assert call.failure is not None and call.failure["kind"] == "did-not-finish"
    assert call.failure["summary"] == "DidNotFinish: 3 requests unfinished after 500 steps"


@pytest.mark.parametrize(
    "call, origin, where",
    [
        (lambda: VLLM_BOOM(), "vllm", "vllm/v1/core/sched/fake.py:2 in boom"),
        (
            lambda: VLLM_CALLING_PROBE(PROBE_CALLBACK),
            "probe",
            "difftest/probe/scheduler/fake.py:2 in boom",
        ),
        (raise_here, "other", "in raise_here"),
    ],
    ids=["raised-in-vllm", "probe-callback-under-vllm", "raised-elsewhere"],
)
def test_origin_says_whose_code_raised(call: Callable[[], Any], origin: str, where: str) -> None:
    info = CallInfo.from_call(call, limit_s=None)
    assert info.failure is not None
    assert (info.failure["origin"], info.failure["where"].endswith(where)) == (origin, True)


def test_origin_without_a_probe_frame() -> None:
    try:
        VLLM_BOOM()
    except KeyError as exc:
        assert describe_failure(exc)["origin"] == "vllm"
    try:
        raise_here()
    except ValueError as exc:
        assert describe_failure(exc)["origin"] == "other"


def test_an_exception_that_was_never_raised_has_no_frame() -> None:
    failure = describe_failure(RunTimeout("late"))
    assert (failure["kind"], failure["where"], failure["origin"]) == ("timeout", "", "other")


def test_step_record_drops_requests_without_drafts() -> None:
    record = step_record(
        3, ["a", "b"], {"a": [1, 2], "b": []}, {}, {"a": [1, 9]}, {"a": [1, 9]}, {}, None
    )
    assert record["drafts"] == {"a": [1, 2]}
    assert record["step"] == 3 and record["stats"] is None
    assert set(record) == set(protocol.StepRecord.__annotations__)


def test_record_writer_stamps_every_record_and_counts_runs() -> None:
    stream = io.StringIO()
    writer = RecordWriter(stream, "n0nce")
    writer.header({"vllm": "0.32.0"}, import_s=1.23456, setup_s=0.5)
    scenario: protocol.JobScenario = {"name": "eos", "file": "eos.yaml", "data": {}, "runs": []}
    planned: protocol.PlannedRun = {"label": "order:a", "order": ["a"], "role": "batch"}
    writer.run(scenario, planned, CallInfo(RESULT, None, 0.25))
    writer.run(scenario, planned, CallInfo.from_call(raise_here, None))
    writer.trailer()
    records = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [r["kind"] for r in records] == ["header", "run", "run", "trailer"]
    assert {r["nonce"] for r in records} == {"n0nce"}
    assert records[0]["protocol"] == protocol.PROTOCOL_VERSION and records[0]["import_s"] == 1.235
    assert (records[1]["status"], records[1]["totals"], records[1]["role"]) == (
        "ok",
        {"num_drafts": 1},
        "batch",
    )
    assert (records[2]["status"], records[2]["totals"], records[2]["steps"]) == ("error", None, [])
    assert records[3]["runs"] == 2


# -- the persistent probe's loop (`serve_stream`): job after job on one session --------


class CountingSession:
    """A session that records what it played;
    the scheduler tier's real session is tested in tests/tiers."""

    def __init__(self, job: protocol.Job) -> None:
        self.work_dir = job["work_dir"]
        self.played: list[str] = []

    def header_info(self) -> dict[str, Any]:
        return {"import_s": 0.5, "session": "counting"}

    def play(self, scenario: protocol.JobScenario, run: protocol.PlannedRun) -> protocol.RunResult:
        self.played.append(f"{scenario['name']}/{run['label']}")
        if scenario["name"] == "raises":
            raise KeyError(run["label"])
        return {**RESULT, "notes": {"played": len(self.played)}}


def served_job(*names: str, work_dir: str = "w", entry: str = "scheduler") -> str:
    run: protocol.PlannedRun = {"label": "order:a", "order": ["a"], "role": "batch"}
    job = {
        "protocol": protocol.PROTOCOL_VERSION,
        "entry": entry,
        "work_dir": work_dir,
        "run_timeout_s": None,
        "scenarios": [{"name": n, "file": f"{n}.yaml", "data": {}, "runs": [run]} for n in names],
    }
    return json.dumps(job) + "\n"


def serve(
    jobs: str, start: Callable[[protocol.Job], Any] | None = None
) -> tuple[int, list[list[dict[str, Any]]], list[Any]]:
    """Run the loop on `jobs`; its exit code, each job's answer (header .. trailer)
    and the sessions started."""
    sessions: list[Any] = []

    def default_start(job: protocol.Job) -> CountingSession:
        sessions.append(CountingSession(job))
        return sessions[-1]

    channel = io.StringIO()
    code = protocol.serve_stream(io.StringIO(jobs), channel, "n0nce", start or default_start)
    answers: list[list[dict[str, Any]]] = []
    for record in (json.loads(line) for line in channel.getvalue().splitlines()):
        if record["kind"] == "header":
            answers.append([])
        answers[-1].append(record)
    return code, answers, sessions


def test_the_served_probe_answers_each_job_on_one_session() -> None:
    code, answers, sessions = serve(served_job("one") + "\n" + served_job("two", "raises"))
    assert code == 0 and len(sessions) == 1, "the session (vLLM imported) starts once"
    assert [[r["kind"] for r in a] for a in answers] == [
        ["header", "run", "trailer"],
        ["header", "run", "run", "trailer"],
    ]
    assert all(r["nonce"] == "n0nce" for a in answers for r in a)
    # Each answer stands alone: its own header, and a trailer counting only its own runs.
    assert [a[-1]["runs"] for a in answers] == [1, 2]
    assert answers[0][0]["import_s"] == 0.5 and answers[1][0]["info"] == {"session": "counting"}
    second = answers[1]
    assert (second[1]["status"], second[1]["notes"]) == ("ok", {"played": 2})
    assert (
        second[2]["status"] == "error" and second[2]["failure"]["summary"] == "KeyError: 'order:a'"
    )
    assert sessions[0].played == ["one/order:a", "two/order:a", "raises/order:a"]


def test_an_empty_job_is_answered_with_header_and_trailer() -> None:
    """The host's warm-up: the session starts, nothing is played."""
    code, answers, _ = serve(served_job())
    assert code == 0 and [[r["kind"] for r in a] for a in answers] == [["header", "trailer"]]


def test_a_session_that_cannot_start_exits_3() -> None:
    def fail(_job: protocol.Job) -> Any:
        raise ImportError("no vllm here")

    code, answers, _ = serve(served_job("one"), start=fail)
    assert (code, answers) == (3, [])


@pytest.mark.parametrize(
    "second, why",
    [
        ("{not json\n", "not JSON"),
        (json.dumps({"protocol": 1}) + "\n", "old protocol"),
        (served_job("x", work_dir="other"), "other work_dir"),
    ],
)
def test_a_job_the_probe_cannot_serve_ends_it_with_2(second: str, why: str) -> None:
    code, answers, _ = serve(served_job("one") + second + served_job("never"))
    assert code == 2, why
    assert len(answers) == 1 and answers[0][-1]["kind"] == "trailer", (
        "the answers before it are whole"
    )


def test_only_the_fork_servers_own_refusal_reads_as_one() -> None:
    from difftest.probe.protocol import EXIT_NOT_SHAREABLE, NOT_SHAREABLE_PREFIX
    from difftest.run.probes.forking import refusal

    assert (
        refusal(EXIT_NOT_SHAREABLE, f"loading\n{NOT_SHAREABLE_PREFIX}numpy would come from /x\n")
        == "numpy would come from /x"
    )
    assert not refusal(EXIT_NOT_SHAREABLE, "the branch's own os._exit(86)\n")
    assert not refusal(1, f"{NOT_SHAREABLE_PREFIX}numpy would come from /x")
    assert not refusal(EXIT_NOT_SHAREABLE, "")
