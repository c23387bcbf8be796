"""The host's side of a probe process: its environment, its descendants, and following its records.

Real processes and files, no vLLM: a `sleep` child stands in for what branch code may start, and a
records file is written, grown and truncated as a probe (or a hostile branch) would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from difftest.probe.protocol import NONCE_ENV, NONCE_FD_ENV, STUCK_PREFIX
from difftest.run.probes import descendants
from difftest.run.probes.environ import PASS_ENV, passed_environ, probe_environ
from difftest.run.probes.runner import _stuck, _Watch
from tests.processes import alive


def test_only_allow_listed_variables_reach_a_probe(monkeypatch):
    monkeypatch.setenv("VLLM_SOME_SWITCH", "1")
    monkeypatch.setenv("CI_SECRET_TOKEN", "s3cret")
    monkeypatch.setenv("DIFFTEST_FAULT_EXTRA", "x")
    monkeypatch.setenv(NONCE_ENV, "n" * 32)
    passed = passed_environ()
    assert passed["VLLM_SOME_SWITCH"] == "1" and "PATH" in passed
    assert (
        "CI_SECRET_TOKEN" not in passed
        and "DIFFTEST_FAULT_EXTRA" not in passed
        and NONCE_ENV not in passed
    )
    monkeypatch.setenv(PASS_ENV, "DIFFTEST_FAULT_EXTRA, OTHER_MISSING")
    assert passed_environ()["DIFFTEST_FAULT_EXTRA"] == "x"
    env = probe_environ()
    assert "CI_SECRET_TOKEN" not in env and env["HF_HUB_OFFLINE"] == "1" and NONCE_ENV not in env


def test_every_process_carrying_a_probes_token_is_ended_even_outside_its_session():
    token = descendants.new_token()
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)"],
        start_new_session=True,
        env={**os.environ, descendants.TOKEN_ENV: token},
    )
    other = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)"],
        env={**os.environ, descendants.TOKEN_ENV: descendants.new_token()},
    )
    try:
        deadline = (
            time.monotonic() + 30
        )  # a hang guard only: the child's environment is readable at once
        while descendants.TOKEN_ENV.encode() not in Path(f"/proc/{child.pid}/environ").read_bytes():
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert descendants.end_descendants(token) == [child.pid]
        child.wait(timeout=30)
        assert not alive(child.pid) and alive(other.pid)
        assert descendants.end_descendants("") == []
    finally:
        for proc in (child, other):
            proc.kill()
            proc.wait()


def _record(kind: str, **fields) -> str:
    return json.dumps({"kind": kind, "nonce": "n", **fields}) + "\n"


def test_records_are_followed_as_they_grow_and_a_truncated_file_costs_nothing(tmp_path):
    """A branch that truncates its records file must not crash the host (defect 5 of issue 19)."""
    out = tmp_path / "runs.jsonl"
    seen: list[tuple[int, str]] = []
    watch = _Watch(out, "b", 3, lambda _b, n, _t, scenario, _l: seen.append((n, scenario)), 60, 5)
    watch._read_new()  # no file yet
    out.write_text(_record("header") + _record("run", scenario="s1", label="a"))
    watch._read_new()
    with out.open("a") as stream:
        stream.write(_record("run", scenario="s2", label="a")[:10])  # half a line: not counted yet
    watch._read_new()
    assert seen == [(1, "s1")]
    out.write_text("")  # truncated by the branch
    watch._read_new()
    out.write_text(_record("run", scenario="s3", label="a") + _record("trailer", runs=1))
    watch._read_new()
    assert seen[-1] == (1, "s3") and watch._trailer_at is not None


def test_what_a_stuck_probe_said_is_kept_in_one_line(tmp_path):
    log = tmp_path / "probe.log"
    log.write_text(
        "vLLM says hello\n"
        f"{STUCK_PREFIX}non-daemon thread 'stats-flusher' running "
        "vllm.v1.spec_decode.metrics._flush_forever\n"
        "Thread 0x00007f (most recent call first):\n"
        '  File "/env/overlay/vllm/v1/spec_decode/metrics.py", line 5 in _flush_forever\n'
        '  File "/usr/lib/python3.11/threading.py", line 975 in run\n'
        "Current thread 0x00007e (most recent call first):\n"
        '  File "/usr/lib/python3.11/threading.py", line 1590 in _shutdown\n'
    )
    said = _stuck(log.read_text().splitlines())
    assert said.startswith(
        "non-daemon thread 'stats-flusher' running vllm.v1.spec_decode.metrics._flush_forever"
    )
    assert 'metrics.py", line 5 in _flush_forever' in said and "line 1590 in _shutdown" in said


@pytest.mark.parametrize("variable", [NONCE_ENV, NONCE_FD_ENV])
def test_the_nonce_never_passes_through_from_the_callers_environment(monkeypatch, variable):
    monkeypatch.setenv(variable, "7")
    assert variable not in probe_environ()
