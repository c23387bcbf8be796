"""Scenario files: the shipped ones load and plan the right runs; bad files fail with a clear
ConfigError.

Pure and fast: loading validates the schema and plays each scheduler script
once in Python, no vLLM. Bad files are the smallest valid file (`GOOD`) with
one key changed, so each error message is checked for exactly that key.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from difftest import tiers
from difftest.core.errors import ConfigError
from difftest.probe.protocol import PROTOCOL_VERSION
from difftest.run.pipeline import make_job
from difftest.tiers.engine.scenario import load_engine_scenario
from difftest.tiers.scheduler.scenario import load_scenario, load_scenarios
from tests.factories import SCENARIOS_DIR

SCENARIOS = SCENARIOS_DIR / "scheduler"
REQUIRED = {
    "eos-in-accepted-drafts",
    "stop-token-in-accepted-drafts",
    "max-tokens-mid-block",
    "eos-on-bonus",
    "grammar-all-invalid-async",
    "mixed-batch-invalid-async",
    "partial-invalid-async",
    "grammar-trim-sync",
    "long-random-k1",
    "long-random-k3",
    "long-random-k5",
}
GOOD: dict[str, Any] = {
    "statement": "one line",
    "k": 2,
    "requests": [
        {
            "id": "r",
            "prompt": "hi",
            "max_tokens": 3,
            "target": "abcd",
            "drafter": {"kind": "scripted", "steps": ["b"]},
        }
    ],
}
GOOD_ENGINE: dict[str, Any] = {
    "statement": "one line",
    "k": 2,
    "requests": [{"id": "r", "prompt": "yes no", "max_tokens": 8}],
}
TWO_REQUESTS: dict[str, Any] = {
    **GOOD,
    "requests": [GOOD["requests"][0], {**GOOD["requests"][0], "id": "s"}],
}


def expected_rows(scenario: Any) -> list[Any]:
    """The verifications of the scenario's first request, played alone."""
    from difftest.tiers.scheduler.play import play_request

    return play_request(scenario.probe_data(), scenario.requests[0].id).verifications


def _write(tmp_path: Path, data: dict[str, Any], name: str = "s.yaml") -> Path:
    path = tmp_path / name
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
    runs = mixed.runs()
    labels = [r["label"] for r in runs]
    assert labels[:1] == ["order:grammar,plain1,plain2"] and labels[-3:] == [
        "alone:grammar",
        "alone:plain1",
        "alone:plain2",
    ]
    assert [r["role"] for r in runs] == ["batch"] * 6 + ["alone"] * 3
    assert runs[-1]["order"] == ["plain2"]
    alone = next(s for s in load_scenarios(SCENARIOS) if s.name == "grammar-all-invalid-async")
    assert [(r["label"], r["role"]) for r in alone.runs()] == [("order:grammar", "batch")]


def test_explicit_orders_and_alone_false(tmp_path: Path) -> None:
    scenario = load_scenario(
        _write(tmp_path, {**TWO_REQUESTS, "orders": [["s", "r"]], "alone": False})
    )
    assert [(r["label"], r["order"], r["role"]) for r in scenario.runs()] == [
        ("order:s,r", ["s", "r"], "batch")
    ]


def test_job_scenario_is_plain_json_with_the_planned_runs() -> None:
    scenario = next(s for s in load_scenarios(SCENARIOS) if s.name == "mixed-batch-invalid-async")
    entry = scenario.job_scenario()
    assert set(entry) == {"name", "file", "data", "runs"}
    assert entry["name"] == scenario.name and entry["runs"] == scenario.runs()
    assert (
        entry["data"]["orders"] == "all"
        and "file" not in entry["data"]
        and "sha256" not in entry["data"]
    )
    assert json.loads(json.dumps(entry)) == entry


def test_make_job_for_each_tier(tmp_path: Path) -> None:
    tier = tiers.get("scheduler")
    scenarios = load_scenarios(SCENARIOS)
    job = make_job(tier, scenarios, run_timeout_s=30.0, work_dir=tmp_path)
    assert (job["protocol"], job["entry"], job["work_dir"], job["run_timeout_s"]) == (
        PROTOCOL_VERSION,
        tier.probe_entry,
        str(tmp_path),
        30.0,
    )
    assert [s["name"] for s in job["scenarios"]] == [s.name for s in scenarios]
    json.dumps(job)


@pytest.mark.parametrize(
    "patch, words",
    [
        ({"k": 0}, ["k", "0", "1 to 8"]),
        ({"colour": 1}, ["colour", "unknown key"]),
        ({"draft_path": "later"}, ["draft_path", "later", "sync"]),
        ({"orders": [["x"]]}, ["orders", "permutation"]),
        ({"statement": "two\nlines"}, ["statement", "one line"]),
        ({"in_flight": 2}, ["in_flight", "draft_path: async"]),
        ({"in_flight": 3}, ["in_flight", "3"]),
        ({"max_num_batched_tokens": 2}, ["max_num_batched_tokens", "1 + k = 3", "padded"]),
        ({"kv_blocks": 0}, ["kv_blocks", "0"]),
        ({"kv_connector": "prefill-node"}, ["kv_connector", "decode-node"]),
        ({"spec_decoding": "maybe"}, ["spec_decoding", "maybe"]),
    ],
)
def test_schema_errors_name_key_value_and_fix(
    tmp_path: Path, patch: dict[str, Any], words: list[str]
) -> None:
    with pytest.raises(ConfigError) as err:
        load_scenario(_write(tmp_path, {**GOOD, **patch}))
    text = str(err.value)
    assert "s.yaml" in text and "fix:" in text
    for word in words:
        assert word in text
    # A check across keys names its key and gives that key's fix, not the whole mapping.
    assert "(top level)" not in text and "'statement'" not in text
    assert "compare with" not in text


@pytest.mark.parametrize(
    "orders, words",
    [([], ["empty list"]), ([["r", "s"], ["s", "r"], ["r", "s"]], ["['r', 's']", "listed twice"])],
    ids=["empty", "duplicate"],
)
@pytest.mark.parametrize(
    "loader, good",
    [(load_scenario, TWO_REQUESTS), (load_engine_scenario, GOOD_ENGINE)],
    ids=["scheduler", "engine"],
)
def test_orders_must_run_something_and_each_order_once(
    tmp_path: Path, loader: Any, good: dict[str, Any], orders: list[list[str]], words: list[str]
) -> None:
    requests = [{**good["requests"][0], "id": rid} for rid in ("r", "s")]
    path = _write(tmp_path, {**good, "requests": requests, "orders": orders}, "bad-orders.yaml")
    with pytest.raises(ConfigError) as err:
        loader(path)
    text = str(err.value)
    assert "bad-orders.yaml" in text and "orders" in text
    for word in words:
        assert word in text


@pytest.mark.parametrize(
    "req, words",
    [
        ({"prompt": ""}, ["prompt", "at least 1 token"]),
        ({"target": "a<oops>"}, ["target", "<oops>"]),
        ({"drafter": {"kind": "guess"}}, ["drafter", "guess"]),
        ({"target": "ab", "max_tokens": 9}, ["requests.r", "too short"]),
        ({"target": "maybe<eos>", "grammar": {"choice": ["yes"]}}, ["requests.r", "grammar"]),
        ({"id": "a,b"}, ["id", "run labels"]),
        (
            {"drafter": {"kind": "scripted", "steps": ["b"], "skipped": [0]}},
            ["drafter.scripted.skipped", "counted from 1"],
        ),
        (
            {"drafter": {"kind": "random", "acceptance": 1, "skipped": [2, 2]}},
            ["drafter.random.skipped", "distinct"],
        ),
    ],
)
def test_request_errors(tmp_path: Path, req: dict[str, Any], words: list[str]) -> None:
    data = {**GOOD, "requests": [{**GOOD["requests"][0], **req}]}
    with pytest.raises(ConfigError) as err:
        load_scenario(_write(tmp_path, data))
    for word in words:
        assert word in str(err.value)


def test_duplicate_request_ids(tmp_path: Path) -> None:
    data = {**GOOD, "requests": [GOOD["requests"][0], GOOD["requests"][0]]}
    with pytest.raises(ConfigError, match=r"duplicate id\(s\) \['r'\]"):
        load_scenario(_write(tmp_path, data))


def test_an_async_drafter_may_propose_fewer_than_k(tmp_path: Path) -> None:
    """#49: the unfilled placeholders are -1 padding, which the oracle counts as no draft; a step
    that proposed nothing is a row only under the lenient reading."""
    request = {**GOOD["requests"][0], "drafter": {"kind": "scripted", "steps": ["", "c"]}}
    scenario = load_scenario(
        _write(tmp_path, {**GOOD, "draft_path": "async", "requests": [request]})
    )
    first, second = expected_rows(scenario)[:2]
    assert (first.real_drafts, first.scheduled_drafts) == (0, scenario.k)
    assert (second.real_drafts, second.scheduled_drafts) == (1, scenario.k)


def test_drafter_skips_are_played_on_the_sync_path_only(tmp_path: Path) -> None:
    request = {
        **GOOD["requests"][0],
        "drafter": {"kind": "scripted", "steps": ["bc"], "then": "perfect", "skipped": [1]},
    }
    with pytest.raises(
        ConfigError, match=r"requests \['r'\]: `drafter.skipped` is played on the sync path only"
    ):
        load_scenario(_write(tmp_path, {**GOOD, "draft_path": "async", "requests": [request]}))
    request["drafter"] = {"kind": "scripted", "steps": ["b"], "skipped": [1]}
    assert load_scenario(_write(tmp_path, {**GOOD, "requests": [request]})).requests[
        0
    ].drafter.skipped == [1]


def test_scenario_names_must_be_unique_in_a_folder(tmp_path: Path) -> None:
    _write(tmp_path, {**GOOD, "name": "same"}, "a.yaml")
    _write(tmp_path, {**GOOD, "name": "same"}, "b.yaml")
    with pytest.raises(ConfigError, match="'same' already used by a.yaml"):
        load_scenarios(tmp_path)


@pytest.mark.parametrize(
    "name",
    ["x$(touch /tmp/p)", "x;rm -rf ~", "a b", "x\x1b[2Jy", "x\ty", "-k", ".hidden", "x" * 101],
)
def test_a_name_a_shell_or_terminal_would_read_is_refused(tmp_path: Path, name: str) -> None:
    """Scenario names go into commands printed for pasting (`difftest show NAME`, blame's and
    fuzz's Reproduce lines) and terminal lines: the characters of a branch name only."""
    with pytest.raises(ConfigError) as err:
        load_scenario(_write(tmp_path, {**GOOD, "name": name}))
    assert "name" in str(err.value) and "letters, digits" in str(err.value)


def test_a_file_name_a_shell_would_read_is_refused_as_the_default_name(tmp_path: Path) -> None:
    unnamed = {k: v for k, v in GOOD.items() if k != "name"}
    with pytest.raises(ConfigError, match="letters, digits"):
        load_scenario(_write(tmp_path, unnamed, "x$(touch p).yaml"))


def test_escape_sequences_in_a_statement_never_reach_a_terminal(tmp_path: Path) -> None:
    screen_clear, link = "\x1b[2J", "\x1b]8;;http://x\x07here\x1b]8;;\x07"
    scenario = load_scenario(_write(tmp_path, {**GOOD, "statement": f"a{screen_clear}b{link}"}))
    assert "\x1b" not in scenario.statement and "\x07" not in scenario.statement
    assert scenario.statement.startswith("a") and "here" in scenario.statement


def test_an_empty_folder_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"no \*\.yaml scenario files"):
        load_scenarios(tmp_path)


@pytest.mark.parametrize(
    "content, words", [("[1, 2]", ["top level must be a mapping"]), ("k: [", ["not valid YAML"])]
)
def test_files_that_are_not_a_mapping(tmp_path: Path, content: str, words: list[str]) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(content)
    with pytest.raises(ConfigError) as err:
        load_scenario(path)
    for word in words:
        assert word in str(err.value)


def test_a_kv_pool_too_small_for_one_request_is_refused(tmp_path: Path) -> None:
    """A request that cannot fit the pool alone would never be scheduled: every branch would time
    out, so the file is refused with the request and the blocks it needs."""
    with pytest.raises(ConfigError) as err:
        long = {
            **GOOD["requests"][0],
            "max_tokens": 30,
            "target": "abcdefghijklmnopqrstuvwxyz0123456789",
        }
        load_scenario(_write(tmp_path, {**GOOD, "kv_blocks": 1, "requests": [long]}))
    assert "kv_blocks" in str(err.value) and "cannot hold request r" in str(err.value)


def test_serving_conditions_load_and_read_in_words(tmp_path: Path) -> None:
    data = {
        **GOOD,
        "draft_path": "async",
        "in_flight": 2,
        "prefix_caching": True,
        "kv_connector": "decode-node",
        "kv_blocks": 40,
        "max_num_batched_tokens": 8,
        "requests": [
            {**GOOD["requests"][0], "prompt": "h", "arrive": 2, "abort": 1,
             "drafter": {"kind": "scripted", "steps": [], "then": "perfect"}},
        ],
    }  # fmt: skip
    scenario = load_scenario(_write(tmp_path, data))
    assert scenario.conditions == [
        "two steps in flight",
        "prefix caching",
        "P/D decode node",
        "40 KV blocks",
        "token budget 8",
        "staggered arrivals",
        "aborts",
        "1-token prompts",
    ]
    assert load_scenario(_write(tmp_path, GOOD, "plain.yaml")).conditions == []


def test_an_abort_that_never_lands_is_refused(tmp_path: Path) -> None:
    """Alone the request ends after 3 steps (x; abc+d; efg+h): an abort at step 3 or later would
    never land in any batch (a batch only adds steps), so the run would not test an abort."""
    request = {
        **GOOD["requests"][0],
        "max_tokens": 8,
        "target": "xabcdefghijk",
        "drafter": {"kind": "scripted", "steps": [], "then": "perfect"},
    }
    load_scenario(_write(tmp_path, {**GOOD, "k": 3, "requests": [{**request, "abort": 2}]}))
    with pytest.raises(ConfigError) as err:
        load_scenario(_write(tmp_path, {**GOOD, "k": 3, "requests": [{**request, "abort": 3}]}))
    text = str(err.value)
    assert "requests.r.abort: 3 never lands" in text and "from 0 to 2" in text


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"in_flight": True, "draft_path": "async"}, "in_flight"),
        ({"kv_blocks": True}, "kv_blocks"),
        ({"k": True}, "k"),
        ({"requests": [{**GOOD["requests"][0], "max_tokens": True}]}, "max_tokens"),
    ],
)
def test_a_boolean_is_never_read_as_a_number(tmp_path: Path, change: dict, key: str) -> None:
    """#29, case 9: `in_flight: true` once read as 1 (and was not listed as a condition)."""
    with pytest.raises(ConfigError) as err:
        load_scenario(_write(tmp_path, {**GOOD, **change}))
    assert f"{key}: true is a boolean" in str(err.value)


def test_a_boolean_key_still_takes_a_boolean(tmp_path: Path) -> None:
    assert load_scenario(_write(tmp_path, {**GOOD, "alone": True})).alone is True
