"""The result cache's validated copies (`run.cache.validated_copy`): an intact entry is reused
without reading its records line by line again; an entry whose bytes changed in any way is read line
by line and judged as before.

A probe's output is written by hand with the probe's own `RecordWriter` and read by the runner's
reader, then stored and loaded as `run`/`gate` do (no vLLM: the end-to-end tests run real probes).
"""

from __future__ import annotations

import hashlib
import io
import json
import math
from pathlib import Path
from typing import Any

import pytest

import difftest.run.cache.results as result_cache
from difftest.core.outcome import clean_outcome
from difftest.probe.protocol import PROTOCOL_VERSION, CallInfo, Job, RecordWriter
from difftest.run.cache.results import ResultCache
from difftest.run.cache.validated_copy import (
    CopyDamaged,
    ReadRecords,
    copy_path,
    read_copy,
    write_copy,
)
from difftest.run.probes.read_records import read_delivery
from difftest.run.probes.runner import BranchRun
from tests.factories import TIER, make_step, make_totals

NONCE = "c" * 32
KEY = "ab" + "0" * 62
JOB: Job = {
    "protocol": PROTOCOL_VERSION,
    "entry": TIER,
    "work_dir": "",
    "run_timeout_s": None,
    "scenarios": [
        {
            "name": "eos",
            "file": "eos.yaml",
            "data": {},
            "runs": [
                {"label": "order:a,b", "order": ["a", "b"], "role": "batch"},
                {"label": "alone:a", "order": ["a"], "role": "alone"},
            ],
        },
    ],
}


def _measured(folder: Path) -> BranchRun:
    """A clean probe's output for JOB, as the runner leaves it: its files,
    and its runs as the reader read them."""
    stream = io.StringIO()
    writer = RecordWriter(stream, NONCE)
    writer.header({"vllm": "0.32.0"}, import_s=1.0, setup_s=0.5)
    for scenario in JOB["scenarios"]:
        for planned in scenario["runs"]:
            result = {
                "steps": [make_step(1).model_dump(), make_step(2, stats=None).model_dump()],
                "totals": make_totals().model_dump(),
                "outputs": {rid: [1, 2, 3, 4] for rid in planned["order"]},
                "finish_reasons": {rid: "stop" for rid in planned["order"]},
                "notes": {"branch's own": {"ratio": 0.5}},
            }
            writer.run(scenario, planned, CallInfo(result, None, 0.25))  # type: ignore[arg-type]
    writer.trailer()
    folder.mkdir(parents=True, exist_ok=True)
    job_path, records_path = folder / "job.json", folder / "runs.jsonl"
    job_path.write_text(json.dumps(JOB))
    records_path.write_text(stream.getvalue())
    delivery = read_delivery(records_path, NONCE, JOB, TIER, exited_cleanly=True)
    return BranchRun(
        branch="main",
        tier=TIER,
        header=delivery.header,
        runs=delivery.runs(None),
        exited_cleanly=True,
        outcome=clean_outcome(12.0),
        job_path=job_path,
        records_path=records_path,
        nonce=NONCE,
        duration_s=12.0,
        ended_at=1.7e9,
    )


@pytest.fixture
def stored(tmp_path: Path) -> tuple[ResultCache, BranchRun, Path]:
    """A cache holding one clean measurement: (cache, the measurement, its entry's path)."""
    cache = ResultCache(tmp_path / "cache")
    run = _measured(tmp_path / "probe")
    assert cache.store(KEY, run, print)
    return cache, run, cache.folder / KEY[:2] / f"{KEY}.json"


def _load(cache: ResultCache, tmp_path: Path) -> tuple[BranchRun | None, list[str]]:
    said: list[str] = []
    return cache.load(KEY, JOB, "main", TIER, tmp_path / "out", said.append), said


def _reader_calls(monkeypatch) -> list[int]:
    """Counts each line-by-line reading of an entry's records (the runner's reader,
    as the cache calls it)."""
    calls: list[int] = []
    original = result_cache.check_lines

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(result_cache, "check_lines", counted)
    return calls


def _rewrite(entry: Path, edit: Any, rehash: bool) -> None:
    """Change an entry's records with `edit`; `rehash`: recompute its payload's sha256 to match
    (a forgery)."""
    data = json.loads(entry.read_text())
    data["payload"]["records"] = edit(data["payload"]["records"])
    if rehash:
        data["payload_sha256"] = hashlib.sha256(
            json.dumps(data["payload"], sort_keys=True).encode()
        ).hexdigest()
    entry.write_text(json.dumps(data, sort_keys=True))


def test_storing_keeps_a_validated_copy_of_exactly_the_stored_bytes(stored) -> None:
    _cache, run, entry = stored
    kept = read_copy(copy_path(entry), hashlib.sha256(entry.read_bytes()).hexdigest())
    assert kept is not None and kept.header == run.header and kept.runs == run.runs
    assert (
        read_copy(copy_path(entry), "0" * 64) is None
    )  # a copy of other bytes is not this entry's


def test_an_intact_entry_is_reused_from_its_copy_without_reading_its_records_again(
    stored, tmp_path, monkeypatch
) -> None:
    cache, run, _entry = stored
    calls = _reader_calls(monkeypatch)
    restored, said = _load(cache, tmp_path)
    assert calls == [] and said == []
    assert restored is not None and restored.reused is not None
    assert restored.header == run.header and restored.runs == run.runs
    assert [r.model_fields_set for r in restored.runs] == [r.model_fields_set for r in run.runs]
    assert (
        restored.records_path is not None
        and restored.records_path.read_bytes() == run.records_path.read_bytes()
    )


def test_a_forged_entry_whose_hash_matches_is_read_line_by_line_and_caught(
    stored, tmp_path, monkeypatch
) -> None:
    cache, _run, entry = stored
    _rewrite(entry, lambda records: records.replace(NONCE, "0" * 32, 2), rehash=True)
    calls = _reader_calls(monkeypatch)
    restored, said = _load(cache, tmp_path)
    assert restored is None and calls == [1]
    assert (
        len(said) == 1
        and "its records do not validate: line 1 does not carry this probe's nonce" in said[0]
    )
    assert (
        not entry.exists() and not copy_path(entry).exists()
    )  # deleted, its copy too: measured again


def test_a_changed_counter_with_the_old_hash_is_caught_before_the_copy_is_looked_at(
    stored, tmp_path
) -> None:
    cache, _run, entry = stored
    _rewrite(
        entry,
        lambda records: records.replace('"num_accepted_tokens": 9', '"num_accepted_tokens": 10', 1),
        rehash=False,
    )
    restored, said = _load(cache, tmp_path)
    assert restored is None and "its payload does not match its sha256" in said[0]
    assert not entry.exists() and not copy_path(entry).exists()


def test_a_changed_counter_with_a_matching_hash_is_read_from_the_entry_not_the_copy(
    stored, tmp_path
) -> None:
    """Valid records, forged consistently: what is reused is what the entry now says,
    never the copy's runs."""
    cache, run, entry = stored
    _rewrite(
        entry, lambda records: records.replace('"num_drafts": 4', '"num_drafts": 5'), rehash=True
    )
    restored, said = _load(cache, tmp_path)
    assert restored is not None and said == []
    assert (
        {r.totals.num_drafts for r in restored.runs if r.totals}
        == {5}
        != {r.totals.num_drafts for r in run.runs if r.totals}
    )


def test_a_damaged_copy_is_named_and_the_records_are_read_line_by_line(
    stored, tmp_path, monkeypatch
) -> None:
    cache, run, entry = stored
    copy = copy_path(entry)
    copy.write_bytes(copy.read_bytes().replace(b'"num_drafts":4', b'"num_drafts":5', 1))
    calls = _reader_calls(monkeypatch)
    restored, said = _load(cache, tmp_path)
    assert calls == [1] and restored is not None and restored.runs == run.runs
    assert (
        len(said) == 1
        and "its validated copy is damaged (its body does not match its sha256)" in said[0]
    )
    assert entry.exists()  # the entry itself is intact: reused, and its copy written again
    restored, said = _load(cache, tmp_path)
    assert calls == [1] and said == [] and restored is not None and restored.runs == run.runs


def test_a_consistently_forged_copy_still_cannot_hold_a_run_the_models_reject(stored) -> None:
    _cache, _run, entry = stored
    copy = copy_path(entry)
    head, _, body = copy.read_bytes().partition(b"\n")
    body = body.replace(b'"num_drafts":4', b'"num_drafts":"4"', 1)
    fields = json.loads(head)
    fields["sha256"] = hashlib.sha256(body).hexdigest()
    copy.write_bytes(json.dumps(fields).encode() + b"\n" + body)
    with pytest.raises(CopyDamaged, match="does not validate"):
        read_copy(copy, fields["entry_sha256"])


def test_an_entry_without_a_copy_gets_one_on_its_first_reuse(stored, tmp_path, monkeypatch) -> None:
    cache, run, entry = stored
    copy_path(entry).unlink()
    calls = _reader_calls(monkeypatch)
    first, said = _load(cache, tmp_path)
    second, _ = _load(cache, tmp_path)
    assert calls == [1] and said == [] and copy_path(entry).exists()
    assert first is not None and second is not None and first.runs == second.runs == run.runs


def test_runs_that_would_not_read_back_exactly_get_no_copy(tmp_path) -> None:
    run = _measured(tmp_path / "probe")
    assert run.header is not None
    odd = run.runs[0].model_copy(
        update={"notes": {"ratio": math.nan}}
    )  # JSON has no NaN: it would read back as null
    path = tmp_path / "copy.runs.json"
    assert (
        write_copy(path, "0" * 64, ReadRecords(header=run.header, runs=[odd, *run.runs[1:]]))
        is False
    )
    assert not path.exists()
    assert write_copy(path, "0" * 64, ReadRecords(header=run.header, runs=run.runs)) is True


@pytest.mark.parametrize(
    "content", [b"", b"not json\n{}", b'{"format": 99, "entry_sha256": "x", "sha256": "y"}\n{}']
)
def test_a_copy_that_does_not_read_back_is_damaged(tmp_path, content: bytes) -> None:
    path = tmp_path / "copy.runs.json"
    path.write_bytes(content)
    with pytest.raises(CopyDamaged):
        read_copy(path, "x")


def test_no_copy_at_all_is_none(tmp_path) -> None:
    assert read_copy(tmp_path / "missing.runs.json", "x") is None
