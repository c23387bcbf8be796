"""Ctrl-C, SIGTERM and SIGKILL of a real `difftest run` whose branch hangs: no probe outlives it.

The branch's scheduler module writes its process id to a marker file and
sleeps for an hour when imported, so its probe hangs the way a deadlocked
branch does. difftest runs as a real subprocess (the console script), is
signalled once the probe is hanging, and the probe's process must be gone.
`probe_s` is left at 600 s, so a difftest that waited for the probe's timeout
would trip the test's own wait instead.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from difftest.reports import write_report_set
from tests.e2e.cli_helpers import CONTROL, SCHEDULER, faulty_config
from tests.mailbox import post
from tests.patching import prepend
from tests.processes import alive

pytestmark = pytest.mark.slow

DIFFTEST = Path(sys.executable).parent / "difftest"
#: A hang guard, not a speed target (how fast difftest exits is bench/'s to show): once signalled,
#: difftest that has not exited after this long is taken to be hung, and the test fails saying so
#: instead of waiting for the probe's own 600 s limit. It stays far below that limit, so that a
#: difftest that only waits for its probe to time out is caught as hung.
EXIT_WAIT_S = 30


def wait_for(path: Path, process: subprocess.Popen, limit_s: float = 300) -> int:
    """The pid of the process that wrote `path`, once it is hanging."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return int(path.read_text().split()[0])
        assert process.poll() is None, process.communicate()
        time.sleep(0.2)
    raise AssertionError("the planted hang never started")


@pytest.mark.parametrize(
    "signum, code, launch, ignored",
    [
        (signal.SIGINT, 130, ["main", "hang"], False),
        (signal.SIGTERM, 130, ["main", "hang"], False),
        (signal.SIGKILL, -signal.SIGKILL, ["main", "hang"], False),
        # Two branches: their probes are forked from the fork server (the default). --no-fork:
        # fresh.
        (signal.SIGINT, 130, ["--no-fork", "hang"], False),
        (signal.SIGKILL, -signal.SIGKILL, ["hang"], False),
        # Started the way a non-interactive shell starts `difftest run ... &`: SIGINT inherited
        # ignored. The hang named alone: the baseline (main) is measured beside it all the same.
        (signal.SIGINT, 130, ["hang"], True),
    ],
)
def test_no_probe_outlives_an_interrupted_run(
    tmp_path, fixture_repo, signum, code, launch, ignored
):
    marker = tmp_path / "probe.pid"
    hang = f"import os, time; {post(marker, repr('<sender>'))}; time.sleep(3600)"
    config = faulty_config(
        tmp_path, "hang", prepend(tmp_path / "hang.patch", fixture_repo, SCHEDULER, hang)
    )
    out = tmp_path / "out"
    # What an earlier run left: it must not look like this run's results once this one is
    # interrupted.
    (out / "probe").mkdir(parents=True)
    (out / "probe" / "hang-scheduler-runs.jsonl").write_text("{}\n")
    write_report_set(out, {"report.md": "## an older report\n"})  # difftest's own, so listed
    process = subprocess.Popen(
        [
            str(DIFFTEST),
            "run",
            "-c",
            str(config),
            "--tier",
            "scheduler",
            "-k",
            CONTROL,
            "--out",
            str(out),
            *launch,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if ignored else None,
    )
    probe = wait_for(marker, process)
    assert alive(probe)
    process.send_signal(signum)
    try:
        _, err = process.communicate(timeout=EXIT_WAIT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        os.kill(probe, signal.SIGKILL)
        raise AssertionError(
            f"difftest hung: it had not exited {EXIT_WAIT_S} s after {signum!r}"
        ) from None
    assert process.returncode == code, err
    if signum != signal.SIGKILL:
        # main's probe may still be running when the hang starts: it is stopped too.
        assert re.search(r"interrupted; [12] running probe\(s\) stopped", err), err
        assert ("fork server ready" in err) == ("--no-fork" not in launch), err
    # Cleared when the run started, and nothing half-measured was written after it.
    assert not (out / "report.md").exists() and not (out / "evidence.json").exists()
    deadline = time.monotonic() + 5  # the kernel delivers the parent-death signal asynchronously
    while alive(probe) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(probe), f"probe {probe} outlived difftest"


@pytest.mark.parametrize("command", ["tests-tier", "fuzz"])
def test_ctrl_c_stops_the_tests_tier_and_fuzz_at_once(tmp_path, fixture_repo, command):
    """The tests tier's pytest session and fuzz's warm probes are stopped as the probe tiers' are:
    the branch's worker (or warm probe) hangs importing its code, SIGINT ends difftest with 130 and
    it."""
    marker = tmp_path / "probe.pid"
    hang = f"import os, time; {post(marker, repr('<sender>'))}; time.sleep(3600)"
    target = "vllm/v1/metrics/stats.py" if command == "tests-tier" else SCHEDULER
    patch = prepend(tmp_path / "hang.patch", fixture_repo, target, hang)
    extra = (
        {"tests": {"select": ["tests/v1/metrics/test_stats.py"]}}
        if command == "tests-tier"
        else {"scenarios_dir": str(tmp_path)}
    )
    config = faulty_config(tmp_path, "hang", patch, **extra)
    out = tmp_path / "out"
    argv = (
        ["run", "-c", str(config), "--tier", "tests", "--out", str(out)]
        if command == "tests-tier"
        else ["fuzz", "-c", str(config), "--examples", "2", "--out", str(out)]
    )
    process = subprocess.Popen(
        [str(DIFFTEST), *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    probe = wait_for(marker, process)
    process.send_signal(signal.SIGINT)
    try:
        _, err = process.communicate(timeout=EXIT_WAIT_S)  # a hang guard only, as above
    except subprocess.TimeoutExpired:
        process.kill()
        os.kill(probe, signal.SIGKILL)
        raise AssertionError(
            f"difftest hung: it had not exited {EXIT_WAIT_S} s after SIGINT"
        ) from None
    assert process.returncode == 130, err
    deadline = time.monotonic() + 5  # the kernel delivers the parent-death signal asynchronously
    while alive(probe) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(probe), f"{command}: process {probe} of the hanging branch outlived difftest"
