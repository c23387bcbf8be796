"""What the result cache stores and what its key depends on (no probe: the end-to-end tests run real ones)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from difftest.core.records import Failure, ProbeHeader
from difftest.core.errors import ConfigError
from difftest.run.result_cache import CACHE_ENV, ResultCache, cache_dir, cacheable, open_cache, result_key
from difftest.core.outcome import clean_outcome
from difftest.run.runner import BranchRun
from tests.factories import make_run

HEADER = ProbeHeader(kind="header", nonce="n" * 32, protocol=3, python="3.12.3", import_s=9.0, setup_s=0.1)
JOB: dict[str, Any] = {"protocol": 3, "entry": "scheduler", "work_dir": "/models", "run_timeout_s": 60.0,
                       "scenarios": [{"name": "s", "runs": [{"label": "order:a", "role": "batch", "order": ["a"]}]}]}
ENV = {"kind": "branch", "key": "k", "sha": "a" * 40, "manifest": {"own": {"overlay/x.py": "1" * 64}},
       "name": "main", "ref": "main", "fingerprint_hash": "f" * 64}
BASE = {"key": "b", "wheel_hash": "w" * 64}


def _clean(**overrides: Any) -> BranchRun:
    fields: dict[str, Any] = dict(branch="main", tier="scheduler", header=HEADER, runs=[make_run()], exited_cleanly=True,
                                  outcome=clean_outcome(12.0))
    return BranchRun(**{**fields, **overrides})


def _failed(kind: str, origin: str) -> Any:
    failure = Failure(kind=kind, type="ValueError", summary="ValueError: x", origin=origin)  # type: ignore[arg-type]
    return make_run(status="timeout" if kind == "timeout" else "error", totals=None, failure=failure)


def test_a_clean_measurement_and_a_repeatable_branch_crash_are_stored() -> None:
    assert cacheable(_clean()) is None
    assert cacheable(_clean(runs=[make_run(), _failed("exception", "vllm"), _failed("did-not-finish", "vllm")])) is None


@pytest.mark.parametrize(
    "run, needle",
    [
        (_clean(exited_cleanly=False, error="probe exited with code 1: boom"), "exited with code 1"),
        (_clean(exited_cleanly=False, timed_out=True, error="probe timed out after 600 s"), "timed out"),
        (_clean(header=None), "no header"),
        (_clean(runs=[make_run(status="error", totals=None, error="the probe did not report this run")]), "not measured"),
        (_clean(runs=[_failed("timeout", "vllm")]), "timeout in vllm code"),
        (_clean(runs=[_failed("exception", "probe")]), "exception in probe code"),
    ],
)
def test_anything_that_may_not_repeat_is_never_stored(run: BranchRun, needle: str) -> None:
    why = cacheable(run)
    assert why is not None and needle in why


def _key(**changes: Any) -> str:
    args: dict[str, Any] = dict(tier="scheduler", job=JOB, env_fingerprint=ENV, base_fingerprint=BASE,
                                scenario_sha256={"s": "5" * 64}, probe_timeout_s=600.0)
    return result_key(**{**args, **changes})


def test_the_key_changes_with_everything_the_runs_depend_on() -> None:
    changed = [
        _key(tier="engine"),
        _key(job={**JOB, "run_timeout_s": 30.0}),
        _key(env_fingerprint={**ENV, "manifest": {"own": {"overlay/x.py": "2" * 64}}}),
        _key(env_fingerprint={**ENV, "sha": "b" * 40}),
        _key(base_fingerprint={**BASE, "wheel_hash": "v" * 64}),
        _key(scenario_sha256={"s": "6" * 64}),
        _key(probe_timeout_s=300.0),
    ]
    assert len({_key(), *changed}) == len(changed) + 1


def test_the_key_ignores_what_only_names_the_environment() -> None:
    """Two branch names for one commit share their runs; a rebuilt environment's path or time does not matter."""
    renamed = {**ENV, "name": "other", "ref": "refs/heads/other", "created_at": "later", "path": "/elsewhere"}
    assert _key(env_fingerprint=renamed) == _key()


def test_off_turns_the_cache_off_and_a_folder_moves_it(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(CACHE_ENV, "off")
    assert cache_dir() is None and open_cache(True, True) is None
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "results"))
    assert cache_dir() == (tmp_path / "results").resolve()
    assert open_cache(False, False) is None  # verify: neither read nor written
    cache = open_cache(False, True)
    assert cache is not None and (cache.reuse, cache.keep) == (False, True)


def test_a_result_cache_folder_that_cannot_be_made_is_a_usage_error(tmp_path, monkeypatch) -> None:
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "a-file" / "results"))
    with pytest.raises(ConfigError) as info:
        cache_dir()
    assert CACHE_ENV in info.value.problem and "`off`" in info.value.hint


def test_a_cache_that_cannot_be_written_costs_the_reuse_not_the_measurement(tmp_path) -> None:
    (tmp_path / "job.json").write_text(json.dumps(JOB))
    (tmp_path / "runs.jsonl").write_text("")
    run = _clean(job_path=tmp_path / "job.json", records_path=tmp_path / "runs.jsonl", nonce="n" * 32)
    (tmp_path / "a-file").write_text("")
    said: list[str] = []
    assert ResultCache(tmp_path / "a-file").store("ab" + "0" * 62, run, said.append) is False
    assert len(said) == 1 and "runs not cached: cannot write" in said[0]


@pytest.mark.parametrize("damage", ["not UTF-8", "gone"])
def test_probe_files_that_cannot_be_read_cost_the_reuse_not_the_run(tmp_path, damage) -> None:
    """Records the reader accepted (it replaces bad bytes) but the cache cannot hold as text, or files
    removed meanwhile: the runs are judged as measured and simply not stored."""
    (tmp_path / "job.json").write_text(json.dumps(JOB))
    (tmp_path / "runs.jsonl").write_bytes(b'{"kind": "header", "note": "\xff"}\n')
    if damage == "gone":
        (tmp_path / "runs.jsonl").unlink()
    run = _clean(job_path=tmp_path / "job.json", records_path=tmp_path / "runs.jsonl", nonce="n" * 32)
    said: list[str] = []
    assert ResultCache(tmp_path / "cache").store("ab" + "0" * 62, run, said.append) is False
    assert len(said) == 1 and "runs not cached: cannot read its probe files" in said[0]
    assert not list((tmp_path / "cache").rglob("*.json"))
