"""Scenario schema: the shipped files load; bad files fail with a clear ConfigError (pure, fast)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from difftest.core.errors import ConfigError
from difftest.tiers.scheduler.scenario import load_scenario, load_scenarios, probe_job

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"
REQUIRED = {
    "eos-in-accepted-drafts", "stop-token-in-accepted-drafts", "max-tokens-mid-block", "eos-on-bonus",
    "grammar-all-invalid-async", "mixed-batch-invalid-async", "partial-invalid-async", "grammar-trim-sync",
    "long-random-k1", "long-random-k3", "long-random-k5",
}
GOOD = {
    "statement": "one line",
    "k": 2,
    "requests": [{"id": "r", "prompt": "hi", "max_tokens": 3, "target": "abcd", "drafter": {"kind": "scripted", "steps": ["b"]}}],
}


def _write(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_shipped_scenarios_load_with_statement_and_hash() -> None:
    scenarios = load_scenarios(SCENARIOS)
    assert REQUIRED <= {s.name for s in scenarios}
    for s in scenarios:
        assert s.statement and "\n" not in s.statement
        assert len(s.sha256) == 64 and s.file.endswith(".yaml")


def test_orders_all_and_alone_runs() -> None:
    mixed = next(s for s in load_scenarios(SCENARIOS) if s.name == "mixed-batch-invalid-async")
    assert len(mixed.orders()) == 6
    labels = [r["label"] for r in mixed.runs()]
    assert labels[:1] == ["order:grammar,plain1,plain2"] and labels[-3:] == ["alone:grammar", "alone:plain1", "alone:plain2"]
    alone = next(s for s in load_scenarios(SCENARIOS) if s.name == "grammar-all-invalid-async")
    assert [r["label"] for r in alone.runs()] == ["order:grammar"]


def test_probe_job_is_plain_json(tmp_path: Path) -> None:
    import json

    job = probe_job(load_scenarios(SCENARIOS), tmp_path)
    assert job["tier"] == "scheduler" and job["work_dir"] == str(tmp_path)
    entry = job["scenarios"][0]
    assert set(entry) == {"name", "file", "data"} and "runs" in entry["data"] and "orders" in entry["data"]
    json.dumps(job)


@pytest.mark.parametrize(
    "patch, words",
    [
        ({"k": 0}, ["k", "0", "1 to 8"]),
        ({"colour": 1}, ["colour", "unknown key"]),
        ({"draft_path": "later"}, ["draft_path", "later", "sync"]),
        ({"orders": [["x"]]}, ["orders", "permutation"]),
        ({"statement": "two\nlines"}, ["statement", "one line"]),
    ],
)
def test_schema_errors_name_key_value_and_fix(tmp_path: Path, patch: dict, words: list[str]) -> None:
    with pytest.raises(ConfigError) as err:
        load_scenario(_write(tmp_path, {**GOOD, **patch}))
    text = str(err.value)
    assert "s.yaml" in text and "fix:" in text
    for word in words:
        assert word in text


@pytest.mark.parametrize(
    "req, words",
    [
        ({"prompt": "h"}, ["prompt", "2 tokens"]),
        ({"target": "a<oops>"}, ["target", "<oops>"]),
        ({"drafter": {"kind": "guess"}}, ["drafter", "guess"]),
        ({"target": "ab", "max_tokens": 9}, ["requests.r", "too short"]),
        ({"target": "maybe<eos>", "grammar": {"choice": ["yes"]}}, ["requests.r", "grammar"]),
    ],
)
def test_request_errors(tmp_path: Path, req: dict, words: list[str]) -> None:
    data = {**GOOD, "requests": [{**GOOD["requests"][0], **req}]}
    with pytest.raises(ConfigError) as err:
        load_scenario(_write(tmp_path, data))
    for word in words:
        assert word in str(err.value)


def test_async_drafter_must_propose_k(tmp_path: Path) -> None:
    data = {**GOOD, "draft_path": "async"}
    with pytest.raises(ConfigError, match="exactly k=2"):
        load_scenario(_write(tmp_path, data))
