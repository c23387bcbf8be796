"""The gate's skip rule outside the stats path (`run.coverage.skip_rule`) on a real git history.
The base's traced run is given here as what it executed (the e2e gate tests run it for real:
tests/e2e/test_gate_cli.py)."""

from __future__ import annotations

from pathlib import Path

import git
import pytest

from difftest.build.gate_changes import HeadChanges
from difftest.build.refs.diff import changed_files
from difftest.run.coverage.changed import Executed
from difftest.run.coverage.skip_rule import check_skip

pytestmark = pytest.mark.quick

PARAMS = "vllm/params.py"
SOURCE = (
    "def used(x):\n"  # 1
    "    y = x + 1\n"  # 2
    "    return y\n"  # 3
    "\n"  # 4
    "def unused(x):\n"  # 5
    "    z = (x,\n"  # 6
    "         2)\n"  # 7
    "    return z\n"  # 8
)
#: What the base's runs executed: the module, and `used`.
RAN = {PARAMS: {1, 2, 3, 5}}


def _history(tmp_path: Path, edit: dict[str, str | None]) -> HeadChanges:
    """A repository whose base holds SOURCE and whose head applies `edit` (path -> text, None
    deletes)."""
    repo = git.Repo.init(tmp_path / "repo")
    with repo.config_writer() as config:
        config.set_value("user", "name", "t").set_value("user", "email", "t@example.org")
    root = Path(repo.working_tree_dir or "")
    (root / "vllm").mkdir()
    (root / PARAMS).write_text(SOURCE)
    repo.index.add([PARAMS])
    base = repo.index.commit("base").hexsha
    for path, text in edit.items():
        if text is None:
            repo.index.remove([path], working_tree=True)
            continue
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
        repo.index.add([path])
    head = repo.index.commit("head").hexsha
    return HeadChanges(repo, base, head, changed_files(repo, base, head), [])


def _traced(root: Path, ran=RAN, unknown=()):
    calls: list[int] = []

    def trace():
        calls.append(1)
        executed = Executed(lines={k: set(v) for k, v in ran.items()}, traced_probes=1)
        executed.unknown.extend(unknown)
        return executed, ["scheduler"], 3, root / "vllm"

    return trace, calls


def test_a_change_inside_a_function_no_scenario_runs_is_skipped_naming_what_was_checked(tmp_path):
    head = _history(tmp_path, {PARAMS: SOURCE.replace("2)", "3)")})
    trace, _ = _traced(Path(head.repo.working_tree_dir or ""))
    # The base's file as its probes imported it: the repository's own, checked out at base.
    head.repo.git.checkout(head.base_sha)
    check = check_skip(head, "main", trace)
    assert check.skip
    assert check.why == (
        "none of its changed lines in vllm/params.py ran on main in 3 scenario(s) of the "
        "scheduler tier(s) (the tests tier's sessions are not traced)"
    )


@pytest.mark.parametrize(
    ("new", "ran"),
    [
        # A line the base ran.
        (SOURCE.replace("x + 1", "x + 2"), "lines 2"),
        # A line added at the end of `used`: the lines on both sides of it count.
        (SOURCE.replace("    return y\n", "    return y\n    print(y)\n"), "lines 3"),
    ],
)
def test_a_change_to_a_line_the_base_ran_is_measured_naming_the_lines(tmp_path, new, ran):
    head = _history(tmp_path, {PARAMS: new})
    head.repo.git.checkout(head.base_sha)
    trace, _ = _traced(Path(head.repo.working_tree_dir or ""))
    check = check_skip(head, "main", trace)
    assert not check.skip and check.why == f"vllm/params.py {ran} ran on main"


def test_comments_and_layout_only_are_skipped_without_tracing_the_base(tmp_path):
    new = "# a comment\n" + SOURCE.replace("    z = (x,\n         2)", "    z = (x, 2)")
    head = _history(tmp_path, {PARAMS: new})
    trace, calls = _traced(Path(head.repo.working_tree_dir or ""))
    check = check_skip(head, "main", trace)
    assert check.skip and "only comments and layout" in check.why and not calls


def test_what_cannot_be_vouched_for_is_measured(tmp_path):
    head = _history(tmp_path, {"vllm/table.json": "{}\n"})
    trace, calls = _traced(Path(head.repo.working_tree_dir or ""))
    check = check_skip(head, "main", trace)
    assert not check.skip and "vllm/table.json, not Python" in check.why and not calls
    head = _history(tmp_path / "2", {PARAMS: SOURCE.replace("2)", "3)")})
    trace, _ = _traced(Path(head.repo.working_tree_dir or ""), unknown=["the tracer was stopped"])
    check = check_skip(head, "main", trace)
    assert not check.skip and check.why == "the base's coverage is unknown (the tracer was stopped)"


def test_a_deleted_file_that_ran_is_measured_and_an_added_one_is_named(tmp_path):
    head = _history(tmp_path, {PARAMS: None})
    trace, _ = _traced(tmp_path)
    check = check_skip(head, "main", trace)
    assert not check.skip and check.why.startswith("vllm/params.py (deleted; lines 1-3, 5) ran")
    head = _history(tmp_path / "2", {"vllm/new.py": "X = 1\n", "docs/a.md": "a\n"})
    trace, _ = _traced(tmp_path)
    check = check_skip(head, "main", trace)
    assert check.skip and check.why == "it adds vllm/new.py, which nothing on main imports"


def test_a_head_that_changes_nothing_under_vllm_is_skipped(tmp_path):
    head = _history(tmp_path, {"docs/a.md": "a\n"})
    trace, calls = _traced(tmp_path)
    check = check_skip(head, "main", trace)
    assert check.skip and check.why == "changes no file under vllm/" and not calls
