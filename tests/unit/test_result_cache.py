"""What the result cache stores and what its key depends on
(no probe: the end-to-end tests run real ones)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from difftest.core.errors import ConfigError
from difftest.core.outcome import ProcessOutcome, clean_outcome
from difftest.core.records import Failure, ProbeHeader
from difftest.probe.protocol import CallInfo, RecordWriter
from difftest.run.cache import results as result_cache
from difftest.run.cache.results import (
    CACHE_ENV,
    CACHE_FORMAT,
    ResultCache,
    _payload_hash,
    cache_dir,
    cacheable,
    open_cache,
    result_key,
)
from difftest.run.probes.runner import BranchRun
from tests.factories import make_run, make_step, make_totals

HEADER = ProbeHeader(
    kind="header", nonce="n" * 32, protocol=3, python="3.12.3", import_s=9.0, setup_s=0.1
)
JOB: dict[str, Any] = {
    "protocol": 3,
    "entry": "scheduler",
    "work_dir": "/models",
    "run_timeout_s": 60.0,
    "scenarios": [{"name": "s", "runs": [{"label": "order:a", "role": "batch", "order": ["a"]}]}],
}
ENV = {
    "kind": "branch",
    "key": "k",
    "sha": "a" * 40,
    "manifest": {"own": {"overlay/x.py": "1" * 64}},
    "name": "main",
    "ref": "main",
    "fingerprint_hash": "f" * 64,
}
BASE = {"key": "b", "wheel_hash": "w" * 64}


def _clean(**overrides: Any) -> BranchRun:
    fields: dict[str, Any] = dict(
        branch="main",
        tier="scheduler",
        header=HEADER,
        runs=[make_run()],
        exited_cleanly=True,
        outcome=clean_outcome(12.0),
    )
    return BranchRun(**{**fields, **overrides})


def _failed(kind: str, origin: str) -> Any:
    failure = Failure(kind=kind, type="ValueError", summary="ValueError: x", origin=origin)  # type: ignore[arg-type]
    return make_run(
        status="timeout" if kind == "timeout" else "error", totals=None, failure=failure
    )


def test_a_clean_measurement_and_a_repeatable_branch_crash_are_stored() -> None:
    assert cacheable(_clean()) is None
    assert (
        cacheable(
            _clean(
                runs=[make_run(), _failed("exception", "vllm"), _failed("did-not-finish", "vllm")]
            )
        )
        is None
    )


@pytest.mark.parametrize(
    "run, needle",
    [
        (
            _clean(exited_cleanly=False, error="probe exited with code 1: boom"),
            "exited with code 1",
        ),
        (
            _clean(exited_cleanly=False, timed_out=True, error="probe timed out after 600 s"),
            "timed out",
        ),
        (_clean(header=None), "no header"),
        (
            _clean(
                runs=[
                    make_run(status="error", totals=None, error="the probe did not report this run")
                ]
            ),
            "not measured",
        ),
        (_clean(runs=[_failed("timeout", "vllm")]), "timeout in vllm code"),
        (_clean(runs=[_failed("exception", "probe")]), "exception in probe code"),
    ],
)
def test_anything_that_may_not_repeat_is_never_stored(run: BranchRun, needle: str) -> None:
    why = cacheable(run)
    assert why is not None and needle in why


def _key(**changes: Any) -> str:
    args: dict[str, Any] = dict(
        tier="scheduler",
        job=JOB,
        env_fingerprint=ENV,
        base_fingerprint=BASE,
        scenario_sha256={"s": "5" * 64},
        probe_timeout_s=600.0,
    )
    return result_key(**{**args, **changes})


def test_the_key_changes_with_everything_the_runs_depend_on() -> None:
    changed = [
        _key(tier="engine"),
        _key(exit_timeout_s=3.0),
        _key(job={**JOB, "run_timeout_s": 30.0}),
        _key(env_fingerprint={**ENV, "manifest": {"own": {"overlay/x.py": "2" * 64}}}),
        _key(env_fingerprint={**ENV, "sha": "b" * 40}),
        _key(base_fingerprint={**BASE, "wheel_hash": "v" * 64}),
        _key(scenario_sha256={"s": "6" * 64}),
        _key(probe_timeout_s=300.0),
    ]
    assert len({_key(), *changed}) == len(changed) + 1


def test_the_key_ignores_what_only_names_the_environment() -> None:
    """Two branch names for one commit share their runs;
    a rebuilt environment's path or time does not matter."""
    renamed = {
        **ENV,
        "name": "other",
        "ref": "refs/heads/other",
        "created_at": "later",
        "path": "/elsewhere",
    }
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
    run = _clean(
        job_path=tmp_path / "job.json", records_path=tmp_path / "runs.jsonl", nonce="n" * 32
    )
    (tmp_path / "a-file").write_text("")
    said: list[str] = []
    assert ResultCache(tmp_path / "a-file").store("ab" + "0" * 62, run, said.append) is False
    assert len(said) == 1 and "runs not cached: cannot write" in said[0]


@pytest.mark.parametrize("damage", ["not UTF-8", "gone"])
def test_probe_files_that_cannot_be_read_cost_the_reuse_not_the_run(tmp_path, damage) -> None:
    """Records the reader accepted (it replaces bad bytes) but the cache cannot hold as text, or
    files removed meanwhile: the runs are judged as measured and simply not stored."""
    (tmp_path / "job.json").write_text(json.dumps(JOB))
    (tmp_path / "runs.jsonl").write_bytes(b'{"kind": "header", "note": "\xff"}\n')
    if damage == "gone":
        (tmp_path / "runs.jsonl").unlink()
    run = _clean(
        job_path=tmp_path / "job.json", records_path=tmp_path / "runs.jsonl", nonce="n" * 32
    )
    said: list[str] = []
    assert ResultCache(tmp_path / "cache").store("ab" + "0" * 62, run, said.append) is False
    assert len(said) == 1 and "runs not cached: cannot read its probe files" in said[0]
    assert not list((tmp_path / "cache").rglob("*.json"))


# -- what else the key depends on: difftest itself and the environment a probe is given ---------


def test_the_key_changes_with_difftests_version(monkeypatch) -> None:
    before = _key()
    monkeypatch.setattr(result_cache, "__version__", result_cache.__version__ + ".post1")
    assert _key() != before


def test_the_key_changes_with_the_protocol_version(monkeypatch) -> None:
    before = _key()
    monkeypatch.setattr(result_cache, "PROTOCOL_VERSION", result_cache.PROTOCOL_VERSION + 1)
    assert _key() != before


def test_the_key_changes_with_difftests_own_code(monkeypatch) -> None:
    before = _key()
    monkeypatch.setattr(result_cache, "code_digest", lambda: "c" * 64)
    assert _key() != before


def test_the_key_changes_with_a_variable_that_reaches_the_probe_and_no_other(monkeypatch) -> None:
    """`VLLM_*` reaches the probe (`run.probes.environ.passed_environ`), so its runs may depend on
    it; an unrelated variable never reaches it, and must not cost a re-run."""
    for name in ("VLLM_DIFFTEST_SOMETHING", "SOME_UNRELATED_VAR"):
        monkeypatch.delenv(name, raising=False)
    before = _key()
    monkeypatch.setenv("SOME_UNRELATED_VAR", "1")
    assert _key() == before
    monkeypatch.setenv("VLLM_DIFFTEST_SOMETHING", "1")
    changed = _key()
    assert changed != before
    monkeypatch.setenv("VLLM_DIFFTEST_SOMETHING", "2")
    assert _key() not in (before, changed)


# -- only a clean measurement is stored, and only one is taken back ---------------------------

NONCE = "n" * 32
#: A failure of the probe's own code: it may not repeat, so such a run is never stored.
PROBE_FAILURE = {
    "kind": "exception",
    "type": "ValueError",
    "summary": "ValueError: x",
    "where": "difftest/probe/x.py:1",
    "origin": "probe",
    "traceback": "Traceback (most recent call last):\nValueError: x\n",
}


def records_text(failure: dict[str, Any] | None = None) -> str:
    """What a probe writes for JOB (its own `RecordWriter`): its one run measured,
    or failing with `failure`."""
    stream = io.StringIO()
    writer = RecordWriter(stream, NONCE)
    writer.header({"vllm": "0.32.0"}, import_s=1.0, setup_s=0.5)
    scenario = JOB["scenarios"][0]
    result = {
        "steps": [make_step().model_dump()],
        "totals": make_totals().model_dump(),
        "outputs": {"a": [1, 2, 3, 4]},
        "finish_reasons": {"a": "stop"},
        "notes": {},
    }
    call = CallInfo(None, failure, 0.25) if failure else CallInfo(result, None, 0.25)  # type: ignore[arg-type]
    writer.run(scenario, scenario["runs"][0], call)
    writer.trailer()
    return stream.getvalue()


def probe_files(folder: Path, records: str) -> dict[str, Any]:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "job.json").write_text(json.dumps(JOB))
    (folder / "runs.jsonl").write_text(records)
    return {"job_path": folder / "job.json", "records_path": folder / "runs.jsonl", "nonce": NONCE}


@pytest.mark.parametrize(
    "why",
    ["the process exited with code 1", "a run failed in the probe's own code"],
)
def test_a_run_that_is_not_cacheable_is_never_stored(tmp_path, why) -> None:
    """Its probe files are there and read back; only `cacheable` keeps them out of the cache."""
    if why.startswith("the process"):
        files = probe_files(tmp_path / "probe", records_text())
        run = _clean(
            exited_cleanly=False,
            error="probe exited with code 1: boom",
            outcome=ProcessOutcome(exit_code=1, trailer=True, started=True, duration_s=12.0),
            **files,
        )
    else:
        files = probe_files(tmp_path / "probe", records_text(PROBE_FAILURE))
        run = _clean(runs=[_failed("exception", "probe")], **files)
    assert cacheable(run) is not None
    said: list[str] = []
    assert ResultCache(tmp_path / "cache").store("ab" + "0" * 62, run, said.append) is False
    assert not [p for p in (tmp_path / "cache").rglob("*") if p.is_file()], (
        "neither an entry nor its validated copy"
    )
    assert len(said) == 1 and "runs not cached" in said[0]


def write_entry(cache: ResultCache, key: str, records: str, outcome: ProcessOutcome) -> Path:
    """An entry as `store` writes one, by hand: whatever it holds, its payload's sha256 is right."""
    payload = {
        "job": json.dumps(JOB),
        "records": records,
        "nonce": NONCE,
        "duration_s": 12.0,
        "measured_at": "2025-01-01T00:00:00+00:00",
        "outcome": outcome.model_dump(mode="json"),
    }
    entry = {
        "format": CACHE_FORMAT,
        "key": key,
        "payload": payload,
        "payload_sha256": _payload_hash(payload),
    }
    path = cache.folder / key[:2] / f"{key}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(entry, sort_keys=True))
    return path


def test_a_hand_written_clean_entry_is_reused(tmp_path) -> None:
    """The control for the next test:
    an entry written this way is taken back when what it holds is clean."""
    cache, key = ResultCache(tmp_path / "cache"), "cd" + "0" * 62
    write_entry(cache, key, records_text(), clean_outcome(12.0))
    restored = cache.load(key, JOB, "main", "scheduler", tmp_path / "work", lambda _m: None)  # type: ignore[arg-type]
    assert (
        restored is not None
        and restored.reused is not None
        and [r.status for r in restored.runs] == ["ok"]
    )
    assert cacheable(restored) is None


@pytest.mark.parametrize(
    "holds", ["a probe that exited with code 1", "a run that failed in the probe's own code"]
)
def test_an_entry_holding_a_run_that_is_never_stored_is_refused_as_damaged(tmp_path, holds) -> None:
    """Its hash is right and its records validate:
    only `cacheable`, applied again on reading, refuses it."""
    cache, key = ResultCache(tmp_path / "cache"), "cd" + "0" * 62
    if holds.startswith("a probe"):
        path = write_entry(
            cache, key, records_text(), ProcessOutcome(exit_code=1, trailer=True, started=True)
        )
    else:
        path = write_entry(cache, key, records_text(PROBE_FAILURE), clean_outcome(12.0))
    said: list[str] = []
    assert cache.load(key, JOB, "main", "scheduler", tmp_path / "work", said.append) is None  # type: ignore[arg-type]
    assert len(said) == 1 and "is damaged (it holds a run that is never stored" in said[0], said
    assert not path.exists(), "deleted, so that the next run measures it again"
    assert not list(cache.folder.rglob("*.json")), "its validated copy too"
