"""The habits CI enforces before the tests run: ruff, ruff format, mypy and the docs build, and no
type check switched off without a reason.

CI runs the tools themselves (`.ci/run`); these tests keep that true and hold what a tool cannot
see: that every `# type: ignore` names its error code and says why it is there.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.factories import ROOT

#: `# type: ignore[code]` followed, on the same line, by a comment saying why.
_IGNORE = re.compile(r"#\s*type:\s*ignore(\[[a-z-, ]+\])?(.*)$")


def unexplained_ignores(text: str) -> list[str]:
    """Lines of `text` that switch a type check off without an error code, or without a reason
    (a comment after the ignore, or a comment line right above it)."""
    found = []
    lines = text.splitlines()
    for number, line in enumerate(lines):
        match = _IGNORE.search(line)
        if match is None:
            continue
        code, rest = match.group(1), match.group(2)
        above = lines[number - 1].strip() if number else ""
        reason = rest.strip().startswith("#") or above.startswith("#")
        if not code or not reason:
            found.append(f"{number + 1}: {line.strip()}")
    return found


def test_every_type_ignore_names_its_code_and_says_why() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{where}"
        for path in sorted((ROOT / "difftest").rglob("*.py"))
        for where in unexplained_ignores(path.read_text())
    ]
    assert not offenders, "type: ignore without a code or a reason:\n" + "\n".join(offenders)


def test_the_ignore_check_catches_what_it_is_for() -> None:
    assert unexplained_ignores("x = f()  # type: ignore\n")
    assert unexplained_ignores("x = f()  # type: ignore[arg-type]\n")
    assert not unexplained_ignores("x = f()  # type: ignore[arg-type]  # pytest adds it\n")
    assert not unexplained_ignores("# the plugin adds it\nx = f()  # type: ignore[attr-defined]\n")


def test_ci_runs_the_linters_the_type_checker_and_the_docs_build_before_the_tests() -> None:
    lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    wanted = [
        ".venv/bin/ruff check .",
        ".venv/bin/ruff format --check .",
        ".venv/bin/mypy",
    ]
    tests_at = next(i for i, line in enumerate(lines) if line.endswith(".venv/bin/pytest -n 2"))
    for command in wanted:
        assert command in lines[:tests_at], f".ci/run does not run `{command}` before the tests"
    assert any("mkdocs build --strict" in line for line in lines[:tests_at])


def test_the_tools_are_configured_where_a_maintainer_looks() -> None:
    config = (ROOT / "pyproject.toml").read_text()
    assert "[tool.ruff]" in config and "line-length = 100" in config
    assert "[tool.mypy]" in config and 'files = ["difftest"]' in config
    assert Path(ROOT / "mkdocs.yml").is_file()
