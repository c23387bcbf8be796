"""The host runs no program a branch could plant or name (issue #47): real git, real uv, real
processes, a HOME of the test's own written the way a hostile branch's code (which runs as the same
user) leaves it, and a small repository resolved with difftest's own code path."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import git
import pytest

from difftest.build.envs.uvtool import run_uv, uv_bin, uv_folders
from difftest.build.refs import open_repo, resolve_branch, resolve_ref
from difftest.build.tests.trees import suite_tree
from difftest.core import host_tools
from difftest.core.config import BranchSpec
from difftest.core.errors import ConfigError
from difftest.core.host_tools import GITPYTHON_EXECUTABLE_ENV, SYSTEM_PATH, system_git

PATCH = """\
diff --git a/vllm/metrics.py b/vllm/metrics.py
--- a/vllm/metrics.py
+++ b/vllm/metrics.py
@@ -1 +1 @@
-ACCEPTED = 1
+ACCEPTED = 2
"""


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A HOME of the test's own, read by git and uv the ordinary way (no config redirected)."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("DIFFTEST_HOME", str(tmp_path / "difftest-home"))
    for var in (
        "XDG_CONFIG_HOME",
        "GIT_CONFIG_GLOBAL",
        "GIT_CONFIG_NOSYSTEM",
        "GIT_CONFIG_COUNT",
        "GIT_CONFIG_PARAMETERS",
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_INDEX_FILE",
        "UV_NO_CONFIG",
        "UV_CONFIG_FILE",
    ):
        monkeypatch.delenv(var, raising=False)
    return home


def plant(folder: Path, name: str, marker: Path, then: str = "exit 0") -> Path:
    """An executable `folder/name` that notes its name in `marker`, then runs `then`."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / name
    script.write_text(f'#!/bin/sh\necho "{name} $*" >> "{marker}"\n{then}\n')
    script.chmod(0o755)
    return script


def plant_hooks(folder: Path, marker: Path) -> Path:
    for name in ("reference-transaction", "post-checkout", "pre-auto-gc", "post-index-change"):
        plant(folder, name, marker)
    return folder


def system_git_run(repo: Path, *args: str) -> str:
    """git run by the test itself: the system's git, no hook, a fixed identity."""
    done = subprocess.run(
        [system_git(), "-c", f"core.hooksPath={os.devnull}", "-c", "user.name=t"]
        + ["-c", "user.email=t@example.invalid", *args],
        cwd=repo,
        check=True,
        capture_output=True,
        text=True,
    )
    return done.stdout


def make_repo(path: Path) -> Path:
    """A one-commit repository on `main` holding `vllm/metrics.py`, and the patch file beside it."""
    path.mkdir(parents=True)
    system_git_run(path, "init", "-q", "-b", "main")
    (path / "vllm").mkdir()
    (path / "vllm" / "metrics.py").write_text("ACCEPTED = 1\n")
    system_git_run(path, "add", "-A")
    system_git_run(path, "commit", "-q", "-m", "start")
    (path.parent / "change.patch").write_text(PATCH)
    return path


def resolve_both_ways(repo_path: Path, name: str) -> None:
    """What a run does with a repository: open it, resolve a ref, and write a branch (a patch
    committed, then `update-ref`, which runs the `reference-transaction` hook)."""
    with open_repo(repo_path) as repo:
        resolve_ref(repo, "main")
        patch = repo_path.parent / "change.patch"
        resolved = resolve_branch(repo, BranchSpec(name=name, ref="main", patches=[patch]))
        assert resolved.sha != resolved.ref_sha


def test_no_hook_the_users_git_config_names_runs_in_the_host(home: Path, tmp_path: Path) -> None:
    marker = tmp_path / "hooks-ran"
    hooks = plant_hooks(tmp_path / "hooks", marker)
    repo_path = make_repo(tmp_path / "vllm")
    # A branch wrote ~/.gitconfig. The trap is real: git run the ordinary way runs the hook.
    (home / ".gitconfig").write_text(f"[core]\n\thooksPath = {hooks}\n")
    subprocess.run([system_git(), "update-ref", "refs/heads/trap", "main"], cwd=repo_path)
    assert marker.read_text().startswith("reference-transaction")
    marker.unlink()

    resolve_both_ways(repo_path, "from-home")

    assert not marker.exists(), f"a hook ran in the host: {marker.read_text()}"


def test_no_hook_or_program_the_repositorys_config_names_runs_in_the_host(
    home: Path, tmp_path: Path
) -> None:
    """A user's clone is writable to a branch: its .git/config names hooks and an fsmonitor."""
    marker = tmp_path / "hooks-ran"
    hooks = plant_hooks(tmp_path / "hooks", marker)
    monitor = plant(tmp_path / "bin", "monitor", marker, then="exit 1")
    repo_path = make_repo(tmp_path / "vllm")
    system_git_run(repo_path, "config", "core.hooksPath", str(hooks))
    system_git_run(repo_path, "config", "core.fsmonitor", str(monitor))
    subprocess.run([system_git(), "update-ref", "refs/heads/trap", "main"], cwd=repo_path)
    assert marker.exists(), "the trap is real"
    marker.unlink()

    resolve_both_ways(repo_path, "from-repo")
    with open_repo(repo_path) as repo:
        repo.git.status()  # reads the index: the fsmonitor program would run here

    assert not marker.exists(), f"a program the repository named ran: {marker.read_text()}"


def test_a_git_planted_first_on_path_is_never_run(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "planted-git-ran"
    repo_path = make_repo(tmp_path / "vllm")
    planted = plant(home / ".local" / "bin", "git", marker, then=f'exec {system_git()} "$@"')
    monkeypatch.setenv("PATH", f"{planted.parent}{os.pathsep}{os.environ['PATH']}")
    # As `import git` leaves GitPython: `git` by name, looked up through PATH at each command.
    monkeypatch.setattr(git.Git, "GIT_PYTHON_GIT_EXECUTABLE", "git")

    resolve_both_ways(repo_path, "planted")

    assert not marker.exists(), f"the planted git ran: {marker.read_text()}"
    assert git.Git.GIT_PYTHON_GIT_EXECUTABLE == system_git()
    assert Path(system_git()).parent.as_posix() in SYSTEM_PATH.split(os.pathsep)


def test_without_a_git_in_the_systems_folders_difftest_says_what_to_install(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo_path = make_repo(tmp_path / "vllm")
    monkeypatch.setattr(host_tools, "SYSTEM_PATH", str(tmp_path / "empty"))

    with pytest.raises(ConfigError, match="git is not installed") as raised:
        open_repo(repo_path)

    assert "apt-get install git" in (raised.value.hint or "")


def test_importing_the_command_line_runs_no_git_found_through_path(
    home: Path, tmp_path: Path
) -> None:
    """GitPython runs `git version` when imported: the CLI points it at the system's git first."""
    marker = tmp_path / "planted-git-ran"
    planted = plant(home / ".local" / "bin", "git", marker, then=f'exec {system_git()} "$@"')
    env = {**os.environ, "PATH": f"{planted.parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop(GITPYTHON_EXECUTABLE_ENV, None)  # set in this process if it imported the CLI already

    subprocess.run([sys.executable, "-c", "import git"], env=env, check=True)
    assert marker.read_text().startswith("git version"), "the trap is real: GitPython runs it"
    marker.unlink()
    subprocess.run([sys.executable, "-c", "import difftest.cli"], env=env, check=True)
    assert not marker.exists(), f"the planted git ran: {marker.read_text()}"


def test_uv_is_never_one_found_through_path(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "planted-uv-ran"
    planted = [
        plant(folder, "uv", marker) for folder in (tmp_path / "bin", home / ".local" / "bin")
    ]
    monkeypatch.setenv("PATH", os.pathsep.join([str(p.parent) for p in planted] + [SYSTEM_PATH]))
    # Where the `uv` package cannot be imported (difftest's earlier fallback then took PATH's).
    monkeypatch.setitem(sys.modules, "uv", None)

    found = Path(uv_bin())

    assert found not in planted
    assert found.parent in uv_folders()
    assert run_uv(["--version"], what="say its version").startswith("uv ")
    assert not marker.exists()


def test_uv_reads_no_configuration_file(home: Path) -> None:
    """A branch wrote ~/.config/uv/uv.toml: uv would stop on it (or take its settings)."""
    config = home / ".config" / "uv" / "uv.toml"
    config.parent.mkdir(parents=True)
    config.write_text("[pip]\nindex-url = = 'not toml'\n")
    trap = subprocess.run(
        [uv_bin(), "pip", "freeze", "--python", sys.executable], capture_output=True, text=True
    )
    assert trap.returncode != 0 and "uv.toml" in trap.stderr, "the trap is real"

    frozen = run_uv(["pip", "freeze", "--python", sys.executable], what="list the packages")

    assert "gitpython==" in frozen.lower()


def test_a_test_tree_runs_no_filter_the_repositorys_config_names(
    home: Path, tmp_path: Path
) -> None:
    """The tests tier's tree of a commit: `git archive` would run the smudge filter that the
    clone's .git/config names for a path its attributes give `filter=`."""
    marker = tmp_path / "filter-ran"
    smudge = plant(tmp_path / "bin", "smudge", marker, then="cat")
    repo_path = make_repo(tmp_path / "vllm")
    tests = repo_path / "tests"
    tests.mkdir()
    (tests / "test_a.py").write_text("def test_a():\n    pass\n")
    (tests / "run.sh").write_text("#!/bin/sh\n")
    (tests / "run.sh").chmod(0o755)
    (tests / "same.py").symlink_to("test_a.py")
    (repo_path / ".gitattributes").write_text("* filter=evil\n")
    system_git_run(repo_path, "add", "-A")
    system_git_run(repo_path, "commit", "-q", "-m", "tests")
    system_git_run(repo_path, "config", "filter.evil.smudge", str(smudge))
    system_git_run(repo_path, "archive", "HEAD", "--", "tests/test_a.py")
    assert marker.exists(), "the trap is real"
    marker.unlink()

    with open_repo(repo_path) as repo:
        root = suite_tree(repo, repo.head.commit.hexsha)

    assert not marker.exists(), f"a filter the repository named ran: {marker.read_text()}"
    assert (root / "tests" / "test_a.py").read_text() == "def test_a():\n    pass\n"
    assert os.access(root / "tests" / "run.sh", os.X_OK)
    assert os.readlink(root / "tests" / "same.py") == "test_a.py"
