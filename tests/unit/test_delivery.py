"""Reading a probe's RUNS.jsonl (`difftest.run.probes.read_records`): one ProbeRun per planned run,
trusting nothing.

The file is written by hand: genuine records come from the probe's own
`RecordWriter` (so they are exactly what a probe writes), then single lines are
changed, added or dropped to make each fault - a bad counter, an unknown key,
a forged or duplicated record, a missing trailer, a torn last line - and the
test checks which runs survive and what the others say.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from difftest.core.records import ProbeRun
from difftest.probe.protocol import (
    PROTOCOL_VERSION,
    CallInfo,
    Job,
    PlannedRun,
    RecordWriter,
    RunResult,
)
from difftest.run.probes.read_records import read_delivery
from tests.factories import TIER, make_step, make_totals

NONCE = "s3cret-nonce"
BATCH: PlannedRun = {"label": "order:a,b", "order": ["a", "b"], "role": "batch"}
ALONE_A: PlannedRun = {"label": "alone:a", "order": ["a"], "role": "alone"}
ALONE_B: PlannedRun = {"label": "alone:b", "order": ["b"], "role": "alone"}
OTHER: PlannedRun = {"label": "order:c", "order": ["c"], "role": "batch"}
JOB: Job = {
    "protocol": PROTOCOL_VERSION,
    "entry": TIER,
    "work_dir": "",
    "run_timeout_s": None,
    "scenarios": [
        {"name": "eos", "file": "eos.yaml", "data": {}, "runs": [BATCH, ALONE_A, ALONE_B]},
        {"name": "stop", "file": "stop.yaml", "data": {}, "runs": [OTHER]},
    ],
}
#: Every planned run as (scenario, label), in plan order.
PLAN = [(s["name"], run["label"]) for s in JOB["scenarios"] for run in s["runs"]]
#: Line index of each run record in `genuine()` (the header is line 0).
LINE = {label: i + 1 for i, (_, label) in enumerate(PLAN)}


def genuine() -> list[dict[str, Any]]:
    """What a healthy probe writes for JOB: header, one run per planned run, trailer."""
    stream = io.StringIO()
    writer = RecordWriter(stream, NONCE)
    writer.header({"vllm": "0.32.0"}, import_s=1.0, setup_s=0.5)
    for scenario in JOB["scenarios"]:
        for planned in scenario["runs"]:
            result = {
                "steps": [make_step().model_dump()],
                "totals": make_totals().model_dump(),
                "outputs": {rid: [1, 2, 3, 4] for rid in planned["order"]},
                "finish_reasons": {rid: "stop" for rid in planned["order"]},
                "notes": {},
            }
            writer.run(scenario, planned, CallInfo(result, None, 0.25))  # type: ignore[arg-type]
    writer.trailer()
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def deliver(
    tmp_path: Path,
    records: list[Any],
    exited_cleanly: bool = True,
    process_error: str | None = None,
    tail: str = "",
) -> dict[str, ProbeRun]:
    """Write the records (dicts as JSON lines, strings as they are),
    read them back: runs by label."""
    path = tmp_path / "RUNS.jsonl"
    lines = [r if isinstance(r, str) else json.dumps(r) for r in records]
    path.write_text("".join(line + "\n" for line in lines) + tail)
    delivery = read_delivery(path, NONCE, JOB, TIER, exited_cleanly)
    runs = delivery.runs(process_error)
    assert [
        (r.scenario, r.label) for r in runs
    ] == PLAN  # exactly one run per planned run, in plan order
    return {r.label: r for r in runs}


def measured(runs: dict[str, ProbeRun]) -> set[str]:
    return {label for label, run in runs.items() if run.measured}


def test_a_healthy_delivery_gives_every_run_measured(tmp_path: Path) -> None:
    runs = deliver(tmp_path, genuine())
    assert measured(runs) == set(LINE)
    run = runs["order:a,b"]
    assert (run.tier, run.role, run.order, run.duration_s) == (TIER, "batch", ["a", "b"], 0.25)
    assert run.totals == make_totals() and run.steps == [make_step()]


def test_a_non_integer_counter_fails_only_its_run(tmp_path: Path) -> None:
    records = genuine()
    records[LINE["alone:a"]]["totals"]["num_accepted_tokens"] = 3.5
    runs = deliver(tmp_path, records)
    assert measured(runs) == set(LINE) - {"alone:a"}
    error = runs["alone:a"].error or ""
    assert runs["alone:a"].status == "error"
    assert "totals.num_accepted_tokens" in error and "3.5" in error


def test_a_non_integer_step_counter_fails_only_its_run(tmp_path: Path) -> None:
    records = genuine()
    records[LINE["alone:b"]]["steps"][0]["stats"]["num_drafts"] = "1"
    runs = deliver(tmp_path, records)
    assert measured(runs) == set(LINE) - {"alone:b"}
    assert "steps.0.stats.num_drafts" in (runs["alone:b"].error or "")


def test_an_unknown_key_fails_only_its_run(tmp_path: Path) -> None:
    records = genuine()
    records[LINE["order:a,b"]]["surprise"] = 1
    runs = deliver(tmp_path, records)
    assert measured(runs) == set(LINE) - {"order:a,b"}
    assert "surprise" in (runs["order:a,b"].error or "")


def test_a_record_without_the_nonce_makes_every_run_untrusted(tmp_path: Path) -> None:
    records = genuine()
    forged = {k: v for k, v in records[LINE["alone:a"]].items() if k != "nonce"}
    records.insert(2, forged)
    records[-1]["runs"] += 1
    runs = deliver(tmp_path, records)
    assert measured(runs) == set()
    for run in runs.values():
        assert "cannot be trusted" in (run.error or "") and "nonce" in (run.error or "")


def test_a_record_with_another_nonce_is_forged_too(tmp_path: Path) -> None:
    records = genuine()
    records[LINE["order:c"]]["nonce"] = "guessed"
    assert measured(deliver(tmp_path, records)) == set()


def test_a_duplicated_run_record_fails_that_run(tmp_path: Path) -> None:
    records = genuine()
    records.insert(LINE["alone:b"] + 1, dict(records[LINE["alone:b"]]))
    records[-1]["runs"] += 1  # the count is right: only the duplicate is wrong
    runs = deliver(tmp_path, records)
    assert measured(runs) == set(LINE) - {"alone:b"}
    assert "duplicate" in (runs["alone:b"].error or "")


def test_a_missing_trailer_after_exit_0_fails_the_unreported_runs(tmp_path: Path) -> None:
    records = genuine()[: LINE["alone:a"] + 1]  # header, order:a,b, alone:a; then the probe stopped
    runs = deliver(tmp_path, records, exited_cleanly=True)
    assert measured(runs) == {"order:a,b", "alone:a"}
    for label in ("alone:b", "order:c"):
        assert "without its trailer" in (runs[label].error or "")


def test_a_probe_that_failed_gives_its_error_to_the_unreported_runs(tmp_path: Path) -> None:
    records = genuine()[: LINE["alone:a"] + 1]
    runs = deliver(
        tmp_path, records, exited_cleanly=False, process_error="probe killed after 600 s"
    )
    assert measured(runs) == {"order:a,b", "alone:a"}
    assert runs["order:c"].error == "probe killed after 600 s"
    assert (
        deliver(tmp_path, records, exited_cleanly=False)["order:c"].error
        == "the probe did not report this run"
    )


def test_no_file_at_all_reports_nothing(tmp_path: Path) -> None:
    delivery = read_delivery(tmp_path / "missing.jsonl", NONCE, JOB, TIER, exited_cleanly=False)
    runs = delivery.runs("ImportError: vllm")
    assert [r.error for r in runs] == ["ImportError: vllm"] * len(PLAN)
    assert all(r.status == "error" and r.role for r in runs)


def test_a_torn_last_line_is_ignored(tmp_path: Path) -> None:
    records = genuine()[: LINE["alone:a"] + 1]
    torn = json.dumps(genuine()[LINE["alone:b"]])[:40]
    runs = deliver(tmp_path, records, exited_cleanly=False, process_error="killed", tail=torn)
    assert measured(runs) == {"order:a,b", "alone:a"}
    assert runs["alone:b"].error == "killed"


def test_a_broken_line_before_the_end_is_not_torn(tmp_path: Path) -> None:
    records: list[Any] = genuine()
    records.insert(2, '{"kind": "run", "scen')
    runs = deliver(tmp_path, records)
    assert measured(runs) == set()
    assert "line 3 is not JSON" in (runs["order:c"].error or "")


def test_a_trailer_that_miscounts_makes_every_run_untrusted(tmp_path: Path) -> None:
    records = genuine()
    del records[LINE["order:c"]]  # the trailer still counts 4 runs
    runs = deliver(tmp_path, records)
    assert measured(runs) == set()
    assert "trailer counts 4 run record(s), the file holds 3" in (runs["order:a,b"].error or "")


def test_a_record_after_the_trailer_makes_every_run_untrusted(tmp_path: Path) -> None:
    records = genuine()
    records.append(records[LINE["order:c"]])
    assert "after the trailer" in (deliver(tmp_path, records)["alone:a"].error or "")


def test_a_record_for_an_unplanned_run_makes_every_run_untrusted(tmp_path: Path) -> None:
    records = genuine()
    records[LINE["order:c"]]["label"] = "order:z"
    runs = deliver(tmp_path, records)
    assert measured(runs) == set()
    assert "not planned" in (runs["order:a,b"].error or "") and "order:z" in (
        runs["order:a,b"].error or ""
    )


@pytest.mark.parametrize(
    "kind, value", [("run", None), ("kind", "gossip")], ids=["run-before-header", "unknown-kind"]
)
def test_records_out_of_protocol_make_every_run_untrusted(
    tmp_path: Path, kind: str, value: Any
) -> None:
    records = genuine()
    if kind == "run":
        records.insert(0, records.pop(LINE["order:a,b"]))
    else:
        records.insert(1, {"kind": value, "nonce": NONCE})
    assert measured(deliver(tmp_path, records)) == set()


def test_an_invalid_header_makes_every_run_untrusted(tmp_path: Path) -> None:
    records = genuine()
    records[0]["protocol"] = "two"
    assert "invalid header" in (deliver(tmp_path, records)["order:c"].error or "")


@pytest.mark.parametrize(
    "change, words",
    [
        ({"role": "alone"}, ["role alone", "plan says batch"]),
        ({"order": ["b", "a"]}, ["['b', 'a']", "['a', 'b']"]),
    ],
    ids=["role", "order"],
)
def test_a_record_that_contradicts_the_plan_fails_that_run(
    tmp_path: Path, change: dict[str, Any], words: list[str]
) -> None:
    records = genuine()
    records[LINE["order:a,b"]].update(change)
    runs = deliver(tmp_path, records)
    assert measured(runs) == set(LINE) - {"order:a,b"}
    for word in words:
        assert word in (runs["order:a,b"].error or "")


def test_the_probe_failure_is_kept_on_an_error_run(tmp_path: Path) -> None:
    records = genuine()

    def lose_request() -> RunResult:
        raise KeyError("req-1")

    failed = CallInfo.from_call(lose_request, None)
    stream = io.StringIO()
    RecordWriter(stream, NONCE).run(JOB["scenarios"][1], OTHER, failed)
    records[LINE["order:c"]] = json.loads(stream.getvalue())
    run = deliver(tmp_path, records)["order:c"]
    assert (run.status, run.measured, run.error) == ("error", False, None)
    assert run.failure is not None and run.failure.summary == "KeyError: 'req-1'"
