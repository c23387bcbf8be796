"""Changed-line coverage on the host: which lines a branch changes, which of them its runs executed
(traced here by the real coverage.py, as a probe traces), the one line every report prints, and
the union of shards."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import coverage
import git
import pytest

from difftest.build.refs.diff import changed_lines
from difftest.core.coverage import judge_branch, line_ranges, merge_coverage
from difftest.core.evidence import ChangedFileCoverage, CoverageEvidence
from difftest.core.records import FileCoverage, ProbeCoverage
from difftest.run.coverage.changed import Executed, file_coverage
from difftest.run.coverage.judge import _text
from difftest.run.probes.read_records import check_lines

OLD = """\
def accepted(drafts, emitted):
    count = 0
    for token in drafts:
        count += 1
    return count
"""

NEW = """\
def accepted(drafts, emitted):
    count = 0
    for token in drafts:
        if count >= emitted:
            break
        count += 1
    return count
"""


def changed_line_numbers(old: str | None, new: str, folder: Path | None = None) -> set[int]:
    """What `refs.diff.changed_lines` says of two versions of one file, in a real repository."""
    import tempfile

    root = Path(folder or tempfile.mkdtemp(prefix="difftest-changed-"))
    repo = git.Repo.init(root)
    with repo.config_writer() as config:
        config.set_value("user", "name", "t").set_value("user", "email", "t@example.org")
    target = root / "vllm" / "a.py"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes((old or "").encode())
    repo.index.add(["vllm/a.py"]) if old is not None else None
    repo.index.commit("old")
    first = repo.head.commit.hexsha
    target.write_bytes(new.encode())
    repo.index.add(["vllm/a.py"])
    repo.index.commit("new")
    return changed_lines(repo, first, repo.head.commit.hexsha, "vllm/a.py")


def test_changed_lines_are_the_branchs_lines_that_differ_from_the_baseline(tmp_path) -> None:
    assert changed_line_numbers(OLD, NEW, tmp_path / "a") == {4, 5}
    assert changed_line_numbers(None, NEW, tmp_path / "b") == set(range(1, 8))
    # A deletion counts the lines on both sides of it.
    assert changed_line_numbers(NEW, OLD, tmp_path / "c") == {3, 4}
    # A form feed or U+2028 is no line end to Python, nor to git (str.splitlines would count it).
    old = "x = 1\n# a\x0cb \u2028 c\ndef f():\n    return 1\ny = 2\n"
    assert changed_line_numbers(old, old.replace("return 1", "return 2"), tmp_path / "d") == {4}


def _traced(tmp_path: Path, source: str, call: str) -> ProbeCoverage:
    """Run `call` on `source` as a module under coverage.py, as `probe.tracing` traces a probe."""
    module = tmp_path / "vllm" / "counting.py"
    module.parent.mkdir(parents=True)
    module.write_text(source)
    tracer = coverage.Coverage(
        data_file=None, branch=True, include=[str(module)], config_file=False
    )
    tracer.start()
    try:
        spec = importlib.util.spec_from_file_location("difftest_counting", module)
        assert spec is not None and spec.loader is not None
        loaded = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(loaded)
        eval(call, {"m": loaded})
    finally:
        tracer.stop()
    data = tracer.get_data()
    [measured] = data.measured_files()
    return ProbeCoverage(
        status="ok",
        files={
            "vllm/counting.py": FileCoverage(
                lines=sorted(data.lines(measured) or []),
                arcs=sorted(data.arcs(measured) or []),
            )
        },
    )


def test_a_branch_point_taken_one_way_and_a_line_never_reached_are_named(tmp_path) -> None:
    # Never cut: the `if` runs but never breaks.
    traced = _traced(tmp_path, NEW, "m.accepted([1, 2], 5)")
    executed = Executed.of([("scheduler", traced)])
    changed = changed_line_numbers(OLD, NEW, tmp_path / "repo")
    found = file_coverage("pr", "vllm/counting.py", NEW, changed, executed)
    assert (found.status, found.lines, found.reached, found.unreached) == (
        "traced",
        [4, 5],
        [4],
        [5],
    )
    assert found.arcs_missing == [(4, 5)]
    verdict = judge_branch("pr", [found])
    assert verdict.status == "not verified"
    assert verdict.summary == (
        "changed lines reached 1/2; not reached: counting.py 5; taken one way only: counting.py 4"
    )


def test_every_changed_line_run_both_ways_is_verified(tmp_path) -> None:
    traced = _traced(tmp_path, NEW, "(m.accepted([1, 2], 5), m.accepted([1, 2, 3], 1))")
    changed = changed_line_numbers(OLD, NEW, tmp_path / "repo")
    found = file_coverage("pr", "vllm/counting.py", NEW, changed, Executed.of([("t", traced)]))
    assert (found.reached, found.unreached, found.arcs_missing) == ([4, 5], [], [])
    assert judge_branch("pr", [found]).summary == "changed lines reached 2/2"
    assert judge_branch("pr", [found]).status == "verified"


def test_a_probe_that_cannot_vouch_for_its_coverage_makes_the_branch_unknown_never_verified(
    tmp_path,
) -> None:
    good = _traced(tmp_path, NEW, "(m.accepted([1, 2], 5), m.accepted([1, 2, 3], 1))")
    stopped = ProbeCoverage(status="unknown", why="the tracer was stopped while the probe ran")
    executed = Executed.of([("scheduler", good), ("engine", stopped)])
    assert executed.unknown == ["engine tier: the tracer was stopped while the probe ran"]


def test_a_changed_file_that_does_not_parse_or_is_not_python_is_not_traced() -> None:
    broken = file_coverage("pr", "vllm/x.py", "def f(:\n", {1}, Executed())
    assert broken.status == "not traced" and "does not parse" in broken.why
    other = ChangedFileCoverage(
        branch="pr", file="vllm/kernel.cu", status="not traced", why="not Python"
    )
    verdict = judge_branch("pr", [other])
    assert verdict.status == "not verified"
    assert "not traced: kernel.cu (not Python)" in verdict.summary
    assert judge_branch("pr", []).status == "unchanged"


def test_line_ranges_read_as_a_person_writes_them() -> None:
    assert line_ranges([1188, 1190, 1189, 1201, 7]) == "7, 1188-1190, 1201"
    assert line_ranges([]) == ""


def test_shards_join_what_any_of_them_reached() -> None:
    def part(reached: list[int], missing: list[tuple[int, int]]) -> CoverageEvidence:
        entry = ChangedFileCoverage(
            branch="pr",
            file="vllm/a.py",
            status="traced",
            lines=[4, 5, 9],
            reached=reached,
            unreached=[n for n in [4, 5, 9] if n not in reached],
            arcs_missing=missing,
        )
        return CoverageEvidence(changed=[entry], branches=[judge_branch("pr", [entry])])

    # Shard 1 took 4's arc to 9 only, shard 2 took 4's arc to 5 only: both ways in all.
    merged = merge_coverage([part([4, 9], [(4, 5)]), part([4, 5], [(4, 9)])])
    assert merged is not None
    [entry] = merged.changed
    assert (entry.reached, entry.unreached, entry.arcs_missing) == ([4, 5, 9], [], [])
    assert merged.branches[0].status == "verified"
    # A branch point one shard never reached keeps the other shard's missing arc.
    merged = merge_coverage([part([9], []), part([4, 5], [(4, 9)])])
    assert merged is not None and merged.changed[0].arcs_missing == [(4, 9)]
    # A shard without coverage never lets the merge read verified (nor say nothing).
    unknown = merge_coverage([part([4, 5, 9], []), None])
    assert unknown is not None and unknown.branches[0].status == "unknown"
    assert merge_coverage([None, None]) is None
    edited = part([4, 5, 9], [])
    edited.changed[0].lines.remove(5)
    disagree = merge_coverage([part([4, 9], [(4, 5)]), edited])
    assert disagree is not None and disagree.branches[0].status == "unknown"


def _lines(*records: str) -> list[str]:
    header = (
        '{"kind": "header", "protocol": 4, "python": "3", "import_s": 0, "setup_s": 0, '
        '"nonce": "n"}'
    )
    return [header, *records, '{"kind": "trailer", "runs": 0, "nonce": "n"}']


JOB = {"protocol": 4, "entry": "scheduler", "work_dir": "w", "run_timeout_s": None, "scenarios": []}
TRACED_JOB = {**JOB, "trace": {"site": "s", "paths": ["vllm/"]}}
GOOD = (
    '{"kind": "coverage", "status": "ok", "why": "", '
    '"files": {"vllm/a.py": {"lines": [1], "arcs": [[-1, 1]]}}, "nonce": "n"}'
)


def test_the_coverage_record_is_read_as_every_record_is_or_reads_unknown() -> None:
    read = check_lines(_lines(GOOD), "n", TRACED_JOB, "scheduler", exited_cleanly=True).coverage()  # type: ignore[arg-type]
    assert read is not None and read.status == "ok" and read.files["vllm/a.py"].lines == [1]
    # Not asked for: nothing is traced, whatever the branch wrote.
    assert check_lines(_lines(GOOD), "n", JOB, "scheduler", True).coverage() is None  # type: ignore[arg-type]
    for records, says in [
        ([], "reported no coverage"),
        ([GOOD, GOOD], "repeats the coverage record"),
        ([GOOD.replace("[1]", '["1"]')], "invalid coverage record"),
        ([GOOD.replace('"nonce": "n"', '"nonce": "forged"')], "cannot be trusted"),
    ]:
        read = check_lines(_lines(*records), "n", TRACED_JOB, "scheduler", True).coverage()  # type: ignore[arg-type]
        assert read is not None and read.status == "unknown" and says in read.why, (records, read)


def test_the_probes_tracer_reads_unknown_when_the_branch_replaces_or_stops_it(
    tmp_path, monkeypatch
) -> None:
    """`probe.tracing` in this process, on a folder that holds coverage.py (this one's); the host
    has no vLLM, so an empty package of that name stands for the environment's."""
    from difftest.probe.tracing import Tracing

    (tmp_path / "env" / "vllm").mkdir(parents=True)
    (tmp_path / "env" / "vllm" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path / "env"))

    site = str(Path(coverage.__file__).parent.parent)
    previous = sys.gettrace()
    for disturb, says in [
        (lambda: sys.settrace(lambda *_a: None), "replaced"),
        (lambda: sys.settrace(None), "stopped"),
        (lambda: None, ""),
    ]:
        tracing = Tracing.start({"site": site, "paths": ["vllm/v1/core/"]})
        assert tracing is not None and not tracing.problem
        disturb()
        record = tracing.record()
        sys.settrace(previous)
        if says:
            assert record["status"] == "unknown" and says in record["why"], record
        else:
            assert record["status"] == "ok", record
    missing = Tracing.start({"site": str(tmp_path / "none"), "paths": ["vllm/"]})
    assert missing is not None and missing.record()["status"] == "unknown"
    other = Tracing.start({"site": site, "paths": ["vllm/"], "version": "0.0"})
    assert other is not None and other.record()["status"] == "unknown"
    assert "not the tracer's 0.0" in other.record()["why"]


COUNTING = "def count(n):\n    if n > 1:\n        return n + 1\n    return n\n"


@contextmanager
def _tracing_stand_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module: str
) -> Iterator[tuple]:
    """(the tracer, the module): a stand-in `vllm` package holding `module` (COUNTING), traced by
    `probe.tracing` in this process with this coverage.py, imported after the tracer started."""
    import importlib

    from difftest.probe import tracing as tracing_module

    (tmp_path / "env" / "vllm").mkdir(parents=True)
    (tmp_path / "env" / "vllm" / "__init__.py").write_text("")
    (tmp_path / "env" / "vllm" / f"{module}.py").write_text(COUNTING)
    monkeypatch.syspath_prepend(str(tmp_path / "env"))
    monkeypatch.delitem(sys.modules, "vllm", raising=False)
    site = str(Path(coverage.__file__).parent.parent)
    previous = sys.gettrace()
    tracing = tracing_module.Tracing.start({"site": site, "paths": [f"vllm/{module}.py"]})
    assert tracing is not None and not tracing.problem
    try:
        yield tracing, importlib.import_module(f"vllm.{module}")
        tracing.record()
    finally:
        sys.settrace(previous)
        sys.modules.pop(f"vllm.{module}", None)
        sys.modules.pop("vllm", None)


@pytest.mark.parametrize("read", ["collector", "public API"])
def test_a_warm_probes_tracer_reports_what_each_job_ran(tmp_path, monkeypatch, read) -> None:
    """Each record of a warm probe holds what that job ran: taken out of coverage.py's running
    collector, or (where the collector is not as expected) through its public API, which must give
    the same."""
    from difftest.probe import tracing as tracing_module

    if read == "public API":
        monkeypatch.setattr(tracing_module, "_take_since_last", lambda _coverage: None)
    with _tracing_stand_in(tmp_path, monkeypatch, "counting_ab") as (tracing, counting_ab):
        counting_ab.count(2)
        first = tracing.record(again=True)
        counting_ab.count(1)
        second = tracing.record(again=True)
        third = tracing.record(again=True)
        counting_ab.count(3)
        fourth = tracing.record(again=True)
    path = "vllm/counting_ab.py"
    assert first["status"] == second["status"] == third["status"] == "ok", (first, second)
    assert first["files"][path]["lines"] == [1, 2, 3]  # the import's `def`, then n > 1
    assert [2, 3] in first["files"][path]["arcs"] and [2, 4] not in first["files"][path]["arcs"]
    assert second["files"][path] == {"lines": [2, 4], "arcs": [[-1, 2], [2, 4], [4, -1]]}
    assert third["files"] == {}, "a job that ran nothing of the file reports nothing of it"
    # A job that runs what an earlier one ran reports it again: each record is its job's own.
    assert fourth["files"][path] == {"lines": [2, 3], "arcs": [[-1, 2], [2, 3], [3, -1]]}


def test_a_thread_started_in_one_job_is_still_traced_in_the_next(tmp_path, monkeypatch) -> None:
    """A pool thread the branch starts in one example and reuses in a later one (vLLM's
    structured-output executor, say) keeps its tracer between records (coverage.py's public way,
    stop and start, would leave it untraced: the fallback's known loss)."""
    from concurrent.futures import ThreadPoolExecutor

    with _tracing_stand_in(tmp_path, monkeypatch, "counting_th") as (tracing, counting_th):
        with ThreadPoolExecutor(1) as pool:
            pool.submit(counting_th.count, 2).result()
            tracing.record(again=True)
            pool.submit(counting_th.count, 1).result()  # the same thread, in the next job
            second = tracing.record(again=True)
    assert second["status"] == "ok" and second["files"]["vllm/counting_th.py"]["lines"] == [2, 4]


def test_a_pass_whose_changed_code_did_not_all_run_wears_its_own_mark_in_every_report() -> None:
    """The conclusion, and the terminal and Markdown marks drawn from it: never a plain pass."""
    from difftest.reports.conclusion import conclude
    from difftest.reports.markdown import ICONS as MD_ICONS
    from difftest.reports.terminal import ICONS as TERMINAL_ICONS
    from tests.factories import BRANCH, make_evidence

    entry = ChangedFileCoverage(
        branch=BRANCH, file="vllm/a.py", status="traced", lines=[4, 5], reached=[4], unreached=[5]
    )
    unverified = CoverageEvidence(changed=[entry], branches=[judge_branch(BRANCH, [entry])])
    concluded = conclude(make_evidence(coverage=unverified))
    (standing,) = concluded.standings
    assert concluded.verdict == (
        f"{BRANCH} passes every run; not verified: {BRANCH} (changed code that no run executed, "
        "or whose coverage is unknown)"
    )
    assert standing.verdict == "pass" and standing.unverified and standing.mark == "unverified"
    assert standing.headline.endswith("not verified: its changed code is not all checked")
    assert standing.coverage == "changed lines reached 1/2; not reached: a.py 5"
    assert TERMINAL_ICONS[standing.mark] != TERMINAL_ICONS["pass"]
    assert MD_ICONS[standing.mark] != MD_ICONS["pass"]
    (plain,) = conclude(make_evidence()).standings
    assert plain.mark == "pass" and not plain.coverage


def test_junit_names_each_branchs_changed_code_coverage_in_one_property() -> None:
    from xml.etree import ElementTree

    from difftest.reports.junit import render_junit
    from tests.factories import BRANCH, make_evidence

    entry = ChangedFileCoverage(
        branch=BRANCH, file="vllm/a.py", status="traced", lines=[4, 5], reached=[4], unreached=[5]
    )
    coverage = CoverageEvidence(changed=[entry], branches=[judge_branch(BRANCH, [entry])])
    root = ElementTree.fromstring(render_junit(make_evidence(coverage=coverage)))
    said = root.find(".//property[@name='changed-code']")
    assert said is not None
    assert said.get("value") == "not verified: changed lines reached 1/2; not reached: a.py 5"
    case = root.find(".//testcase[@name='changed code']")
    assert case is not None and case.find("skipped") is not None
    assert root.find("testsuite").get("skipped") == "1"  # type: ignore[union-attr]


DEFINES = """\
import os


@staticmethod
def scaled(a,
           n=8):
    return a * n


def caller():
    return 1
"""


def test_a_changed_def_line_is_reached_only_when_the_function_ran_not_when_it_was_imported(
    tmp_path,
) -> None:
    changed = {4, 5, 6}  # the decorator, the def, the signature's default
    imported = Executed.of([("t", _traced(tmp_path / "a", DEFINES, "m.caller()"))])
    found = file_coverage("pr", "vllm/counting.py", DEFINES, changed, imported)
    assert (found.lines, found.reached) == ([4, 5], [])  # 6 is the def statement's second line
    called = Executed.of([("t", _traced(tmp_path / "b", DEFINES, "m.scaled.__func__(2)"))])
    found = file_coverage("pr", "vllm/counting.py", DEFINES, changed, called)
    assert (found.lines, found.reached, found.unreached) == ([4, 5], [4, 5], [])


def test_a_file_the_host_cannot_analyse_reads_not_traced_and_loses_nothing_else() -> None:
    deep = "x = " + "+".join(["1"] * 20000) + "\n"
    found = file_coverage("pr", "vllm/deep.py", deep, {1}, Executed())
    assert (
        found.status == "not traced"
        and "could not be analysed" in found.why
        or ("does not parse" in found.why)
    )


def test_a_source_file_is_decoded_as_python_decodes_it() -> None:
    assert _text("\ufeffx = 1\n".encode()) == "x = 1\n"
    assert (
        _text(b"# -*- coding: latin-1 -*-\nx = '\xe9'\n") == "# -*- coding: latin-1 -*-\nx = 'é'\n"
    )
    assert _text(b"\xff\xfe\x00") is None


def test_a_changed_file_that_cannot_run_on_this_platform_is_named_as_such() -> None:
    """#48: a change to a GPU-only module reads "cannot run here", not "not reached"; the same file
    where some run did reach it is judged line by line."""
    path = "vllm/v1/worker/xpu_worker.py"
    gpu = file_coverage("fix", path, NEW, {4, 5}, Executed(traced_probes=1))
    assert gpu.status == "not traced"
    assert gpu.why == "GPU-only: Intel XPU only; cannot run here"
    verdict = judge_branch("fix", [gpu])
    assert verdict.status == "not verified"
    assert (
        "not traced: xpu_worker.py (GPU-only: Intel XPU only; cannot run here)" in verdict.summary
    )
    ran = Executed(lines={path: {1, 2, 3}}, traced_probes=1)
    assert file_coverage("fix", path, NEW, {4, 5}, ran).status == "traced"
