"""Probes forked from the warm fork server are the probes fresh interpreters give (slow: real vLLM).

The server is started with the FIRST branch's interpreter (main), so a child
that did not really switch to its own branch would measure main's code: the
PR-style branches' runs, which differ from main's, must come out exactly as
their fresh probes measure them, and each probe must report vLLM from its own
environment's overlay.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from difftest import tiers
from difftest.core.records import ProbeRun
from difftest.run.pipeline import make_job
from difftest.run.probes.runner import (
    KEEP_FORK_SERVERS_ENV,
    allow_probes,
    close_kept_fork_servers,
    run_branches,
    run_probe,
    share_key_of,
    stop_all_probes,
    warm_fork_server,
)
from tests.mailbox import post

pytestmark = pytest.mark.slow

TIER = tiers.get("scheduler")
BRANCHES = ["main", "pr-56137-style", "pr-56195-style"]


@pytest.fixture(autouse=True)
def _no_kept_servers(monkeypatch) -> None:
    """These tests start, stop and count this process's fork servers: none is kept from another
    test or for one (the suite keeps them otherwise, tests/conftest.py)."""
    close_kept_fork_servers()
    monkeypatch.delenv(KEEP_FORK_SERVERS_ENV)


def comparable(run: ProbeRun) -> str:
    """A scheduler-tier run without what a clock decides: its duration, vLLM's throughput line."""
    return json.dumps(run.model_dump(mode="json", exclude={"duration_s", "notes"}), sort_keys=True)


def test_forked_probes_measure_what_fresh_probes_measure_each_on_its_own_branch(
    workspace, shipped_scenarios, probe_runs, tmp_path
) -> None:
    job = make_job(TIER, shipped_scenarios("scheduler"), run_timeout_s=120)
    targets = [(name, workspace.branch(name).env.python) for name in BRANCHES]
    forked = run_branches(targets, job, TIER.name, tmp_path, 600, jobs=2, fork=True)
    for name, python in targets:
        delivered = forked[name]
        assert (delivered.launch, delivered.launch_note, delivered.error) == ("forked", "", None), (
            delivered.log_tail
        )
        assert delivered.header is not None and delivered.header.origin is not None
        assert delivered.header.origin.vllm_dir == os.path.realpath(
            python.parent.parent / "overlay" / "vllm"
        )
        assert delivered.header.origin.executable == str(python)
        assert [comparable(r) for r in delivered.runs] == [
            comparable(r) for r in probe_runs("scheduler", name)
        ]
    # The branches measure differently, so a child running main's code would have shown.
    for name in BRANCHES[1:]:
        assert [comparable(r) for r in forked[name].runs] != [
            comparable(r) for r in forked["main"].runs
        ]


def test_where_forking_is_unsafe_every_probe_starts_fresh_and_says_why(
    workspace, shipped_scenarios, tmp_path, monkeypatch
) -> None:
    # OpenBLAS then starts its thread pool when NumPy is imported: a process with threads is not
    # forked.
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "2")
    control = [s for s in shipped_scenarios("scheduler") if s.name == "eos-on-bonus"]
    job = make_job(TIER, control, run_timeout_s=120)
    logged: list[str] = []
    delivered = run_branches(
        [("main", workspace.branch("main").env.python)],
        job,
        TIER.name,
        tmp_path,
        600,
        1,
        fork=True,
        log=logged.append,
    )["main"]
    assert (
        delivered.launch == "fresh"
        and "threads run after the shared imports" in delivered.launch_note
    )
    assert any(
        "probes start in fresh interpreters" in line and "threads" in line for line in logged
    )
    assert delivered.error is None and {r.status for r in delivered.runs} == {"ok"}


def copy_env(env: Path, dest: Path) -> Path:
    """A hard-linked copy of a branch environment, to tamper with (files are replaced, never
    edited)."""
    subprocess.run(["cp", "-al", str(env), str(dest)], check=True)
    return dest


def replace(path: Path, text: str) -> None:
    path.unlink()
    path.write_text(text)


def test_a_probe_whose_vllm_is_not_its_branch_overlay_is_not_trusted(
    workspace, shipped_scenarios, tmp_path
) -> None:
    """An environment whose path finds the base's vLLM before its overlay measures the wrong
    code."""
    env = copy_env(workspace.branch("pr-56195-style").env.path, tmp_path / "env")
    (pth,) = env.glob("lib/python3*/site-packages/difftest_overlay.pth")
    lines = pth.read_text().splitlines()
    replace(pth, "\n".join([lines[-1], *lines[:-1]]) + "\n")  # the base's site-packages first
    control = [s for s in shipped_scenarios("scheduler") if s.name == "eos-on-bonus"]
    job = make_job(TIER, control, run_timeout_s=120)
    for fork in (True, False):
        delivered = run_branches(
            [("tampered", env / "bin" / "python")],
            job,
            TIER.name,
            tmp_path / str(fork),
            600,
            1,
            fork=fork,
        )["tampered"]
        assert delivered.runs and {r.status for r in delivered.runs} == {"error"}
        reason = delivered.runs[0].error or ""
        assert "imported vLLM from" in reason and "not from its branch environment" in reason, (
            reason
        )


def test_a_branch_that_would_import_a_shared_library_from_elsewhere_is_started_fresh(
    workspace, shipped_scenarios, tmp_path
) -> None:
    """The child checks every shared library against its own branch's path before importing vLLM."""
    env = copy_env(workspace.branch("main").env.path, tmp_path / "env")
    shutil.copytree(
        workspace.base.site_packages / "cpuinfo", env / "overlay" / "cpuinfo"
    )  # same code, another file
    control = [s for s in shipped_scenarios("scheduler") if s.name == "eos-on-bonus"]
    job = make_job(TIER, control, run_timeout_s=120)
    targets = [("main", workspace.branch("main").env.python), ("shadowing", env / "bin" / "python")]
    delivered = run_branches(targets, job, TIER.name, tmp_path, 600, 2, fork=True)
    assert delivered["main"].launch == "forked"
    shadowing = delivered["shadowing"]
    assert shadowing.launch == "fresh" and "cpuinfo would come from" in shadowing.launch_note, (
        shadowing.launch_note
    )
    assert shadowing.error is None and {r.status for r in shadowing.runs} == {"ok"}


def test_a_forked_probe_past_its_time_limit_is_killed_and_reads_timeout(
    workspace, shipped_scenarios, tmp_path
) -> None:
    """A branch whose `schedule()` never returns (a copy of main's environment, its scheduler
    edited): the forked child is killed at the limit and its run reads `error`, not a run cut
    short of what it measured. The hang is the branch's, so no machine is fast enough to finish."""
    env = copy_env(workspace.branch("main").env.path, tmp_path / "env")
    scheduler = env / "overlay" / "vllm" / "v1" / "core" / "sched" / "scheduler.py"
    text = scheduler.read_text()
    marker = "        self.current_step += 1\n"
    assert marker in text
    replace(
        scheduler,
        text.replace(marker, marker + "        import time\n        time.sleep(3600)\n", 1),
    )
    for cached in scheduler.parent.glob("__pycache__/scheduler.*.pyc"):
        cached.unlink()  # a link to main's compiled scheduler: never the code that runs here
    control = [s for s in shipped_scenarios("scheduler") if s.name == "eos-on-bonus"]
    job = make_job(TIER, control, run_timeout_s=120)
    server, why = warm_fork_server(workspace.branch("main").env.python, TIER.name, tmp_path, 600, 1)
    assert server is not None, why
    try:
        delivered = run_probe(
            "hanging", env / "bin" / "python", job, TIER.name, tmp_path, 15.0, server=server
        )
    finally:
        server.close()
    assert delivered.launch == "forked" and delivered.timed_out, delivered.launch_note
    assert delivered.error and "timed out" in delivered.error
    assert delivered.header is not None  # it got as far as its session: the hang is in its runs
    assert {r.status for r in delivered.runs} == {"error"}


def test_a_forked_engine_probe_measures_what_a_fresh_one_measures(
    workspace, shipped_scenarios, probe_runs, tmp_path
) -> None:
    """The real in-process engine (model, KV cache, OpenMP) in a child forked after torch was
    imported."""
    engine = tiers.get("engine")
    job = make_job(engine, shipped_scenarios("engine"), run_timeout_s=120)
    python = workspace.branch("main").env.python
    delivered = run_branches([("main", python)], job, engine.name, tmp_path, 900, 1, fork=True)[
        "main"
    ]
    assert (delivered.launch, delivered.error) == ("forked", None), delivered.log_tail
    # What the engine tier judges. Its steps are not compared: where a grammar compiles in the
    # background, which steps schedule which request depends on the compiler thread's speed, fresh
    # or forked alike.
    judged = ("scenario", "label", "status", "totals", "outputs", "finish_reasons", "error")
    assert [r.model_dump(include=set(judged)) for r in delivered.runs] == [
        r.model_dump(include=set(judged)) for r in probe_runs("engine", "main")
    ]


def _server_pids() -> list[int]:
    """This test process's fork servers (children running `difftest.probe.forkserver`)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if int(stat[1]) == os.getpid() and b"difftest.probe.forkserver" in cmdline:
                found.append(int(entry.name))
    return found


def test_a_stuck_fork_server_costs_time_not_results(workspace, shipped_scenarios, tmp_path) -> None:
    """SIGSTOP the server once it forked the probes: their ends are never reported, yet difftest
    neither waits for ever nor loses the runs: the server is dropped and the branches probed
    fresh."""
    control = [s for s in shipped_scenarios("scheduler") if s.name == "eos-on-bonus"]
    job = make_job(TIER, control, run_timeout_s=120)
    targets = [(name, workspace.branch(name).env.python) for name in BRANCHES[:2]]
    stopped: list[int] = []

    def stop_the_server() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not stopped:
            logs = [tmp_path / f"{name}-scheduler-probe.log" for name, _ in targets]
            if all(log.exists() for log in logs):
                for pid in _server_pids():
                    os.kill(pid, signal.SIGSTOP)
                    stopped.append(pid)
            time.sleep(0.05)

    watcher = threading.Thread(target=stop_the_server)
    watcher.start()
    delivered = run_branches(targets, job, TIER.name, tmp_path, 300, 2, fork=True)
    watcher.join()
    assert stopped, "the server was never stopped"
    for name, _ in targets:
        run = delivered[name]
        # The stuck server was found out as stuck (a probe whose end it never reported, a fork it
        # never answered), not sat out: a probe waited for until its time limit reads timed out, and
        # is not started again. How soon it is found out is a speed, shown in bench/, not asserted
        # here.
        assert run.launch == "fresh" and "the fork server failed: it did not" in run.launch_note, (
            run.launch_note
        )
        assert not run.timed_out and run.outcome is not None and run.outcome.clean
        assert run.error is None and {r.status for r in run.runs} == {"ok"}
    assert not _server_pids()


def test_a_fork_server_that_says_nonsense_is_dropped(
    workspace, shipped_scenarios, tmp_path
) -> None:
    """A stand-in server (a fault this test injects: the real one never says this) that is ready,
    then answers a fork request with garbage: the probe starts fresh, saying why, and measures."""
    from difftest.run.probes.forking import ForkServer
    from difftest.run.probes.runner import _LIVE

    fake = tmp_path / "fake_server.py"
    fake.write_text(
        'import sys\nprint(\'{"ready": true, "modules": []}\', flush=True)\n'
        'sys.stdin.readline()\nprint(\'{"pid": "soon"}\', flush=True)\nsys.stdin.read()\n'
    )
    proc = _LIVE.start_helper(
        [sys.executable, str(fake)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    server = ForkServer(proc, 30)
    assert server.usable
    control = [s for s in shipped_scenarios("scheduler") if s.name == "eos-on-bonus"]
    job = make_job(TIER, control, run_timeout_s=120)
    try:
        delivered = run_probe(
            "main",
            workspace.branch("main").env.python,
            job,
            TIER.name,
            tmp_path,
            300,
            server=server,
        )
    finally:
        server.close()
    assert delivered.launch == "fresh" and "cannot read" in delivered.launch_note, (
        delivered.launch_note
    )
    assert delivered.error is None and {r.status for r in delivered.runs} == {"ok"}


def test_a_forked_probe_has_a_fresh_interpreters_signals(tmp_path, fixture_repo) -> None:
    """Branch code that reads its process's signal dispositions sees the same in a forked probe as
    in a fresh one (a write to a closed pipe, say, is an exception in both, not a kill)."""
    from difftest.build.workspace import prepare
    from difftest.core.config import load_config
    from tests.e2e.cli_helpers import CONTROL, SCHEDULER, faulty_config
    from tests.patching import prepend

    seen = tmp_path / "seen"
    spy = (  # sent when the probe ends, when both have imported everything they will
        "import atexit as _atexit, os as _os, json as _json\n"
        "def _spy():\n"
        "    status = dict(l.split(':', 1) for l in open('/proc/self/status').read().splitlines() "
        "if l.startswith('Sig'))\n"
        "    status = {k: v.strip() for k, v in status.items() if k in ('SigBlk', 'SigIgn', "
        "'SigCgt')}\n"
        f"    {post(seen, '_json.dumps(status) + chr(10)')}\n"
        "_atexit.register(_spy)\n"
    )
    config = load_config(
        faulty_config(
            tmp_path, "spy", prepend(tmp_path / "spy.patch", fixture_repo, SCHEDULER, spy)
        )
    )
    workspace = prepare(config)
    control = [s for s in TIER.load(config.scenarios_dir / TIER.folder) if s.name == CONTROL]
    job = make_job(TIER, control, run_timeout_s=120)
    targets = [(b.name, b.env.python) for b in workspace.branches]
    forked = run_branches(targets, job, TIER.name, tmp_path / "forked", 300, 2, fork=True)
    assert forked["spy"].launch == "forked" and forked["spy"].error is None
    fresh = run_branches(
        [("spy", workspace.branch("spy").env.python)], job, TIER.name, tmp_path / "fresh", 300, 1
    )
    assert fresh["spy"].launch == "fresh" and fresh["spy"].error is None
    first, second = (json.loads(line) for line in seen.read_text().splitlines())
    assert (
        first == second and first["SigIgn"]
    )  # a fresh interpreter ignores SIGPIPE, and so must a child


def test_a_branch_whose_vllm_import_sets_torch_differently_is_probed_fresh(
    tmp_path, fixture_repo
) -> None:
    """The shared torch was imported with vLLM 0.32's TORCHINDUCTOR_COMPILE_THREADS=1; a branch
    whose import sets another value would find torch's inductor configured for 1 in a forked probe
    (a fresh one reads its own value): the child stops right after importing vLLM and the branch
    starts fresh."""
    from difftest.build.workspace import prepare
    from difftest.core.config import load_config
    from tests.e2e.cli_helpers import CONTROL, faulty_config
    from tests.patching import insert_after

    marker = 'os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = "1"\n'
    patch = insert_after(
        tmp_path / "threads.patch",
        fixture_repo,
        "vllm/env_override.py",
        marker,
        'os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = "3"\n',
    )
    config = load_config(faulty_config(tmp_path, "threads", patch))
    workspace = prepare(config)
    control = [s for s in TIER.load(config.scenarios_dir / TIER.folder) if s.name == CONTROL]
    job = make_job(TIER, control, run_timeout_s=120)
    delivered = run_branches(
        [(b.name, b.env.python) for b in workspace.branches],
        job,
        TIER.name,
        tmp_path,
        300,
        2,
        fork=True,
    )
    assert delivered["main"].launch == "forked"
    threads = delivered["threads"]
    assert threads.launch == "fresh", threads.log_tail
    assert "this branch sets TORCHINDUCTOR_COMPILE_THREADS='3'" in threads.launch_note, (
        threads.launch_note
    )
    assert threads.error is None and {r.status for r in threads.runs} == {"ok"}


def test_a_kept_server_serves_every_branch_over_its_base_whichever_comes_first(
    workspace, shipped_scenarios, tmp_path, monkeypatch
) -> None:
    """Kept by the base it shares (`share_key_of`), not by the interpreter it was started with: a
    run whose first branch is another one forks from the same server."""
    monkeypatch.setenv(KEEP_FORK_SERVERS_ENV, "1")
    control = [s for s in shipped_scenarios("scheduler") if s.name == "eos-on-bonus"]
    job = make_job(TIER, control, run_timeout_s=120)
    key = share_key_of(workspace.base.path)
    targets = [(name, workspace.branch(name).env.python) for name in BRANCHES[:2]]
    try:
        for folder, order in (("first", targets), ("reversed", targets[::-1])):
            delivered = run_branches(
                order, job, TIER.name, tmp_path / folder, 600, 2, fork=True, share_key=key
            )
            assert {d.launch for d in delivered.values()} == {"forked"}
            assert len(_server_pids()) == 1
    finally:
        close_kept_fork_servers()


def test_a_kept_fork_server_serves_the_next_run_and_a_stop_retires_it(
    workspace, shipped_scenarios, tmp_path, monkeypatch
) -> None:
    """With `DIFFTEST_KEEP_FORK_SERVERS=1` (the suite's setting) the server outlives its run and the
    next run with the same interpreter forks from it, measuring what the first measured; a stop (an
    interrupt kills every process, servers too) retires it, and the next run starts its own."""
    monkeypatch.setenv(KEEP_FORK_SERVERS_ENV, "1")
    control = [s for s in shipped_scenarios("scheduler") if s.name == "eos-on-bonus"]
    job = make_job(TIER, control, run_timeout_s=120)
    targets = [(name, workspace.branch(name).env.python) for name in BRANCHES[:2]]

    def measured(folder: str) -> dict[str, list[str]]:
        delivered = run_branches(targets, job, TIER.name, tmp_path / folder, 600, 2, fork=True)
        assert {d.launch for d in delivered.values()} == {"forked"}, [
            d.launch_note for d in delivered.values()
        ]
        return {name: [comparable(r) for r in d.runs] for name, d in delivered.items()}

    try:
        first = measured("first")
        kept = _server_pids()
        assert len(kept) == 1, "the server ended with its run"
        assert measured("second") == first and _server_pids() == kept
        stop_all_probes()
        allow_probes()
        assert measured("third") == first
        (again,) = _server_pids()
        assert again not in kept
    finally:
        close_kept_fork_servers()
    assert not _server_pids()
