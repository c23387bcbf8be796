"""The tests tier's result cache: a clean session's files kept and written back;
anything else run again.

Real files and the real cache folder layout; the session's files are small stand-ins for what
pytest and difftest's plugin write (their reading is tested in test_tests_sessions.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from difftest.core.suites import SuiteSession
from difftest.run.cache import sessions as suite_cache
from difftest.run.cache.results import ResultCache

SESSION = SuiteSession(
    name="shared",
    sha="a" * 40,
    grafts={},
    args=["tests/v1/core/test_scheduler.py"],
    allowed_grafts=[],
    owners={},
    default_source="upstream",
)
ENV = {
    "kind": "branch",
    "sha": "b" * 40,
    "manifest": {"own": {}},
    "name": "main",
    "fingerprint_hash": "f" * 64,
}
BASE = {"key": "base", "wheel_hash": "w" * 64}


def key(**changes) -> str:
    fields = dict(
        session=SESSION,
        workers=[("main", ENV)],
        controller=ENV,
        base=BASE,
        packages=["pytest==8"],
        limits={"run_s": 120.0, "suite_s": 1800.0},
    )
    fields.update(changes)
    return suite_cache.session_key(**fields)


def session_files(out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    (out / "junit.xml").write_text("<testsuites/>\n")
    (out / "workers.json").write_text('{"main": {"collected": []}}\n')
    return out


def test_the_key_covers_what_a_session_depends_on_and_no_name(monkeypatch):
    base = key()
    assert key(session=SuiteSession(**{**SESSION.__dict__, "args": ["-k", "spec"]})) != base
    assert key(workers=[("main", {**ENV, "sha": "c" * 40})]) != base
    assert key(controller={**ENV, "sha": "c" * 40}) != base
    assert key(base={**BASE, "wheel_hash": "x" * 64}) != base
    assert key(limits={"run_s": 60.0, "suite_s": 1800.0}) != base
    assert key(workers=[("main", {**ENV, "name": "renamed", "fingerprint_hash": "0" * 64})]) == base
    monkeypatch.setattr(suite_cache, "code_digest", lambda: "another difftest")
    assert key() != base
    monkeypatch.undo()
    monkeypatch.setenv("VLLM_DIFFTEST_SWITCH", "1")
    assert key() != base


def test_a_clean_session_is_stored_and_written_back_whole(tmp_path):
    cache = ResultCache(tmp_path / "cache")
    logged: list[str] = []
    out = session_files(tmp_path / "first")
    assert suite_cache.store_session(cache, key(), out, 1, None, 42.0, logged.append)
    again = tmp_path / "again"
    meta = suite_cache.load_session(cache, key(), again, logged.append)
    assert meta is not None and meta["returncode"] == 1 and meta["duration_s"] == 42.0
    assert (again / "junit.xml").read_text() == "<testsuites/>\n" and (
        again / "workers.json"
    ).is_file()
    assert "reused from the result cache" in (again / "pytest.log").read_text()
    assert (
        suite_cache.load_session(
            ResultCache(tmp_path / "cache", reuse=False), key(), again, logged.append
        )
        is None
    )


@pytest.mark.parametrize(
    "returncode, error", [(2, None), (None, "the test session timed out after 9 s"), (-9, None)]
)
def test_a_session_that_did_not_end_on_its_own_is_never_stored(tmp_path, returncode, error):
    cache = ResultCache(tmp_path / "cache")
    logged: list[str] = []
    assert not suite_cache.store_session(
        cache, key(), session_files(tmp_path / "s"), returncode, error, 1.0, logged.append
    )
    assert suite_cache.load_session(cache, key(), tmp_path / "again", logged.append) is None
    assert "session not cached" in logged[0]


def test_a_session_without_its_reports_is_never_stored(tmp_path):
    out = session_files(tmp_path / "s")
    (out / "workers.json").unlink()
    assert not suite_cache.store_session(
        ResultCache(tmp_path / "cache"), key(), out, 0, None, 1.0, lambda _m: None
    )


def test_a_damaged_entry_is_deleted_and_the_session_runs_again(tmp_path):
    cache = ResultCache(tmp_path / "cache")
    logged: list[str] = []
    assert suite_cache.store_session(
        cache, key(), session_files(tmp_path / "s"), 0, None, 1.0, logged.append
    )
    (entry,) = (tmp_path / "cache" / "suites").rglob("*.json")
    entry.write_text(entry.read_text().replace("testsuites", "testsuite"))
    assert suite_cache.load_session(cache, key(), tmp_path / "again", logged.append) is None
    assert not entry.exists() and "does not match its sha256" in logged[-1]
