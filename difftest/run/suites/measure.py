"""Measuring a suite tier: the repository's own tests in every branch environment, at once.

One pytest-xdist session per test tree (`tiers.tests.sources` keeps them few):
the controller is the baseline's environment (it must import the tests'
`conftest.py`, so it needs torch and vLLM itself), and every branch is one
`popen//python=<branch python>` gateway, with `--dist each` so that every
worker runs every selected test. Everything xdist gets silently wrong for this
is handled by the tier's pytest plugin (`difftest.probe.tests.plugin`) and
checked here when reading the results (`run.suites.results`): each worker's
results are labelled by the controller, each worker's `vllm` must come from its
own environment, and a test a worker did not collect or run reads "could not
measure" for that branch only.

Test-only packages come from one folder per base on PYTHONPATH, model configs
from an offline stand-in cache; nothing is installed into an environment, and
nothing is downloaded from a hub.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from difftest.build.tests.deps import site_dir, suite_packages
from difftest.build.tests.standins import hub_cache
from difftest.build.tests.trees import PYTEST_CONFIG, branch_tests, has_tests, suite_tree
from difftest.core import paths, tally
from difftest.core.coverage import summed
from difftest.core.evidence import TestSourceEvidence
from difftest.core.records import ProbeCoverage
from difftest.core.suites import BranchTests, RawOutcome, SuitePlan, SuiteSession
from difftest.probe.tests.contract import (
    CODE_ENV,
    GRAFTS_ENV,
    INHERIT_PATH_ENV,
    OUT_ENV,
    TRACE_ENV,
)
from difftest.run.cache.sessions import load_session, session_key, store_session
from difftest.run.context import RunContext
from difftest.run.probes import descendants
from difftest.run.probes.environ import probe_environ
from difftest.run.probes.files import open_records, read_probe_text
from difftest.run.probes.runner import (
    Progress,
    kill_group,
    probe_process_ended,
    start_probe_process,
)
from difftest.run.suites.results import read_session, session_coverage
from difftest.tiers.base import TierOutcome
from difftest.tiers.common.scenario import ScenarioIdentity
from difftest.tiers.suite_tier import SuiteTier

#: Variables that would change what pytest loads or how xdist distributes.
_PYTEST_VARIABLES = (
    "PYTEST_ADDOPTS",
    "PYTEST_PLUGINS",
    "PYTEST_DISABLE_PLUGIN_AUTOLOAD",
    "PYTEST_XDIST_AUTO_NUM_WORKERS",
)
#: Probe settings that do not belong in a test run (tests choose their own engine mode and KV
#: cache).
_PROBE_ONLY = (
    "VLLM_ENABLE_V1_MULTIPROCESSING",
    "VLLM_CPU_KVCACHE_SPACE",
    "VLLM_CPU_OMP_THREADS_BIND",
)


@dataclass
class SessionRun:
    """One pytest-xdist session as it ran: where its files are, how long it took, why it failed."""

    name: str
    out: Path
    root: Path | None = None
    command: list[str] = field(default_factory=list)
    returncode: int | None = None
    error: str | None = None
    duration_s: float = 0.0
    #: The result cache key its files were reused under (None: it ran now).
    reused_key: str | None = None


@dataclass(frozen=True)
class SessionSetup:
    """What every session of one suite tier shares: who runs it, with what, under which limits."""

    #: The controller's interpreter (it imports the test tree's conftest.py).
    controller: Path
    #: (branch name, its python, its environment) per xdist worker.
    workers: list[tuple[str, Path, Path]]
    #: The test-only packages' folder(s), put on PYTHONPATH.
    python_path: list[Path]
    #: The offline stand-in model cache.
    hub: Path
    #: The tier's pytest plugin module.
    plugin: str
    #: Per test (pytest-timeout) and per session, seconds.
    run_timeout_s: float
    timeout_s: float
    #: For difftest's own tests only (see `run_session`).
    extra_args: tuple[str, ...] = ()
    inherit_controller_path: bool = False
    #: What each worker traces (the job's `trace` entry, `probe.tracing`); None: nothing.
    trace: dict[str, Any] | None = None

    def with_controller(self, controller: Path) -> SessionSetup:
        return replace(self, controller=controller)


def measure_suites(
    context: RunContext,
    tier: SuiteTier[Any],
    scenario: ScenarioIdentity,
    progress: Progress | None = None,
) -> TierOutcome[Any]:
    """Plan, run and judge every test session of one suite scenario across the workspace's branches,
    against the context's baseline; a session whose files for this very work are in the result
    cache is read from there (`run.cache.sessions`)."""
    workspace, baseline, reading, log = (
        context.workspace,
        context.baseline,
        context.reading,
        context.log,
    )
    names = [b.name for b in workspace.branches]
    built = [(b.name, b.env) for b in workspace.branches if b.env is not None]
    unmeasured = {b.name: b.error or "no environment" for b in workspace.branches if b.env is None}
    base_branch = workspace.branch(baseline)
    repo = workspace.repo
    if not has_tests(repo, base_branch.resolved.sha):
        why = (
            f"the baseline {baseline} ({base_branch.resolved.sha[:12]}) has no tests/ folder: "
            "nothing to run (with the fixture repo, no source distribution is pinned for this vLLM "
            "version; use a vLLM clone)"
        )
        log(why)
        nothing = tier.judge_suites(
            scenario, SuitePlan([], []), [], names, baseline, reading, dict.fromkeys(names, why)
        )
        return TierOutcome(results=nothing[0])
    base_tests = BranchTests(baseline, base_branch.resolved.sha)
    others = [
        branch_tests(repo, b.name, b.resolved.sha, base_tests.sha)
        for b in workspace.branches
        if b.name != baseline
    ]
    plan = tier.plan_suites(scenario, base_tests, others)
    sources = {
        s.label: TestSourceEvidence(
            origin=s.origin,
            sha=s.sha,
            selection=list(s.tests),
            keyword=s.keyword,
            same_as=list(s.same_as),
            note=s.note,
        )
        for s in plan.sources
    }
    if not built:
        results = tier.judge_suites(scenario, plan, [], names, baseline, reading, unmeasured)[0]
        return TierOutcome(results=results, test_sources=sources)
    envs = dict(built)
    requirements = tier.suite_requirements(scenario)
    setup = SessionSetup(
        controller=built[0][1].python,
        workers=[(name, env.python, env.path) for name, env in built],
        python_path=[site_dir(suite_packages(workspace.base, requirements, log))],
        hub=hub_cache(),
        plugin=tier.plugin,
        run_timeout_s=context.timeouts.run_s,
        timeout_s=context.timeouts.suite_s,
        extra_args=context.suite_args,
        inherit_controller_path=context.inherit_controller_path,
        trace=context.trace.spec if context.trace is not None else None,
    )
    outcomes: list[RawOutcome] = []
    runs = []
    coverage: dict[str, list[ProbeCoverage]] = {}
    for session in plan.sessions:
        for source in plan.sources:
            if session.default_source == source.label or source.label in {
                o for o, _ in session.owners.values()
            }:
                sources[source.label].session = session.name
        root = suite_tree(repo, session.sha, session.grafts)
        # The controller imports the tree's conftest.py: the tree's own branch's code, else the
        # baseline's.
        controller_env = envs.get(session.origin) or envs.get(baseline) or built[0][1]
        log(
            f"tests: session {session.name} ({len(setup.workers)} branches) from {root.name}: "
            f"{' '.join(session.args)}"
        )
        key = (
            session_key(
                session,
                [(name, env.fingerprint) for name, env in built],
                controller_env.fingerprint,
                workspace.base.fingerprint,
                list(requirements),
                {"run_s": context.timeouts.run_s, "suite_s": context.timeouts.suite_s},
                setup.trace,
            )
            if not setup.extra_args and not setup.inherit_controller_path
            else None
        )
        run = _run_or_reuse(
            context,
            session,
            root,
            setup.with_controller(controller_env.python),
            context.out / tier.name / session.name,
            key,
            progress,
        )
        runs.append(run)
        found, problems = read_session(
            session, run.out, {name: path for name, _, path in setup.workers}, run.error
        )
        outcomes += found
        for code, why in problems.items():
            unmeasured.setdefault(code, why)
        if setup.trace is not None:
            for code, traced in session_coverage(run.out, [n for n, _, _ in setup.workers]).items():
                coverage.setdefault(code, []).append(traced)
        log(
            f"tests: session {session.name} {'failed: ' + run.error if run.error else 'done'} in "
            f"{run.duration_s:.1f} s"
        )
    results, records = tier.judge_suites(
        scenario, plan, outcomes, names, baseline, reading, unmeasured
    )
    return TierOutcome(
        results=results,
        tests=records,
        test_sources=sources,
        sessions=runs,
        coverage={code: summed(parts) for code, parts in coverage.items()},
    )


def _run_or_reuse(
    context: RunContext,
    session: SuiteSession,
    root: Path,
    setup: SessionSetup,
    out: Path,
    key: str | None,
    progress: Progress | None,
) -> SessionRun:
    """The session's files (into `out`) from the result cache under `key`, else the session run
    now (and stored)."""
    reused = load_session(context.cache, key, out, context.log) if key else None
    if reused is not None:
        context.log(
            f"tests: session {session.name} reused from the result cache (measured "
            f"{reused['measured_at']}, key {str(key)[:12]}; --no-cache runs it again)"
        )
        return SessionRun(
            session.name,
            out,
            root,
            [],
            reused["returncode"],
            None,
            reused["duration_s"],
            reused_key=key,
        )
    run = run_session(session, root, setup, out, progress)
    if key:
        store_session(
            context.cache, key, run.out, run.returncode, run.error, run.duration_s, context.log
        )
    return run


def session_command(session: SuiteSession, root: Path, setup: SessionSetup, out: Path) -> list[str]:
    """The controller's command line: distribution to every branch, JUnit, the plugin, the
    selection."""
    config = root / PYTEST_CONFIG
    if not config.is_file():
        config = out / "empty.ini"
        config.write_text("[pytest]\n")
    return [
        str(setup.controller),
        "-m",
        "pytest",
        "-p",
        setup.plugin,
        "-p",
        "no:cacheprovider",  # nothing written into the test tree
        "--rootdir",
        str(root),
        "-c",
        str(config),
        "-o",
        "addopts=",  # the tree's own addopts (a real clone's `-n0`, say) must not change the run
        "-o",
        "junit_family=xunit1",
        "-o",
        "junit_logging=no",
        "-o",
        f"timeout={setup.run_timeout_s:g}",  # pytest-timeout, per test
        "--dist",
        "each",
        *[
            f"--tx=popen//python={python}//env:{CODE_ENV}={name}"
            for name, python, _ in setup.workers
        ],
        f"--junitxml={out / 'junit.xml'}",
        "-q",
        "--color=no",
        "-p",
        "no:randomly",
        *setup.extra_args,
        *session.args,
    ]


def session_environ(
    session: SuiteSession, python_path: list[Path], hub: Path, out: Path, workers: int
) -> dict[str, str]:
    """The probes' offline environment, with the test-only packages and the stand-in model cache."""
    env = {
        k: v
        for k, v in probe_environ(workers).items()
        if k not in (*_PYTEST_VARIABLES, *_PROBE_ONLY)
    }
    env = {k: v for k, v in env.items() if not k.startswith(("PYTEST_XDIST_", "DIFFTEST_"))}
    env.update(
        PYTHONPATH=os.pathsep.join(str(p) for p in python_path),
        HF_HUB_CACHE=str(hub),
        HF_HOME=str(out / "hf-home"),
        VLLM_CACHE_ROOT=str(paths.vllm_cache_dir()),
        **{OUT_ENV: str(out), GRAFTS_ENV: json.dumps(session.allowed_grafts)},
    )
    return env


def run_session(
    session: SuiteSession,
    root: Path,
    setup: SessionSetup,
    out: Path,
    progress: Progress | None = None,
) -> SessionRun:
    """Run one session under a time limit; never raises for what the branches do.

    `inherit_controller_path` is for difftest's own tests only: it leaves xdist's default (every
    worker gets the controller's sys.path), to show what the plugin's fix prevents."""
    # The session runs in the test root: a relative `--out` would name a folder there.
    out = out.resolve()
    # The session writes here (its one writable folder besides its scratch): whatever an earlier
    # session left, links or FIFOs included, goes, and nothing here is opened through a link.
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    command = session_command(session, root, setup, out)
    timeout_s = setup.timeout_s
    run = SessionRun(session.name, out, root, command)
    started = time.monotonic()
    token = descendants.new_token()
    tally.count("test-session", workers=len(setup.workers))
    with open(open_records(out / "pytest.log"), "wb") as log:
        # Through the probes' registry: killed with them on Ctrl-C, SIGTERM or exit
        # (`runner._LIVE`).
        proc = start_probe_process(
            command,
            cwd=root,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            # The session's report folder is the one place it writes besides its scratch folder.
            writable=(out,),
            env={
                **session_environ(session, setup.python_path, setup.hub, out, len(setup.workers)),
                **({TRACE_ENV: json.dumps(setup.trace)} if setup.trace is not None else {}),
                **({INHERIT_PATH_ENV: "1"} if setup.inherit_controller_path else {}),
                descendants.TOKEN_ENV: token,
            },
            start_new_session=True,
        )
        seen: dict[str, int] = {}
        try:
            while proc.poll() is None:
                if time.monotonic() - started > timeout_s:
                    _stop(proc)
                    run.error = (
                        f"the test session timed out after {timeout_s:.0f} s "
                        "(raise `timeouts.suite_s`)"
                    )
                    break
                seen = _report_progress(out, seen, progress, session.name)
                time.sleep(0.5)
        except BaseException:
            kill_group(proc)  # Ctrl-C or an error here: no grace, the user is waiting
            raise
        finally:
            probe_process_ended(proc)
            descendants.end_descendants(token)
        _report_progress(out, seen, progress, session.name)
    run.returncode = proc.returncode
    run.duration_s = round(time.monotonic() - started, 2)
    # pytest: 0 all passed, 1 some failed, 5 nothing collected; anything else is the session's own
    # failure.
    if run.error is None and proc.returncode not in (0, 1, 5):
        tail = [
            line for line in _read_session_file(out / "pytest.log").splitlines() if line.strip()
        ]
        run.error = f"pytest exited with code {proc.returncode}: " + (
            tail[-1] if tail else "no output"
        )
    return run


#: How long an interrupted session gets to write its JUnit report before it is killed.
_GRACE_S = 30


def _stop(proc: subprocess.Popen[Any]) -> None:
    """Interrupt the controller (as Ctrl-C does: it stops the workers and writes what it has), then
    kill whatever is left of the session's process group."""
    try:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=_GRACE_S)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass
    pidfds = descendants.kill_below(proc.pid)  # the session's pid namespace, confined
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
    descendants.wait_ended(pidfds)


def _report_progress(
    out: Path, seen: dict[str, int], progress: Progress | None, name: str
) -> dict[str, int]:
    """Per branch: tests finished of tests collected, from the plugin's progress file."""
    path = out / "progress.jsonl"
    if progress is None or not path.exists():
        return seen
    done: dict[str, int] = {}
    total: dict[str, int] = {}
    last: dict[str, str] = {}
    for line in _read_session_file(path).splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if not isinstance(record, dict):
            continue
        code = str(record.get("code"))
        if "collected" in record:
            total[code] = int(record["collected"])
        else:
            done[code] = done.get(code, 0) + 1
            last[code] = str(record.get("test", ""))
    for code, count in done.items():
        if seen.get(code) != count:
            try:
                progress(code, count, total.get(code, count), last[code].split("::")[0], name)
            except KeyError:
                continue  # not a branch of this run (a report from the controller itself)
    return done


def _read_session_file(path: Path) -> str:
    """A file the session wrote (and so branch code could replace): never through a link, never
    blocking on a FIFO, capped in size; "" when it cannot be read that way."""
    try:
        return read_probe_text(path)
    except OSError:
        return ""
