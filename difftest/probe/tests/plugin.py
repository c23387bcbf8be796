"""pytest plugin of the tests tier: loaded with `-p difftest.probe.tests.plugin` in the controller
and in every worker of a pytest-xdist session whose workers are branch environments (`--dist each`,
one `popen//python=<branch python>` gateway per branch).

It runs inside environments (the standard library and pytest, from the test-only folder on
PYTHONPATH) and fixes what pytest-xdist silently gets wrong for this use:

- **sys.path.** xdist hands every `popen` worker the CONTROLLER's `sys.path`, so each worker would
  import the controller environment's vLLM and report the controller's results as its own branch's.
  When this module is imported in a worker (before any conftest, before vLLM), it puts back the path
  the worker's own interpreter starts with; each worker then reports where its `vllm` came from and
  the host checks it.
- **No distribution.** `-n0`, `-p no:xdist` or `--dist no` would run every test once, in the
  controller: the controller refuses to start a session that does not distribute (`--dist each`).
- **JUnit names no interpreter** and repeats each test once per worker: the controller labels every
  test report with the branch of the worker it came from (a `difftest_code` property), from the
  channel it arrived on, not from anything the worker says.
- **Collection errors are merged.** A module that fails to import in one environment is reported
  once, unlabelled, for all workers with the same error: each worker prefixes its collection errors
  with its branch, so none is merged away, and the controller records what each worker collected.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from difftest.probe.tests.contract import (
    CODE_ENV,
    CODE_PROPERTY,
    GRAFT_MARK,
    GRAFTS_ENV,
    INHERIT_PATH_ENV,
    LABEL,
    NODEID_PROPERTY,
    OUT_ENV,
    TRACE_ENV,
)

_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
_ACTIVE = bool(os.environ.get(OUT_ENV))
_CODE = os.environ.get(CODE_ENV, "")


def own_sys_path() -> list[str]:
    """The sys.path this interpreter starts with (its `.pth` files processed), asked from a fresh
    one."""
    done = subprocess.run(
        [sys.executable, "-c", "import json, sys; print(json.dumps(sys.path))"],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout)


if _WORKER and _ACTIVE and not os.environ.get(INHERIT_PATH_ENV):
    sys.path[:] = own_sys_path()

# The host stops a session past its time limit as Ctrl-C does (SIGINT, then a kill, `run.suites.
# measure._stop`). A difftest started with SIGINT ignored (`difftest run &` in a CI script) hands
# that on, and the session would then be killed having written nothing of what finished.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# A worker traces the files the job names from here on, before any conftest or test imports vLLM
# (`probe.tracing`); what it executed goes to the controller with the worker's other facts.
from difftest.probe.tracing import Tracing  # noqa: E402

_TRACING = (
    Tracing.start(json.loads(os.environ[TRACE_ENV]), preload=False)
    if _WORKER and _ACTIVE and os.environ.get(TRACE_ENV)
    else None
)

import pytest  # noqa: E402  (after the path is right: nothing of the controller's may be imported first)

_collected: dict[str, list[str]] = {}
_workers: dict[str, dict[str, object]] = {}
#: (branch, node id) -> what its reports so far say: the record written when its teardown arrives.
_tests: dict[tuple[str, str], dict[str, str | float]] = {}


def _code_of(node: object) -> str:
    """The branch of the worker a report came through (its gateway's spec), or `controller`."""
    if node is None:
        return "controller"
    spec = getattr(getattr(node, "gateway", None), "spec", None)
    return str((getattr(spec, "env", None) or {}).get(CODE_ENV) or getattr(spec, "id", "unknown"))


def _out() -> Path:
    return Path(os.environ[OUT_ENV])


def _append(record: dict[str, object]) -> None:
    with open(_out() / "progress.jsonl", "a", encoding="utf-8") as stream:
        stream.write(json.dumps(record) + "\n")


# -- the controller --------------------------------------------------------------------------


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    if not _ACTIVE or _WORKER:
        return
    config = session.config
    if not config.pluginmanager.hasplugin("dsession") or config.getoption("dist", "no") != "each":
        raise pytest.UsageError(
            "difftest: this session must distribute every test to every branch (--dist each, one "
            "--tx per branch), but distribution is off (-n0, -p no:xdist or --dist no): results "
            "would all come from the controller's environment"
        )


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if not _ACTIVE or _WORKER:
        return
    code = _code_of(getattr(report, "node", None))
    names = {name for name, _ in report.user_properties}
    if CODE_PROPERTY not in names:
        report.user_properties += [(CODE_PROPERTY, code), (NODEID_PROPERTY, report.nodeid)]
    state = _tests.setdefault(
        (code, report.nodeid), {"outcome": "passed", "message": "", "duration_s": 0.0}
    )
    state["duration_s"] = round(float(state["duration_s"]) + report.duration, 6)
    if report.failed and state["outcome"] in ("passed", "skipped", "xfailed"):
        state.update(
            outcome="failed" if report.when == "call" else "error", message=_first_line(report)
        )
    elif report.skipped and state["outcome"] == "passed":
        state.update(
            outcome="xfailed" if hasattr(report, "wasxfail") else "skipped",
            message=_first_line(report),
        )
    if report.when == "teardown":
        # Kept as it comes: a session stopped before it writes its JUnit report still has these.
        _append({"code": code, "test": report.nodeid, **state})


def _first_line(report: pytest.TestReport) -> str:
    """The failure's crash line (`assert 3 == 6`) or the skip reason."""
    longrepr = report.longrepr
    crash = getattr(longrepr, "reprcrash", None)
    if crash is not None:
        return str(crash.message).strip().splitlines()[0] if str(crash.message).strip() else ""
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    lines = [
        line
        for line in str(longrepr or getattr(report, "wasxfail", "")).splitlines()
        if line.strip()
    ]
    return lines[-1].strip() if lines else ""


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node: object, ids: list[str]) -> None:
    if not _ACTIVE:
        return
    code = _code_of(node)
    _collected.setdefault(code, [])
    _collected[code] += [i for i in ids if i not in set(_collected[code])]
    _append({"code": code, "collected": len(_collected[code])})


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: object, error: object) -> None:
    if not _ACTIVE:
        return
    code = _code_of(node)
    output = getattr(node, "workeroutput", None) or {}
    found = dict(output.get("difftest") or {})
    found["down"] = None if error is None else str(error)
    _workers.setdefault(code, {}).update(found)


def pytest_sessionfinish(session: pytest.Session) -> None:
    if not _ACTIVE:
        return
    if _WORKER:
        vllm = sys.modules.get("vllm")
        # pytest-xdist gives a worker's config `workeroutput`; pytest's own Config type has none.
        session.config.workeroutput["difftest"] = {  # type: ignore[attr-defined]
            "code": _CODE,
            "python": sys.executable,
            "prefix": sys.prefix,
            "vllm": getattr(vllm, "__file__", None),
            **({"coverage": _TRACING.record()} if _TRACING is not None else {}),
        }
        return
    found = {code: {**_workers.get(code, {}), "collected": ids} for code, ids in _collected.items()}
    for code, info in _workers.items():
        found.setdefault(code, {**info, "collected": []})
    (_out() / "workers.json").write_text(json.dumps(found, indent=1, sort_keys=True))


# -- every worker ----------------------------------------------------------------------------


@pytest.hookimpl(tryfirst=True)
def pytest_collectreport(report: pytest.CollectReport) -> None:
    """Label this worker's collection failures and skips, so xdist does not merge them across
    workers."""
    if not (_ACTIVE and _WORKER) or report.passed:
        return
    label = LABEL.format(_CODE, report.nodeid)
    if report.failed:
        report.longrepr = label + str(report.longrepr)
    elif isinstance(report.longrepr, tuple) and len(report.longrepr) == 3:
        path, line, message = report.longrepr
        report.longrepr = (path, line, label + str(message))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Of a grafted copy of a branch's test module, keep only the tests that branch adds or
    changes."""
    if not (_ACTIVE and _WORKER):
        return
    allowed = json.loads(os.environ.get(GRAFTS_ENV) or "[]")
    keep, drop = [], []
    for item in items:
        grafted = GRAFT_MARK in item.nodeid.split("::", 1)[0]
        if not grafted or any(_selects(a, item.nodeid) for a in allowed):
            keep.append(item)
        else:
            drop.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def _selects(argument: str, nodeid: str) -> bool:
    return nodeid == argument or nodeid.startswith((argument + "::", argument + "["))
