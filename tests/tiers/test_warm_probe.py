"""The warm probe (`difftest.run.fuzz.warm_probe`): job after job in one process, restarted after a
crash or a hang (slow: real vLLM; the faulty branches are real patches of the scheduler)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest

from difftest import tiers
from difftest.build.workspace import prepare
from difftest.core.config import load_config
from difftest.run.coverage.tracing_job import plan_tracing
from difftest.run.fuzz.warm_probe import WarmProbe, WarmProbeLimits
from difftest.run.pipeline import make_job
from difftest.run.probes.runner import SharedServer, run_probe, shared_fork_server
from difftest.tiers.scheduler.scenario import parse_scenario
from tests.e2e.cli_helpers import INIT_MARKER, SCHEDULER
from tests.factories import write_config
from tests.patching import insert_after
from tests.processes import alive, descendants

pytestmark = pytest.mark.slow
TIER = tiers.get("scheduler")
LIMITS = WarmProbeLimits(start_s=600, run_s=120)


def scenario(k: int, name: str = "s"):
    """One request whose EOS is its first accepted draft, with this k."""
    return parse_scenario(
        {
            "name": name,
            "statement": "s",
            "k": k,
            "requests": [
                {
                    "id": "r",
                    "prompt": "hi",
                    "max_tokens": 9,
                    "target": "x<eos>" + "abcdefgh"[: k + 1],
                    "drafter": {"kind": "scripted", "steps": [], "then": "perfect"},
                }
            ],
        },
        name,
    )


def job(*scenarios):
    return make_job(TIER, list(scenarios), run_timeout_s=LIMITS.run_s)


def faulty_python(tmp_path: Path, fixture_repo, code: str) -> Path:
    """The interpreter of a branch whose Scheduler runs `code` when it is built."""
    patch = insert_after(tmp_path / "fault.patch", fixture_repo, SCHEDULER, INIT_MARKER, code)
    config = load_config(
        write_config(
            tmp_path, [{"name": "fault", "ref": "main", "patches": [str(patch)]}], baseline="fault"
        )
    )
    env = prepare(config).branch("fault").env
    assert env is not None
    return env.python


@contextmanager
def forking(python: Path, work_dir: Path, forked: bool) -> Iterator[SharedServer | None]:
    """A fork server started with `python` for the warm probes, or None (each starts fresh)."""
    if not forked:
        yield None
        return
    with shared_fork_server(python, TIER.name, work_dir, 600, 1) as fork:
        yield fork


@pytest.mark.parametrize("forked", [False, True], ids=["fresh", "forked"])
def test_one_process_answers_job_after_job_as_a_cold_probe_does(
    workspace, shipped_scenarios, tmp_path, forked
) -> None:
    shipped = [
        s
        for s in shipped_scenarios("scheduler")
        if s.name in ("eos-on-bonus", "max-tokens-mid-block", "grammar-all-invalid-async")
    ]
    python = workspace.branch("main").env.python
    cold = run_probe("main", python, job(*shipped), TIER.name, tmp_path / "cold", 600)
    with (
        forking(python, tmp_path / "fork", forked) as fork,
        WarmProbe("main", python, TIER.name, tmp_path / "warm", LIMITS, fork=fork) as server,
    ):
        warm = [run for s in shipped for run in server.play(job(s)).runs]
        assert server.starts == 1
        assert server.process.launch == ("forked" if forked else "fresh")
        assert server.process.fresh_because == ""
    assert [r.status for r in warm] == ["ok"] * len(warm)
    assert [(r.scenario, r.label, r.totals, r.outputs) for r in warm] == [
        (r.scenario, r.label, r.totals, r.outputs) for r in cold.runs
    ]


#: Branch code run when its Scheduler is built: k = 5 kills the process, k = 4 hangs where the
#: probe's own per-run limit cannot stop it (SIGALRM blocked), so the host must.
CRASH_OR_HANG = (
    "        k = vllm_config.speculative_config.num_speculative_tokens\n"
    "        if k == 5:\n"
    "            import os, sys; sys.stderr.write('planted crash\\n'); sys.stderr.flush(); "
    "os._exit(7)\n"
    "        if k == 4:\n"
    "            import signal, time; signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM}); "
    "time.sleep(3600)\n"
)


@pytest.mark.parametrize("forked", [False, True], ids=["fresh", "forked"])
def test_a_probe_that_dies_or_hangs_costs_that_job_and_is_started_again(
    tmp_path, fixture_repo, forked
) -> None:
    """Forked from a fork server, a warm probe's crash, hang and restarts read as a fresh one's."""
    python = faulty_python(tmp_path, fixture_repo, CRASH_OR_HANG)
    limits = WarmProbeLimits(start_s=600, run_s=1, slack_s=2)
    with (
        forking(python, tmp_path / "fork", forked) as fork,
        WarmProbe("fault", python, TIER.name, tmp_path / "w", limits, fork=fork) as server,
    ):
        assert [r.status for r in server.play(job(scenario(3))).runs] == ["ok"]
        died = server.play(job(scenario(5, "k5")))
        assert died.error == "probe exited with code 7: planted crash" and not died.timed_out
        assert [(r.status, r.error) for r in died.runs] == [("error", died.error)]
        after_crash = server.play(job(scenario(3)))
        assert after_crash.error is None and [r.status for r in after_crash.runs] == ["ok"]
        hung = server.play(job(scenario(4, "k4")))
        assert hung.timed_out and "did not answer within 3 s" in (hung.error or "")
        assert [r.status for r in hung.runs] == ["error"]
        after_hang = server.play(job(scenario(2)))
        assert after_hang.error is None and [r.status for r in after_hang.runs] == ["ok"]
        assert server.starts == 3
        # A probe that keeps dying is not started again past `max_starts`: every later job reads
        # error at once.
        server.limits = replace(limits, max_starts=3)
        assert (
            server.play(job(scenario(5, "k5"))).error == "probe exited with code 7: planted crash"
        )
        refused = server.play(job(scenario(3)))
        assert refused.error == (
            "not started again: the probe stopped 3 times (last: probe exited with code 7: "
            "planted crash)"
        )
        assert [(r.status, r.error) for r in refused.runs] == [
            ("error", refused.error)
        ] and server.starts == 3
        assert server.process.launch == ("forked" if forked else "fresh")
    log = (tmp_path / "w" / "fault-scheduler-server.log").read_text()
    assert "planted crash" in log and "probe process 3" in log


def test_a_branch_whose_probe_cannot_start_answers_without_a_header(tmp_path, fixture_repo) -> None:
    from tests.patching import prepend

    patch = prepend(
        tmp_path / "broken.patch",
        fixture_repo,
        SCHEDULER,
        'raise ImportError("planted import failure")',
    )
    config = load_config(
        write_config(
            tmp_path,
            [{"name": "broken", "ref": "main", "patches": [str(patch)]}],
            baseline="broken",
        )
    )
    python = prepare(config).branch("broken").env.python
    with WarmProbe("broken", python, TIER.name, tmp_path / "w", LIMITS) as server:
        answer = server.play(make_job(TIER, [], None))
    assert (
        answer.header is None
        and answer.error == "probe exited with code 3: ImportError: planted import failure"
    )


def test_a_forked_warm_probe_refused_or_left_by_its_server_plays_the_job_again_fresh(
    workspace, tmp_path, fixture_repo
) -> None:
    """Neither is the branch's doing, so neither costs it the job nor a start: a branch whose vLLM
    import sets torch's inductor threads otherwise than the shared torch was imported with refuses
    in its fork and is answered by a fresh process; main's fork server killed under its forked warm
    probe, the next job is answered by a fresh one, saying why."""
    from tests.e2e.cli_helpers import faulty_config

    main = workspace.branch("main").env.python
    patch = insert_after(
        tmp_path / "threads.patch",
        fixture_repo,
        "vllm/env_override.py",
        'os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = "1"\n',
        'os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = "3"\n',
    )
    threads = prepare(load_config(faulty_config(tmp_path, "threads", patch))).branch("threads")
    assert threads.env is not None
    with shared_fork_server(main, TIER.name, tmp_path / "fork", 600, 1) as fork:
        with WarmProbe(
            "threads", threads.env.python, TIER.name, tmp_path / "t", LIMITS, fork=fork
        ) as refused:
            answer = refused.play(job(scenario(3)))
            assert answer.error is None and [r.status for r in answer.runs] == ["ok"]
            assert refused.starts == 1 and refused.process.launch == "fresh"
            assert "this branch sets TORCHINDUCTOR_COMPILE_THREADS='3'" in (
                refused.process.fresh_because
            )
        with WarmProbe("main", main, TIER.name, tmp_path / "m", LIMITS, fork=fork) as left:
            assert [r.status for r in left.play(job(scenario(3))).runs] == ["ok"]
            assert left.process.launch == "forked"
            server, _note = fork.get()
            assert server is not None
            below = descendants(server.process.pid)
            server.process.kill()
            server.process.wait()
            # the forked probe dies with it, a step later (its pid namespace's init dies with the
            # child the server forked, and takes the probe along): wait for that, not a race
            deadline = time.monotonic() + 10
            while any(alive(pid) for pid in below) and time.monotonic() < deadline:
                time.sleep(0.05)
            answer = left.play(job(scenario(2)))
            assert answer.error is None and [r.status for r in answer.runs] == ["ok"]
            assert left.starts == 1 and left.process.launch == "fresh"
            assert "fork server" in left.process.fresh_because


def test_a_forked_warm_probe_that_would_see_another_shared_library_refuses_before_its_first_answer(
    workspace, tmp_path
) -> None:
    """The refusal is said on stderr (the log): a warm probe's stdout is its answers' pipe, where
    the host would read it as no answer at all and blame the branch for a crash."""
    import shutil

    from tests.tiers.test_fork_server import copy_env

    env = copy_env(workspace.branch("main").env.path, tmp_path / "env")
    shutil.copytree(workspace.base.site_packages / "cpuinfo", env / "overlay" / "cpuinfo")
    main = workspace.branch("main").env.python
    with (
        shared_fork_server(main, TIER.name, tmp_path / "fork", 600, 1) as fork,
        WarmProbe(
            "shadowing", env / "bin" / "python", TIER.name, tmp_path / "w", LIMITS, fork=fork
        ) as refused,
    ):
        answer = refused.play(job(scenario(3)))
        assert answer.error is None and [r.status for r in answer.runs] == ["ok"]
        assert refused.starts == 1 and refused.process.launch == "fresh"
        assert "cpuinfo would come from" in refused.process.fresh_because


def test_a_traced_warm_probe_reports_what_each_job_ran(
    workspace, shipped_scenarios, tmp_path
) -> None:
    """`fuzz` traces every job: the tracer starts with the process's first job (before vLLM is
    imported) and each answer holds what that job ran, so a sync job after an async one reports
    none of the async scheduler's lines."""
    chosen = "vllm/v1/core/sched/async_scheduler.py"
    plan = plan_tracing(workspace, lambda _m: None, [chosen])
    assert plan.spec is not None, plan.why_not
    by_name = {s.name: s for s in shipped_scenarios("scheduler")}
    played = (
        "eos-on-bonus",
        "grammar-all-invalid-async",
        "max-tokens-mid-block",
        "grammar-all-invalid-async",
    )
    python = workspace.branch("main").env.python
    lines = []
    with WarmProbe("main", python, TIER.name, tmp_path / "warm", LIMITS) as server:
        for name in played:
            traced = job(by_name[name])
            plan.add_to(traced)
            answer = server.play(traced)
            assert [r.status for r in answer.runs] == ["ok"] * len(answer.runs), name
            assert answer.coverage is not None and answer.coverage.status == "ok", answer.coverage
            assert answer.coverage.core == "CTracer"
            data = answer.coverage.files.get(chosen)
            lines.append(set(data.lines) if data is not None else set())
        assert server.starts == 1
    first_sync, async_job, second_sync, async_again = lines
    # The async job runs the async scheduler's methods; the sync job after it runs none of its
    # lines (its import was the first job's), and the async job played again reports them again:
    # what a job reports is its own.
    methods = async_job - first_sync
    assert methods, "the async job ran lines the first (importing) job did not"
    assert second_sync == set(), second_sync
    assert async_again == methods
