"""difftest's own lock files (#47): a lock path replaced by a symlink is never followed.

Branch code runs with the user's rights, so it can replace any lock difftest
keeps (`DIFFTEST_HOME/locks/*.lock`, a fixture repository's lock, the lock of
`--out`) with a symlink: to a file of the user's, or to itself. filelock opens
lock paths with O_NOFOLLOW, so every later command died with ELOOP (a traceback,
or `--out` refused with a wrong hint). Each site difftest takes a lock at is
checked here with real symlinks and a real lock taken; the symlink's target is
never touched, and what cannot be replaced is a ConfigError naming the file.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import pytest

from difftest.build.envs.locks import env_lock
from difftest.build.refs import fixture
from difftest.build.tests.folders import build_once
from difftest.core import paths
from difftest.core.errors import ConfigError
from difftest.core.locks import own_lock
from difftest.reports import LOCK_FILE, locked_out

#: A site: (the lock path it uses, a context manager that takes that lock the way difftest does).
Site = tuple[Path, Callable[[], AbstractContextManager[object]]]


@contextmanager
def _built_once(dest: Path) -> Iterator[None]:
    """`build_once` of `dest` (it takes its lock while building)."""

    def build(tmp: Path) -> None:
        (tmp / "done").write_text("built")

    build_once(dest, "done", build)
    yield


@contextmanager
def _fixture_built(dest: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """`build_fixture_repo` of `dest`, found complete once its lock is held (no vLLM to build)."""
    answers = itertools.chain([False], itertools.repeat(True))
    monkeypatch.setattr(fixture, "_is_complete", lambda _dest, _version: next(answers))
    fixture.build_fixture_repo(dest.parent / "src", "0.0.0", dest)
    yield


def lock_site(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Site:
    """Where difftest takes a lock, by name: every `FileLock(` of difftest's (now `own_lock`)."""
    monkeypatch.setenv("DIFFTEST_HOME", str(tmp_path / "home"))
    if name == "env":
        return paths.locks_dir() / "branch-x.lock", lambda: env_lock("branch-x")
    if name == "build-once":
        dest = tmp_path / "cache" / "thing"
        return paths.locks_dir() / "cache-thing.lock", lambda: _built_once(dest)
    if name == "fixture":
        dest = paths.repos_dir() / "fixture-v0"
        return dest.parent / ".fixture-v0.lock", lambda: _fixture_built(dest, monkeypatch)
    out = tmp_path / "out"
    out.mkdir()
    return out / LOCK_FILE, lambda: locked_out(out)


SITES = ["env", "build-once", "fixture", "out"]


@pytest.mark.parametrize("plant", ["to-a-persons-file", "to-itself", "dangling"])
@pytest.mark.parametrize("site", SITES)
def test_a_lock_file_replaced_by_a_symlink_is_replaced_never_followed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, site: str, plant: str
) -> None:
    lock, take = lock_site(site, tmp_path, monkeypatch)
    precious = tmp_path / "precious.txt"
    precious.write_text("a person's")
    lock.parent.mkdir(parents=True, exist_ok=True)
    target = {"to-a-persons-file": precious, "to-itself": lock, "dangling": tmp_path / "gone"}
    lock.symlink_to(target[plant])
    with take():
        pass
    assert precious.read_text() == "a person's"
    assert not (tmp_path / "gone").exists()
    assert not lock.is_symlink()
    with take():  # and again: the repaired lock is an ordinary one
        pass


@pytest.mark.parametrize("site", SITES)
def test_a_lock_path_that_cannot_be_replaced_is_a_config_error_naming_it_and_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, site: str
) -> None:
    """A folder with something in it at the lock path: not removed (it may hold anything)."""
    lock, take = lock_site(site, tmp_path, monkeypatch)
    (lock / "kept").mkdir(parents=True)
    with pytest.raises(ConfigError) as refused, take():
        pass
    assert refused.value.exit_code == 2
    assert refused.value.problem.startswith(f"difftest's lock file {str(lock)!r} cannot be used")
    assert "it is a folder" in refused.value.problem
    assert refused.value.hint == f"remove {str(lock)!r} (difftest makes it again), then run again"
    assert (lock / "kept").is_dir()


def test_a_regular_lock_file_is_used_as_it_is(tmp_path: Path) -> None:
    """A lock another process holds is a regular file: it is never removed or replaced."""
    lock = tmp_path / "held.lock"
    lock.write_text("")
    inode = lock.stat().st_ino
    with own_lock(lock):
        assert lock.stat().st_ino == inode
