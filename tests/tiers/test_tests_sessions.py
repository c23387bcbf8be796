"""The tests tier's pytest-xdist sessions and their pitfalls, on small real interpreters (no vLLM).

Two real virtual environments stand for two branches: each has its own
`which.py` (through a `.pth`, as a branch environment has its own `vllm/`), and
only `a` has `only_a.py`. The session is the real one (`run.suites.measure.run_session`:
real pytest, real pytest-xdist with one `popen//python=...` gateway per
environment, the tier's plugin, JUnit), read back by `run.suites.results`. Each
pitfall that silently gives wrong answers is shown to be handled:

- workers inherit the controller's sys.path (and import the controller's code);
- `-n0` turns distribution off;
- JUnit repeats each test per worker without naming the interpreter;
- a module failing to collect in one environment is reported once, unlabelled;
- a session stopped at its time limit keeps the tests that finished;
- each worker traces the job's files from its start and hands what it ran to the controller; a
  branch that stops the tracer reads coverage unknown, the other keeps its own (each environment
  has a two-function stand-in `vllm` package here, for the tracer to find).

vLLM's own case (each worker's `vllm` must come from its own environment) is
checked end to end in tests/e2e/test_tests_tier.py.
"""

from __future__ import annotations

import signal
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest

from difftest.build.envs.uvtool import run_uv
from difftest.core.suites import SuiteSession
from difftest.run.suites.measure import SessionRun, SessionSetup, run_session
from difftest.run.suites.results import read_session, session_coverage
from tests.factories import ROOT

PLUGIN = "difftest.probe.tests.plugin"
WHERE = """
import os
import which

def test_code_matches_interpreter():
    assert which.NAME == os.environ["DIFFTEST_CODE"]

def test_fails_on_b():
    assert which.NAME != "b", "planted: b is wrong"

def test_skipped():
    import pytest
    pytest.skip("not here")
"""
GRAFTED = """
def test_keep():
    pass

def test_drop():
    raise AssertionError("a grafted test the plan did not ask for must not run")
"""
SLOW = """
import time

def test_fast():
    pass

def test_hangs():
    time.sleep(600)
"""


#: The stand-in `vllm/counting.py` of both environments.
COUNTING = """
def count(n):
    if n > 1:
        return n + 1
    return n


def never_called():
    return 0
"""
#: Runs `count` both ways; on `b`, then stops the tracer as a branch's code could.
COUNTS = """
import sys

import which
from vllm import counting


def test_count():
    assert counting.count(2) == 3 and counting.count(1) == 1
    if which.NAME == "b":
        sys.settrace(None)
"""


@pytest.fixture(scope="session")
def interpreters(tmp_path_factory) -> dict[str, Path]:
    """Two real venvs (`a`, `b`); each imports its own `which.py`; only `a` has `only_a.py`."""
    root = tmp_path_factory.mktemp("venvs")
    base_python = getattr(sys, "_base_executable", sys.executable)
    found = {}
    for name in ("a", "b"):
        env = root / name
        run_uv(["venv", "--quiet", "--python", base_python, str(env)], what="create a test venv")
        marker = env / "marker"
        marker.mkdir()
        (marker / "which.py").write_text(f"NAME = {name!r}\n")
        if name == "a":
            (marker / "only_a.py").write_text("")
        (marker / "vllm").mkdir()
        (marker / "vllm" / "__init__.py").write_text("")
        (marker / "vllm" / "counting.py").write_text(COUNTING)
        (site_packages(env) / "marker.pth").write_text(str(marker) + "\n")
        found[name] = env
    return found


def site_packages(env: Path) -> Path:
    (site,) = env.glob("lib/python3*/site-packages")
    return site


@pytest.fixture(scope="session")
def tree(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tree")
    tests = root / "tests"
    tests.mkdir()
    (tests / "__init__.py").write_text("")
    (tests / "test_where.py").write_text(WHERE)
    (tests / "test_only_a.py").write_text("import only_a\n\ndef test_imports():\n    pass\n")
    (tests / "test_broken.py").write_text('raise ImportError("broken everywhere")\n')
    (tests / "test_core__difftest1.py").write_text(GRAFTED)
    (tests / "test_slow.py").write_text(SLOW)
    (tests / "test_counting.py").write_text(COUNTS)
    (root / "pyproject.toml").write_text('[tool.pytest.ini_options]\naddopts = "-n0 -p no:xdist"\n')
    return root


GRAFT = "tests/test_core__difftest1.py"


def session(*args: str, allowed: list[str] | None = None) -> SuiteSession:
    """A session whose grafted module holds a branch's copy of `tests/test_core.py`."""
    return SuiteSession(
        name="s",
        sha="",
        grafts={},
        args=list(args),
        allowed_grafts=allowed or [],
        owners={GRAFT: ("from:b", "tests/test_core.py")},
        default_source="upstream",
    )


def run(
    tmp_path: Path, tree: Path, interpreters: dict[str, Path], plan: SuiteSession, **kwargs
) -> SessionRun:
    workers = [(name, env / "bin" / "python", env) for name, env in interpreters.items()]
    # The host's pytest/xdist (the role of the test-only folder) and difftest's plugin (a branch
    # environment has it through its `.pth`).
    python_path = [Path(sysconfig.get_paths()["purelib"]), ROOT]
    options: dict[str, Any] = dict(run_timeout_s=60, timeout_s=240)
    options.update(kwargs)
    if "extra_args" in options:
        options["extra_args"] = tuple(options["extra_args"])
    setup = SessionSetup(
        controller=interpreters["a"] / "bin" / "python",
        workers=workers,
        python_path=python_path,
        hub=tmp_path,
        plugin=PLUGIN,
        **options,
    )
    return run_session(plan, tree, setup, tmp_path / "out")


def outcomes(found) -> dict[tuple[str, str], tuple[str, str]]:
    return {(o.code, o.test.split("::")[-1]): (o.outcome, o.message) for o in found}


@pytest.fixture(scope="session")
def where_run(tmp_path_factory, tree, interpreters):
    """One session over every module but the slow one, with one grafted test allowed."""
    tmp = tmp_path_factory.mktemp("where")
    plan = session(
        "tests/test_where.py",
        "tests/test_only_a.py",
        "tests/test_broken.py",
        "tests/test_core__difftest1.py",
        allowed=["tests/test_core__difftest1.py::test_keep"],
    )
    done = run(tmp, tree, interpreters, plan)
    return done, read_session(plan, done.out, interpreters, done.error)


def test_each_worker_runs_every_test_with_its_own_interpreter(where_run):
    done, (found, problems) = where_run
    assert done.error is None and problems == {}
    got = outcomes(found)
    # The tree's `addopts = "-n0 -p no:xdist"` is overridden: both branches ran, each on its own
    # code.
    assert got[("a", "test_code_matches_interpreter")][0] == "passed"
    assert got[("b", "test_code_matches_interpreter")][0] == "passed"
    assert got[("a", "test_fails_on_b")][0] == "passed"
    assert got[("b", "test_fails_on_b")] == ("failed", "AssertionError: planted: b is wrong")
    assert got[("a", "test_skipped")] == got[("b", "test_skipped")] == ("skipped", "not here")


def test_junit_cases_are_labelled_by_the_controller(where_run):
    done, _ = where_run
    text = (done.out / "junit.xml").read_text()
    # Four tests each, and test_only_a, which only a can collect.
    assert (
        text.count('name="difftest_code" value="a"') == 5
        and text.count('name="difftest_code" value="b"') == 4
    )


def test_a_module_that_fails_to_collect_in_one_environment_is_that_branchs_alone(where_run):
    _, (found, _) = where_run
    got = outcomes(found)
    assert got[("a", "test_imports")][0] == "passed"
    outcome, message = got[("b", "test_imports")]
    assert outcome == "not-collected" and "only_a" in message and "tests/test_only_a.py" in message


def test_a_module_failing_everywhere_is_reported_for_each_branch(where_run):
    _, (found, _) = where_run
    broken = {o.code: o for o in found if o.test == "tests/test_broken.py"}
    assert set(broken) == {"a", "b"}, "one error per branch, not one merged error"
    assert all(
        o.outcome == "not-collected" and "broken everywhere" in o.message for o in broken.values()
    )


def test_a_grafted_module_runs_only_the_tests_asked_for_under_its_own_name(where_run):
    _, (found, _) = where_run
    grafted = {(o.source, o.test) for o in found if o.source == "from:b"}
    assert grafted == {("from:b", "tests/test_core.py::test_keep")}


def test_workers_that_inherit_the_controllers_path_run_its_code(tmp_path, tree, interpreters):
    """The pitfall itself: without the plugin's fix, b's worker imports a's `which` and `planted`
    "passes"."""
    plan = session("tests/test_where.py")
    done = run(tmp_path, tree, interpreters, plan, inherit_controller_path=True)
    got = outcomes(read_session(plan, done.out, interpreters, done.error)[0])
    assert got[("b", "test_fails_on_b")][0] == "passed"  # wrong: a's code answered for b
    assert got[("b", "test_code_matches_interpreter")][0] == "failed"


def test_a_session_without_distribution_is_refused(tmp_path, tree, interpreters):
    plan = session("tests/test_where.py")
    done = run(tmp_path, tree, interpreters, plan, extra_args=["-n0"])
    assert done.error and "distribution is off" in (done.out / "pytest.log").read_text()
    found, problems = read_session(plan, done.out, interpreters, done.error)
    assert found == [] and set(problems) == {"a", "b"}


#: Session limits tried in turn: the limit must fall after both workers started, collected and ran
#: test_fast, which takes seconds at rest and minutes beside the suite's heavy set-ups on a 2-core
#: machine. test_hangs sleeps 600 s either way, so every limit stops the session.
LIMITS_S = (15, 120, 400)


def test_a_session_stopped_at_its_limit_keeps_what_finished(tmp_path, tree, interpreters):
    """Also when difftest itself was started with SIGINT ignored (`difftest run &` in a CI script):
    the session it starts inherits that, and the plugin takes SIGINT back."""
    plan = session("tests/test_slow.py")
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        fast, got, limit = _stop_at_growing_limits(tmp_path, tree, interpreters, plan)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert fast == {"passed"}, f"test_fast did not report within {limit} s: {got}"
    assert got[("a", "test_hangs")][0] in ("not-run", "failed")


def _stop_at_growing_limits(tmp_path, tree, interpreters, plan):
    for limit in LIMITS_S:
        tried = tmp_path / f"limit-{limit}"
        tried.mkdir()
        done = run(tried, tree, interpreters, plan, run_timeout_s=600, timeout_s=limit)
        assert done.error and f"timed out after {limit} s" in done.error
        got = outcomes(read_session(plan, done.out, interpreters, done.error)[0])
        fast = {got.get((code, "test_fast"), ("not-run", ""))[0] for code in ("a", "b")}
        if fast == {"passed"} or limit == LIMITS_S[-1]:
            break
    return fast, got, limit


def test_each_worker_hands_what_it_traced_to_the_controller(tmp_path, tree, interpreters):
    spec = {"site": sysconfig.get_paths()["purelib"], "paths": ["vllm/counting.py"]}
    plan = session("tests/test_counting.py")
    done = run(tmp_path, tree, interpreters, plan, trace=spec)
    assert done.error is None, done.error
    # (Its outcomes are not read: the stand-in `vllm` lies outside the environments' `overlay/`,
    # which `read_session` refuses, as it must for a real branch.)
    traced = session_coverage(done.out, ["a", "b"])
    assert traced["a"].status == "ok", traced["a"]
    counted = traced["a"].files["vllm/counting.py"]
    # Both ways through `count`'s branch point; `never_called`'s body never ran (its `def` did).
    assert {3, 4, 5, 8} <= set(counted.lines) and 9 not in counted.lines
    assert {(3, 4), (3, 5)} <= {(a, b) for a, b in counted.arcs}
    assert traced["b"].status == "unknown"
    assert traced["b"].why.startswith("the tracer was stopped while the probe ran")
    # A session run untraced reports none: no worker hands any coverage over.
    untraced = run(tmp_path / "untraced", tree, interpreters, plan)
    assert untraced.error is None and session_coverage(untraced.out, ["a", "b"]) == {}
