"""Reading one test session: the controller's JUnit XML and the plugin's `workers.json`, per branch.

JUnit alone cannot be trusted here: it repeats each test once per worker
without naming the interpreter, and reports a module that failed to collect in
one environment once, unlabelled. The plugin fixes both (a `difftest_code`
property on every test, given by the controller from the channel the report
came through; a `[difftest code=... node=...]` prefix on collection errors), and
`workers.json` says what each worker collected, where its `vllm` came from and, when the job
traces files, what the worker executed of them.
From these, every branch gets exactly one outcome per test any branch
collected:

- a test case labelled with the branch: its outcome (passed, failed, error, skipped, xfailed);
- a test the branch did not collect: `not-collected`, with that branch's collection error;
- a test the branch collected but never reported (a crash, the session's time limit): `not-run`.

A branch whose worker imported vLLM from anywhere but its own environment, or
never reported back, is returned as a problem: none of its results count.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

from pydantic import ValidationError

from difftest.core.records import ProbeCoverage, TestOutcome
from difftest.core.suites import RawOutcome, SuiteSession
from difftest.core.verdicts import one_line
from difftest.probe.tests.contract import CODE_PROPERTY, GRAFT_MARK, LABEL, NODEID_PROPERTY
from difftest.run.probes.files import read_probe_file, read_probe_text
from difftest.run.probes.read_records import validation_summary

#: The plugin's collection-error label (`contract.LABEL`), as a pattern.
_LABEL = re.compile(
    re.escape(LABEL).replace(r"\{\}", "{}").format(r"(?P<code>[^\s\]]+)", r"(?P<node>[^\]]*)") + "?"
)
#: How much of a failure's text a record keeps.
MAX_MESSAGE = 300


def read_session(
    session: SuiteSession, out: Path, envs: dict[str, Path], process_error: str | None
) -> tuple[list[RawOutcome], dict[str, str]]:
    """(one outcome per branch per test, {branch: why none of its results count})."""
    problems: dict[str, str] = {}
    workers = _workers(out / "workers.json")
    cases, collect_errors, strays = _junit(out / "junit.xml")
    if not (out / "junit.xml").is_file():
        cases = _progress(
            out / "progress.jsonl"
        )  # stopped before its report: what finished still counts
    if strays:
        for code in envs:
            problems[code] = (
                f"{len(strays)} test(s) ran in the controller instead of a branch worker: "
                "distribution failed"
            )
    for code, env in envs.items():
        info = workers.get(code)
        if info is None:
            if code not in problems:
                problems[code] = (
                    process_error
                    or "its pytest worker never reported back (it did not start or crashed)"
                )
            continue
        origin = info.get("vllm")
        if origin and not Path(origin).resolve().is_relative_to((env / "overlay").resolve()):
            problems[code] = (
                f"its pytest worker imported vLLM from {origin}, "
                f"not from its own environment {env}: its results would be another branch's"
            )
    every_test = list(
        dict.fromkeys(
            [
                *(t for ids in (w.get("collected") or [] for w in workers.values()) for t in ids),
                *(test for _, test in cases),
            ]
        )
    )
    outcomes: list[RawOutcome] = []
    for code in envs:
        if code in problems:
            continue
        collected = set(workers[code].get("collected") or [])
        down = workers[code].get("down")
        errors = {node: message for (c, node), message in collect_errors.items() if c == code}
        for test in every_test:
            case = cases.get((code, test))
            if case is not None:
                outcome, message, duration = case
            elif test not in collected:
                outcome, message, duration = "not-collected", _collect_error(test, errors), 0.0
            else:
                outcome, message, duration = (
                    "not-run",
                    down or process_error or "the worker never reported this test",
                    0.0,
                )
            outcomes += _owned(session, code, test, outcome, message, duration)
        for node, message in errors.items():
            # A module that failed here and collected nowhere else has no test ids: it stands for
            # them.
            if not any(_under(t, node) for t in every_test):
                outcomes += _owned(session, code, node, "not-collected", message, 0.0)
    return _unique(outcomes), problems


def _owned(
    session: SuiteSession, code: str, test: str, outcome: TestOutcome, message: str, duration: float
) -> list[RawOutcome]:
    """The outcome under its source and its node id in that source's own tree (grafts mapped
    back)."""
    path, sep, rest = test.partition("::")
    owner = session.owners.get(path)
    if owner is None:
        if GRAFT_MARK in path:
            return []  # a grafted copy's test the plan did not ask for
        return [RawOutcome(session.default_source, code, test, outcome, message, duration)]
    label, original = owner
    return [RawOutcome(label, code, original + sep + rest, outcome, message, duration)]


def _unique(outcomes: list[RawOutcome]) -> list[RawOutcome]:
    seen: dict[tuple[str, str, str], RawOutcome] = {}
    for o in outcomes:
        seen.setdefault((o.source, o.code, o.test), o)
    return list(seen.values())


def session_coverage(out: Path, codes: list[str]) -> dict[str, ProbeCoverage]:
    """What each branch's worker traced of the job's files (the plugin hands it to the controller,
    which writes it into `workers.json`), validated here: `unknown` with why where it is there
    but invalid. A worker that never reported (its session timed out, the worker died) is left
    out: what only it ran reads unreached, never reached, and the branch's other sessions and
    probes keep counting."""
    workers = _workers(out / "workers.json")
    found: dict[str, ProbeCoverage] = {}
    for code in codes:
        raw = (workers.get(code) or {}).get("coverage")
        if raw is None:
            continue
        try:
            found[code] = ProbeCoverage.model_validate(raw)
        except ValidationError as exc:
            why = f"its pytest worker's coverage is invalid: {validation_summary(exc)}"
            found[code] = ProbeCoverage(status="unknown", why=why)
    return found


def _workers(path: Path) -> dict[str, dict]:
    try:
        data = json.loads(read_probe_text(path))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _junit(
    path: Path,
) -> tuple[
    dict[tuple[str, str], tuple[TestOutcome, str, float]], dict[tuple[str, str], str], list[str]
]:
    """({(branch, node id): (outcome, message, seconds)}, {(branch, node): collection error}, tests
    run unlabelled)."""
    cases: dict[tuple[str, str], tuple[TestOutcome, str, float]] = {}
    collect_errors: dict[tuple[str, str], str] = {}
    strays: list[str] = []
    try:
        root = ET.fromstring(read_probe_file(path))
    except (OSError, ET.ParseError):
        return cases, collect_errors, strays
    for case in root.iter("testcase"):
        props = {p.get("name"): p.get("value") or "" for p in case.iter("property")}
        children = [c for c in case if c.tag in ("failure", "error", "skipped")]
        code, node = props.get(CODE_PROPERTY), props.get(NODEID_PROPERTY)
        if code is None or node is None:
            # Collection errors: JUnit merges every worker's into one case; each is labelled by its
            # worker. Anything else unlabelled is a test interrupted before its teardown reached the
            # controller.
            for child in children:
                label = _LABEL.search(_text(child))
                if label is not None:
                    collect_errors[(label["code"], label["node"])] = _message(
                        _LABEL.sub("", _text(child), count=1)
                    )
            continue
        if code == "controller":
            strays.append(node)
            continue
        cases[(code, node)] = _outcome(children, float(case.get("time") or 0.0))
    return cases, collect_errors, strays


def _progress(path: Path) -> dict[tuple[str, str], tuple[TestOutcome, str, float]]:
    """The finished tests the controller recorded as they came, when there is no JUnit report."""
    cases: dict[tuple[str, str], tuple[TestOutcome, str, float]] = {}
    try:
        lines = read_probe_text(path).splitlines()
    except OSError:
        return cases
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a torn last line
        if isinstance(record, dict) and "outcome" in record and record.get("outcome") in _OUTCOMES:
            cases[(str(record["code"]), str(record["test"]))] = (
                record["outcome"],
                _message(str(record.get("message") or "")),
                float(record.get("duration_s") or 0.0),
            )
    return cases


_OUTCOMES = ("passed", "failed", "error", "skipped", "xfailed")


def _outcome(children: list[ET.Element], seconds: float) -> tuple[TestOutcome, str, float]:
    tags = {c.tag: c for c in children}
    failures: tuple[tuple[str, TestOutcome], ...] = (("failure", "failed"), ("error", "error"))
    for tag, outcome in failures:
        if tag in tags:
            return outcome, _crash_line(tags[tag]), seconds
    if "skipped" in tags:
        skipped = tags["skipped"]
        kind: TestOutcome = (
            "xfailed" if (skipped.get("type") or "") == "pytest.xfail" else "skipped"
        )
        return kind, _message(skipped.get("message") or _text(skipped)), seconds
    return "passed", "", seconds


def _crash_line(element: ET.Element) -> str:
    """The first line of the crash message (`assert 3 == 6`), else the report's `E` lines."""
    lines = [line.strip() for line in (element.get("message") or "").splitlines() if line.strip()]
    return _message(lines[0]) if lines else _message(element.text or "")


def _text(element: ET.Element) -> str:
    return (element.text or "") + " " + (element.get("message") or "")


def _message(text: str) -> str:
    """The line that says what failed (an `E   ...` assertion line, else the last line), cut
    short."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    e_lines = [line[1:].strip() for line in lines if line.startswith("E ")]
    line = e_lines[0] if e_lines else one_line(text)
    return line if len(line) <= MAX_MESSAGE else line[: MAX_MESSAGE - 3] + "..."


def _collect_error(test: str, errors: dict[str, str]) -> str:
    for node, message in errors.items():
        if _under(test, node):
            return f"could not collect {node}: {message}"
    return "not collected in this environment (its collection differs from the other branches')"


def _under(test: str, node: str) -> bool:
    """Whether node id `test` lies in collector `node` (a folder, a module or a class)."""
    return test == node or test.startswith((node + "::", node.rstrip("/") + "/"))
