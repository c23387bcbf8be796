"""A real clone as the user has it: `repo.path`, remote refs, `--fetch` of a pull-request head.

The "upstream" is a bare copy of the fixture repository with one more commit
published as `refs/pull/7/head`, as GitHub publishes pull requests; the user's
clone does not have that ref until `--fetch`.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import git
import pytest
import yaml

from difftest.cli import main
from difftest.core.config import load_config
from difftest.build.refs import read_blob
from difftest.build.workspace import prepare
from tests.factories import ROOT

pytestmark = pytest.mark.slow

VERSION_FILE = "vllm/_version.py"


@pytest.fixture
def clone(tmp_path, fixture_repo) -> Path:
    upstream = tmp_path / "upstream.git"
    git.Repo.clone_from(fixture_repo.git_dir, upstream, bare=True)
    work = git.Repo.clone_from(upstream, tmp_path / "contributor")
    target = Path(work.working_dir) / VERSION_FILE
    text = read_blob(fixture_repo, "v0.32.0", VERSION_FILE).decode()
    target.write_text(text.replace("'0.32.0'", "'0.32.0+pr7'", 1))
    work.index.add([VERSION_FILE])
    someone = git.Actor("Contributor", "contributor@example.invalid")
    work.index.commit("pr 7: bump the version string", author=someone, committer=someone)
    work.git.push("origin", "HEAD:refs/pull/7/head")
    user = git.Repo.clone_from(upstream, tmp_path / "vllm")
    return Path(user.working_dir)


def write_config(tmp_path: Path, clone: Path, branches: list[dict]) -> Path:
    raw = yaml.safe_load((ROOT / "branches.yaml").read_text())
    raw.update(repo={"path": str(clone), "base_ref": "v0.32.0"}, branches=branches, baseline=branches[0]["name"])
    path = tmp_path / "real.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_pull_request_head_needs_fetch_then_builds_its_code(tmp_path, clone, capsys):
    config = write_config(tmp_path, clone, [{"name": "upstream", "ref": "origin/main"}, {"name": "pr7", "ref": "pull/7/head"}])
    assert main(["envs", "--build", "-c", str(config)]) == 2  # not fetched yet: a clear error, nothing built
    assert "pull/7/head" in capsys.readouterr().err
    assert main(["envs", "--build", "--fetch", "-c", str(config)]) == 0
    workspace = prepare(load_config(config))
    pr7 = workspace.branch("pr7")
    assert pr7.resolved.sha == git.Repo(clone).commit("refs/pull/7/head").hexsha
    version = subprocess.run(
        [str(pr7.env.python), "-c", "import vllm; print(vllm.__version__)"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert version == "0.32.0+pr7"
    assert workspace.branch("upstream").env.fingerprint["changed_files"] == []


def test_a_path_that_is_not_a_repository_exits_2(tmp_path, capsys):
    (tmp_path / "plain-folder").mkdir()
    config = write_config(tmp_path, tmp_path / "plain-folder", [{"name": "main", "ref": "main"}])
    assert main(["envs", "--build", "-c", str(config)]) == 2
    assert "not a git repository" in capsys.readouterr().err.lower()


def test_a_typo_in_a_ref_exits_2_before_the_base_is_built(tmp_path, clone, monkeypatch, capsys):
    """With a real clone, refs are resolved first: a typo costs seconds, not a base build."""
    home = tmp_path / "empty-home"
    monkeypatch.setenv("DIFFTEST_HOME", str(home))
    config = write_config(tmp_path, clone, [{"name": "upstream", "ref": "origin/mian"}])
    assert main(["run", "-c", str(config), "--out", str(tmp_path / "out")]) == 2
    assert "origin/mian" in capsys.readouterr().err
    assert not list((home / "envs").glob("base-*"))
