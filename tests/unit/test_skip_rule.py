"""The gate's skip rule outside the stats path (`run.coverage.skip_rule`) on a real git history.
The base's traced run is given here as what it executed (the e2e gate tests run it for real:
tests/e2e/test_gate_cli.py)."""

from __future__ import annotations

from pathlib import Path

import git
import pytest

from difftest.build.gate_changes import HeadChanges
from difftest.build.refs.diff import changed_files
from difftest.core.errors import NotMeasured
from difftest.run.coverage.changed import Executed
from difftest.run.coverage.skip_rule import BaseTrace, check_skip

pytestmark = pytest.mark.quick

PARAMS = "vllm/params.py"
SOURCE = (
    "def used(x):\n"  # 1
    "    y = x + 1\n"  # 2
    "    # y = y * 100\n"  # 3
    "\n"  # 4
    "    if y:\n"  # 5
    "        y += 1\n"  # 6
    "    else:\n"  # 7
    "        y -= 1\n"  # 8
    "    return y\n"  # 9
    "\n"  # 10
    "def unused(x):\n"  # 11
    "    z = (x,\n"  # 12
    "         2)\n"  # 13
    "    return z\n"  # 14
)
#: What the base's runs executed: the module, and `used` (its `else` too, in another run).
RAN = {PARAMS: {1, 2, 5, 6, 8, 9, 11}}


def _history(tmp_path: Path, edit: dict[str, str | None]) -> HeadChanges:
    """A repository whose base holds SOURCE and whose head applies `edit` (path -> text, None
    deletes); the working tree is left at the base, as the base's environment holds it."""
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
    repo.git.checkout(base)
    return HeadChanges(repo, base, head, changed_files(repo, base, head), [])


def _check(head: HeadChanges, ran=RAN, unknown=(), untraced=(), sha=None):
    calls: list[int] = []

    def trace() -> BaseTrace:
        calls.append(1)
        executed = Executed(lines={k: set(v) for k, v in ran.items()}, traced_probes=1)
        executed.unknown.extend(unknown)
        root = Path(head.repo.working_tree_dir or "") / "vllm"
        return BaseTrace(executed, ["scheduler"], 3, root, sha or head.base_sha)

    return check_skip(head, "main", trace, list(untraced)), calls


def test_a_change_inside_a_function_no_scenario_runs_is_skipped_naming_what_was_checked(tmp_path):
    check, calls = _check(_history(tmp_path, {PARAMS: SOURCE.replace("2)", "3)")}))
    assert check.skip and calls
    assert check.why == (
        "none of the code it changes in vllm/params.py ran on main in 3 scenario(s) of the "
        "scheduler tier(s)"
    )


@pytest.mark.parametrize(
    ("old", "new"),
    [
        # A line the base ran.
        ("x + 1", "x + 2"),
        # A line added at the end of `used`.
        ("    return y\n", "    return y\n    print(y)\n"),
        # A statement inserted between a comment and a blank line: neither is a statement.
        ("    # y = y * 100\n\n", "    # y = y * 100\n    y = 0\n\n"),
        # An uncommented line: its base line is a comment.
        ("    # y = y * 100", "    y = y * 100"),
        # `else:` turned `elif`: `else:` is no statement, but its body ran.
        ("    else:", "    elif x:"),
    ],
)
def test_a_change_in_a_function_the_base_ran_is_measured_however_silent_its_own_line(
    tmp_path, old, new
):
    """#48 review: the rule is the scope's, not the changed line's own (a comment, a blank line,
    `else:` never "run")."""
    check, _ = _check(_history(tmp_path, {PARAMS: SOURCE.replace(old, new, 1)}))
    assert not check.skip
    assert check.why.startswith("vllm/params.py line ") and "is in used, which ran on main" in (
        check.why
    )


def test_module_level_code_of_a_module_that_ran_is_measured(tmp_path):
    check, _ = _check(_history(tmp_path, {PARAMS: "LIMIT = 3\n" + SOURCE}))
    assert not check.skip and "module-level code of a module that ran on main" in check.why
    check, _ = _check(_history(tmp_path / "2", {PARAMS: "LIMIT = 3\n" + SOURCE}), ran={})
    assert check.skip


def test_comments_and_layout_only_are_skipped_without_tracing_the_base(tmp_path):
    new = "# a comment\n" + SOURCE.replace("    z = (x,\n         2)", "    z = (x, 2)")
    check, calls = _check(_history(tmp_path, {PARAMS: new}))
    assert check.skip and "only comments and layout" in check.why and not calls


def test_what_cannot_be_vouched_for_is_measured(tmp_path):
    check, calls = _check(_history(tmp_path, {"vllm/table.json": "{}\n"}))
    assert not check.skip and "vllm/table.json is not Python" in check.why and not calls
    check, _ = _check(_history(tmp_path / "2", {PARAMS: None, "vllm/t.json": "{}\n"}))
    assert not check.skip and "vllm/t.json is not Python" in check.why
    edited = {PARAMS: SOURCE.replace("2)", "3)")}
    check, _ = _check(_history(tmp_path / "3", edited), unknown=["the tracer was stopped"])
    assert not check.skip and check.why == "the base's coverage is unknown (the tracer was stopped)"
    check, _ = _check(_history(tmp_path / "4", edited), sha="f" * 40)
    assert not check.skip and check.why.startswith("the base resolved to ffffffffffff")
    check, calls = _check(_history(tmp_path / "5", edited), untraced=["tests"])
    assert not check.skip and "the base's map holds no test session" in check.why and not calls


def test_a_base_that_cannot_be_traced_is_measured_not_an_error(tmp_path):
    head = _history(tmp_path, {PARAMS: SOURCE.replace("2)", "3)")})

    def fails() -> BaseTrace:
        raise NotMeasured("main has no environment to trace", "see the log")

    check = check_skip(head, "main", fails, [])
    assert not check.skip and "main has no environment to trace" in check.why


def test_deleted_and_added_files(tmp_path):
    check, _ = _check(_history(tmp_path, {PARAMS: None}))
    assert not check.skip and check.why == "it deletes vllm/params.py, which ran on main"
    check, calls = _check(_history(tmp_path / "2", {"vllm/new.py": "X = 1\n"}))
    assert not check.skip and "it adds vllm/new.py" in check.why and not calls


def test_a_head_that_changes_nothing_under_vllm_is_skipped(tmp_path):
    check, calls = _check(_history(tmp_path, {"docs/a.md": "a\n"}))
    assert check.skip and check.why == "changes no file under vllm/" and not calls
