"""Where the tests tier's tests come from: the release's sdist (through real package indexes), the
fixture commit that carries them, and test trees read from git objects.

The indexes are real, served from this machine: a PEP 691 JSON index over HTTP
(a thread running `http.server`) and a PEP 503 HTML index as `file://`
folders, the two kinds pip is configured with here. The sdist is a small real
tarball shaped like vLLM's.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import git
import pytest
from refs_helpers import VERSION, commit_files, make_vllm_tree, tree_listing, write_git_config

from difftest.build.envs.sources import pip_index_urls
from difftest.build.refs import build_fixture_repo, read_blob
from difftest.build.tests import sdist
from difftest.build.tests.trees import CommitTree, branch_tests
from difftest.build.tests.trees import suite_tree as tree_root
from difftest.core.config import TestsSpec
from difftest.core.errors import ConfigError, EnvironmentBuildError, RefError
from difftest.tiers.tests.selection import refuse_paths_naming_nothing, selection_from

#: The fixture commit of refs_helpers' tree plus the fake sdist's tests (pinned like
#: PINNED_FIXTURE_SHA).
PINNED_FIXTURE_WITH_TESTS_SHA = "f189e7d57837dfe2355cfed653ec483302b321a7"
NAME = f"vllm-{VERSION}.tar.gz"
MEMBERS = {
    f"vllm-{VERSION}/tests/__init__.py": b"",
    f"vllm-{VERSION}/tests/v1/core/test_scheduler.py": b"def test_schedule():\n    assert True\n",
    f"vllm-{VERSION}/pyproject.toml": b"[tool.pytest.ini_options]\nmarkers = ['slow_test']\n",
    f"vllm-{VERSION}/vllm/__init__.py": b"# the sdist's own vllm/ must never reach a test tree\n",
    f"vllm-{VERSION}/csrc/kernel.cu": b"// not taken\n",
}


@pytest.fixture(autouse=True)
def private_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DIFFTEST_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(write_git_config(tmp_path / "gitconfig")))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    return tmp_path / "home"


def fake_sdist() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, data in MEMBERS.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


SDIST = fake_sdist()
SHA = hashlib.sha256(SDIST).hexdigest()


@pytest.fixture
def json_index(tmp_path: Path):
    """A PEP 691 index over HTTP: `/simple/vllm/` answers JSON, the file lies under `/files/`."""
    root = tmp_path / "served"
    (root / "files").mkdir(parents=True)
    (root / "files" / NAME).write_bytes(SDIST)
    page = {
        "meta": {"api-version": "1.1"},
        "name": "vllm",
        "files": [{"filename": NAME, "url": f"../../files/{NAME}", "hashes": {"sha256": SHA}}],
    }

    class Handler(SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(root), **kwargs)

        def do_GET(self):
            if self.path == "/simple/vllm/":
                body = json.dumps(page).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/vnd.pypi.simple.v1+json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            super().do_GET()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/simple"
    server.shutdown()


@pytest.fixture
def html_index(tmp_path: Path) -> str:
    """A PEP 503 index as a `file://` folder (as pip's local mirrors are)."""
    project = tmp_path / "mirror" / "simple" / "vllm"
    project.mkdir(parents=True)
    (tmp_path / "mirror" / "files").mkdir()
    (tmp_path / "mirror" / "files" / NAME).write_bytes(SDIST)
    (project / "index.html").write_text(
        f'<html><body><a href="../../files/{NAME}#sha256={SHA}">{NAME}</a></body></html>'
    )
    return (tmp_path / "mirror" / "simple").as_uri()


def use_indexes(monkeypatch: pytest.MonkeyPatch, *urls: str) -> None:
    monkeypatch.setattr(sdist, "pip_index_urls", lambda: list(urls))


def test_pip_index_urls_come_from_pips_configuration(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    conf = tmp_path / "pip.conf"
    conf.write_text(
        "[global]\n"
        "index-url = http://127.0.0.1:9/simple\n"
        "extra-index-url = file:///mirror/a\n  file:///mirror/b\n"
    )
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "file:///mirror/c")
    urls = pip_index_urls()
    assert urls[0] == "http://127.0.0.1:9/simple"
    assert urls[-3:] == ["file:///mirror/a", "file:///mirror/b", "file:///mirror/c"]


def test_the_sdist_comes_from_a_json_index_and_is_cached(monkeypatch, json_index) -> None:
    use_indexes(monkeypatch, "http://127.0.0.1:9/unreachable", json_index)
    path = sdist.fetch_sdist(NAME, SHA)
    assert path.read_bytes() == SDIST
    use_indexes(monkeypatch)  # no index at all: the cached file is enough
    assert sdist.fetch_sdist(NAME, SHA) == path


def test_the_sdist_comes_from_a_file_index(monkeypatch, html_index) -> None:
    use_indexes(monkeypatch, html_index)
    assert sdist.fetch_sdist(NAME, SHA).read_bytes() == SDIST


def test_bytes_that_do_not_match_the_pin_are_refused(monkeypatch, html_index, private_home) -> None:
    use_indexes(monkeypatch, html_index)
    with pytest.raises(EnvironmentBuildError) as info:
        sdist.fetch_sdist(NAME, "0" * 64)
    assert "publishes sha256" in info.value.problem and "put it at" in info.value.hint
    assert not list((private_home / "sdists").glob("*.tar.gz")), "nothing unverified is kept"


def test_a_file_put_by_hand_is_accepted_when_its_hash_matches(monkeypatch, private_home) -> None:
    use_indexes(monkeypatch)
    (private_home / "sdists").mkdir(parents=True)
    (private_home / "sdists" / NAME).write_bytes(SDIST)
    assert sdist.fetch_sdist(NAME, SHA).read_bytes() == SDIST


def test_only_tests_and_pyproject_are_taken_from_the_sdist(monkeypatch, html_index) -> None:
    use_indexes(monkeypatch, html_index)
    monkeypatch.setitem(sdist.PINNED_SDISTS, VERSION, (NAME, SHA))
    taken = sdist.upstream_tests(VERSION)
    assert taken is not None and taken.sha256 == SHA
    files = sorted(
        p.relative_to(taken.folder).as_posix() for p in taken.folder.rglob("*") if p.is_file()
    )
    assert files == [
        sdist.DONE,
        "pyproject.toml",
        "tests/__init__.py",
        "tests/v1/core/test_scheduler.py",
    ]
    assert sdist.upstream_tests("0.0.1") is None, "an unpinned release has no tests"


def test_the_fixture_commits_the_releases_tests_beside_the_sources(
    monkeypatch, html_index, tmp_path
) -> None:
    use_indexes(monkeypatch, html_index)
    monkeypatch.setitem(sdist.PINNED_SDISTS, VERSION, (NAME, SHA))
    taken = sdist.upstream_tests(VERSION)
    fixture = build_fixture_repo(
        make_vllm_tree(tmp_path / "site"), VERSION, tmp_path / "fx", upstream=taken.folder
    )
    repo = git.Repo(fixture)
    listing = tree_listing(repo, "main")
    assert "tests/v1/core/test_scheduler.py" in listing and "pyproject.toml" in listing
    assert sdist.DONE not in listing and "csrc/kernel.cu" not in listing
    assert (
        read_blob(repo, "main", "vllm/__init__.py") != MEMBERS[f"vllm-{VERSION}/vllm/__init__.py"]
    )
    assert repo.commit("main").hexsha == PINNED_FIXTURE_WITH_TESTS_SHA


@pytest.fixture
def clone(tmp_path: Path) -> git.Repo:
    """A repository with `vllm/`, `tests/` and `pyproject.toml`, and a branch that adds a test."""
    repo = git.Repo.init(tmp_path / "clone")
    commit_files(
        repo,
        {
            "vllm/__init__.py": "",
            "tests/__init__.py": "",
            "tests/test_a.py": "def test_a():\n    pass\n",
            "pyproject.toml": "[tool.pytest.ini_options]\n",
        },
        "base",
    )
    repo.git.branch("pr")
    commit_files(repo, {"tests/test_a.py": "def test_a():\n    assert 1\n"}, "main moves on")
    repo.git.checkout("-q", "pr")
    commit_files(
        repo,
        {
            "tests/test_a.py": "def test_a():\n    pass\n\n\ndef test_pr():\n    pass\n",
            "vllm/__init__.py": "X = 1\n",
        },
        "the pr",
    )
    repo.git.checkout("-q", "main")
    return repo


def test_a_branchs_test_changes_are_read_against_its_merge_base(clone: git.Repo) -> None:
    found = branch_tests(clone, "pr", clone.commit("pr").hexsha, clone.commit("main").hexsha)
    (change,) = found.changes
    assert change.path == "tests/test_a.py" and change.status == "M"
    assert change.old == "def test_a():\n    pass\n", "main's later edit is not the branch's change"
    assert "test_pr" in (change.new or "")


def test_a_test_tree_holds_tests_and_pyproject_only_with_grafts(
    clone: git.Repo, tmp_path: Path
) -> None:
    (Path(clone.working_tree_dir) / "tests" / "test_a.py").write_text("uncommitted edit\n")
    main, pr = clone.commit("main").hexsha, clone.commit("pr").hexsha
    root = tree_root(clone, main, {"tests/test_a__difftest1.py": (pr, "tests/test_a.py")})
    assert sorted(p.name for p in root.iterdir()) == [
        ".difftest-tree.json",
        "pyproject.toml",
        "tests",
    ]
    assert (root / "tests" / "test_a.py").read_text() == "def test_a():\n    assert 1\n", (
        "from git, not the work tree"
    )
    assert "test_pr" in (root / "tests" / "test_a__difftest1.py").read_text()
    assert (
        tree_root(clone, main, {"tests/test_a__difftest1.py": (pr, "tests/test_a.py")}) == root
    ), "cached by content"
    assert tree_root(clone, main) != root


def test_a_commit_without_tests_is_named(clone: git.Repo) -> None:
    clone.git.rm("-rq", "tests")
    clone.git.commit("-qm", "no tests")
    with pytest.raises(RefError, match="has no tests/ folder"):
        tree_root(clone, clone.commit("main").hexsha)


@pytest.mark.parametrize("bare", [False, True], ids=["clone", "bare"])
def test_a_selection_naming_nothing_in_the_baselines_tree_is_refused_with_the_closest_name(
    clone: git.Repo, tmp_path: Path, bare: bool
) -> None:
    """#29, case 8: read from git objects (the baseline commit), before anything is built; the
    same in a bare repository (the fixture repo is one) as in a clone."""
    repo = (
        git.Repo.clone_from(clone.working_dir, tmp_path / "bare.git", bare=True) if bare else clone
    )
    tree = CommitTree(repo, repo.commit("main").hexsha, "main")
    fine = [
        "tests/test_a.py::test_a",
        "tests",
        "tests/",
        "./tests/test_a.py",
        "tests//test_a.py",
        ".",
    ]
    refuse_paths_naming_nothing(selection_from(TestsSpec(select=fine)), tree)
    for select, named in [
        (["tests/test_b.py"], "'tests/test_b.py' (did you mean 'tests/test_a.py'?)"),
        (["tests/test_a.py", "tests/zzz.py"], "'tests/zzz.py':"),
        (["tests/zzz/qqq.py"], "'tests/zzz/qqq.py':"),
        (["./tests/test_b.py::t"], "'./tests/test_b.py::t' (did you mean 'tests/test_a.py'?)"),
    ]:
        with pytest.raises(ConfigError) as err:
            refuse_paths_naming_nothing(selection_from(TestsSpec(select=select)), tree)
        assert str(err.value).startswith(f"tests.select: {named}"), str(err.value)
        assert f"no such file or folder in the baseline main ({tree.sha[:12]})" in str(err.value)
        assert "correct the path in the `tests:` section of branches.yaml" in str(err.value)
    # Outside tests/, pytest would collect nothing from the test tree; a suggestion keeps the rest
    # of the path where the corrected one exists.
    with pytest.raises(
        ConfigError,
        match=r"'vllm/__init__.py'; 'pyproject.toml'; 'test/test_a.py' \(did you mean "
        r"'tests/test_a.py'\?\): not under tests/",
    ):
        refuse_paths_naming_nothing(
            selection_from(
                TestsSpec(select=["vllm/__init__.py", "pyproject.toml", "test/test_a.py"])
            ),
            tree,
        )
    # The default selection names vLLM 0.32's files: another vLLM's tree is told to write its own.
    with pytest.raises(ConfigError, match="write a `tests:` section with a `select`"):
        refuse_paths_naming_nothing(selection_from(TestsSpec()), tree)
    # A baseline without tests/ is left to the tier (could not measure there), not refused here.
    bare_tree = git.Repo.init(tmp_path / "no-tests")
    commit_files(bare_tree, {"vllm/__init__.py": ""}, "no tests")
    refuse_paths_naming_nothing(
        selection_from(TestsSpec(select=["tests/x.py"])),
        CommitTree(bare_tree, bare_tree.commit("HEAD").hexsha, "main"),
    )
