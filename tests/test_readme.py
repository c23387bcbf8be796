"""The README's two set-up commands are the ones CI and users run: keep them true."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    return re.findall(r"```bash\n(.+?)\n```", text, flags=re.S)[:2]


def test_readme_opens_with_the_run_and_test_commands():
    run, test = readme_commands()
    assert run.endswith("difftest run") and "pip install -q uv" in run
    assert "pytest" in test and "'.[test]'" in test


def test_ci_runs_the_readme_test_command():
    _, test = readme_commands()
    ci_lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert test in ci_lines


def test_ci_installs_the_browser_the_html_test_needs():
    ci = (ROOT / ".ci" / "run").read_text()
    assert "apt-get install -y -q chromium" in ci and "command -v chromium" in ci
