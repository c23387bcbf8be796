"""The README's two set-up commands are the ones CI and users run: keep them true. The README stays
a quick start whose links work, and the manual's nav lists exactly the pages under docs/."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

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


#: The README is the quick start; the manual lives in docs/ (mkdocs.yml).
README_LIMIT = 15_000
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", flags=re.S | re.M)


def nav_pages(nav: list) -> list[str]:
    """Every page path of an MkDocs nav (entries: a path, {title: path} or {title: [entries]})."""
    pages: list[str] = []
    for entry in nav:
        for value in entry.values() if isinstance(entry, dict) else [entry]:
            pages += nav_pages(value) if isinstance(value, list) else [value]
    return pages


def test_readme_is_a_quick_start():
    assert len((ROOT / "README.md").read_text()) <= README_LIMIT


def test_every_page_in_the_nav_exists_and_every_page_is_in_the_nav():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    docs = ROOT / config["docs_dir"]
    nav = nav_pages(config["nav"])
    assert len(nav) == len(set(nav)), "a page is listed twice"
    missing = [page for page in nav if not (docs / page).is_file()]
    assert not missing, f"in the nav but not under {docs.name}/: {missing}"
    pages = sorted(str(p.relative_to(docs)) for p in docs.rglob("*.md"))
    assert sorted(nav) == pages, f"under {docs.name}/ but not in the nav: {set(pages) - set(nav)}"


def test_every_relative_link_in_the_readme_points_at_a_file():
    text = FENCE.sub("", (ROOT / "README.md").read_text())
    links = [target for target in LINK.findall(text) if "://" not in target]
    assert links, "the README links into docs/"
    broken = [
        target
        for target in links
        if not target.startswith("#") and not (ROOT / target.split("#")[0]).exists()
    ]
    assert not broken, f"links to nothing: {broken}"
