"""The evidence file: round trip, stable text, version upgrades, and clear errors on bad files.

Built from hand-made `Result`s and `ProbeRun`s (`tests.factories`): the file
format is what is under test, not how the values were measured. Older files
are made from current data by undoing each documented change, so every upgrade
is checked against exactly what it claims to reverse.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from difftest.core.errors import DifftestError
from difftest.core.evidence import (
    SCHEMA_VERSION,
    UPGRADES,
    Evidence,
    ReusedProbe,
    evidence_json,
    read_evidence,
    write_evidence,
)
from difftest.core.records import Difference, Failure
from tests.factories import (
    TEST_SOURCE,
    make_evidence,
    make_probe_files,
    make_result,
    make_run,
    make_stack_branch,
    make_test_record,
    make_test_source,
    make_totals,
    make_transplanted_branch,
    make_violation,
)


def rich_evidence(with_runs: bool = True, with_tests: bool = True) -> Evidence:
    """One diverging result, every role of run and test records,
    so every field of the schema is written."""
    result = make_result(
        "diverge",
        reading="lenient",
        measured=make_totals(num_emitted_tokens=13, mean_acceptance_length=3.25),
        differences=[Difference(counter="num_emitted_tokens", measured=13, expected=11)],
    )
    runs = [
        make_run("order:a,b"),
        make_run("alone:a", duration_s=0.5, notes={"prometheus": {"num_drafts": 4}}),
        make_run("reference:a", totals=None, status="error", error="ValueError: x"),
    ]
    broken = make_result(
        "broken", label="order:b,a", violations=[make_violation(label="order:b,a", requests=["a"])]
    )
    tests = [
        make_test_record(),
        make_test_record(
            code="pr-56195-style", outcome="failed", message="assert 3 == 6", judgement="regression"
        ),
    ]
    return make_evidence(
        reading="lenient",
        results=[result, broken],
        runs={"main": runs} if with_runs else None,
        probes=[make_probe_files()] if with_runs else [],
        tests=tests if with_tests else [],
        test_sources={TEST_SOURCE: make_test_source()} if with_tests else {},
    )


def write_raw(tmp_path: Path, raw: Any) -> Path:
    path = tmp_path / "evidence.json"
    path.write_text(json.dumps(raw))
    return path


def as_version_11(evidence: Evidence) -> dict[str, Any]:
    """The same data as a version-11 file: scenarios without their conditions, violations without
    a cause (the rich evidence has neither: the plain case, no crash)."""
    raw = json.loads(evidence_json(evidence))
    for scenario in raw["scenarios"].values():
        assert scenario.pop("conditions") == []
    for result in raw["results"]:
        for violation in result["violations"]:
            assert violation.pop("cause") == ""
    raw["schema_version"] = "11"
    return raw


def as_version_9(evidence: Evidence) -> dict[str, Any]:
    """The same data as a version-9 file: no Ray executor (probes do not name a node)."""
    raw = as_version_11(evidence)
    for probe in raw["probes"]:
        assert probe.pop("node") is None
    assert raw.pop("blame") is None, "version 9 had no blame"
    raw["schema_version"] = "9"
    return raw


def as_version_7(evidence: Evidence) -> dict[str, Any]:
    """The same data as a version-7 file: no fork server (probes do not say how they started)."""
    raw = as_version_9(evidence)
    for probe in raw["probes"]:
        assert (
            probe.pop("launch") == (None if probe["reused"] else "fresh")
            and probe.pop("launch_note") == ""
        )
    raw["schema_version"] = "7"
    return raw


def as_version_6(evidence: Evidence) -> dict[str, Any]:
    """The same data as a version-6 file: no result cache
    (probes do not say whether they were reused)."""
    raw = as_version_7(evidence)
    for probe in raw["probes"]:
        assert probe.pop("reused") is None, "version 6 had no result cache"
    raw["schema_version"] = "6"
    return raw


def as_version_5(evidence: Evidence) -> dict[str, Any]:
    """The same data as a version-5 file: no tests tier (no test records, no test sources)."""
    raw = as_version_6(evidence)
    assert not raw.pop("tests") and not raw.pop("test_sources"), "version 5 had no tests tier"
    raw["schema_version"] = "5"
    return raw


def as_version_3(evidence: Evidence) -> dict[str, Any]:
    """The same data as a version-3 file: no `baseline`,
    branches without `transplants` and `stack`."""
    raw = as_version_5(evidence)
    raw["schema_version"] = "3"
    assert raw.pop("baseline") is None  # new in version 4, default None
    for branch in raw["branches"].values():
        assert branch.pop("transplants") == [] and branch.pop("stack") == []  # new in version 5
    return raw


def as_version_2(evidence: Evidence) -> dict[str, Any]:
    """The same data as a version-2 file: no `probes`, violations without `requests`."""
    raw = as_version_3(evidence)
    raw["schema_version"] = "2"
    assert not raw.pop("probes")  # new in version 3; version-2 files recorded none
    for result in raw["results"]:
        for violation in result["violations"]:
            assert not violation.pop("requests")  # new in version 3, default []
    return raw


def _without_version_3(evidence: Evidence) -> Evidence:
    """What a version-2 file could hold of `evidence`."""
    results = [
        r.model_copy(
            update={"violations": [v.model_copy(update={"requests": []}) for v in r.violations]}
        )
        for r in evidence.results
    ]
    return evidence.model_copy(update={"probes": [], "results": results})


def as_version_1(evidence: Evidence) -> dict[str, Any]:
    """The same data as a version-1 file: results keyed by `order` with `explanation`;
    runs without `role`."""
    raw = as_version_2(evidence)
    raw["schema_version"] = "1"
    for result in raw["results"]:
        result["order"] = result.pop("label")
        result["explanation"] = result.pop("statement")
        result.pop("duration_s")  # new in version 2, default 0
    for scenario in raw["scenarios"].values():
        scenario.pop("skipped")  # new in version 2, default None
    for runs in (raw["runs"] or {}).values():
        for run in runs:
            run.pop("role")
            assert run.pop("failure") is None  # new in version 2; version-1 runs had none
    return raw


def test_round_trip_is_lossless(tmp_path: Path) -> None:
    evidence = rich_evidence()
    failure = Failure(
        kind="exception",
        type="ValueError",
        summary="ValueError: x",
        where="f.py:1 in g",
        origin="vllm",
    )
    evidence.runs["main"][2] = evidence.runs["main"][2].model_copy(update={"failure": failure})  # type: ignore[index]
    path = write_evidence(evidence, tmp_path / "sub" / "evidence.json")
    assert read_evidence(path) == evidence


def test_file_is_sorted_indented_and_has_the_record_fields(tmp_path: Path) -> None:
    path = write_evidence(rich_evidence(with_runs=False), tmp_path / "evidence.json")
    text = path.read_text()
    raw = json.loads(text)
    assert text == json.dumps(raw, sort_keys=True, indent=2, ensure_ascii=False) + "\n"
    assert raw["schema_version"] == SCHEMA_VERSION == "13" and raw["reading"] == "lenient"
    record = raw["results"][0]
    for key in (
        "branch",
        "scenario",
        "tier",
        "label",
        "verdict",
        "measured",
        "expected",
        "differences",
        "statement",
        "duration_s",
    ):
        assert key in record
    assert "order" not in record and "explanation" not in record
    assert raw["difftest_version"] and raw["created_at"]
    assert raw["runs"] is None
    test = raw["tests"][1]
    assert {k: test[k] for k in ("source", "code", "test", "outcome", "message", "judgement")} == {
        "source": TEST_SOURCE,
        "code": "pr-56195-style",
        "test": "tests/v1/core/test_scheduler.py::test_stats_survive",
        "outcome": "failed",
        "message": "assert 3 == 6",
        "judgement": "regression",
    }
    assert raw["test_sources"][TEST_SOURCE]["origin"] == "pr-56137-style"


def test_runs_carry_their_role(tmp_path: Path) -> None:
    raw = json.loads(evidence_json(rich_evidence()))
    assert [run["role"] for run in raw["runs"]["main"]] == ["batch", "alone", "reference"]


def test_writing_is_atomic_and_leaves_no_temp_files(tmp_path: Path) -> None:
    path = tmp_path / "evidence.json"
    path.write_text("old")
    write_evidence(rich_evidence(), path)
    assert [p.name for p in tmp_path.iterdir()] == ["evidence.json"]
    assert path.stat().st_mode & 0o777 == 0o644
    assert evidence_json(rich_evidence()).count("\n") > 10


def test_version_5_file_reads_as_the_same_data_without_tests(tmp_path: Path) -> None:
    evidence = rich_evidence(with_tests=False)
    raw = as_version_5(evidence)
    assert "tests" not in raw and raw["schema_version"] == "5"
    assert read_evidence(write_raw(tmp_path, raw)) == evidence


def test_version_6_file_reads_as_measured_probes(tmp_path: Path) -> None:
    evidence = rich_evidence()
    raw = as_version_6(evidence)
    assert raw["probes"] and "reused" not in raw["probes"][0]
    upgraded = read_evidence(write_raw(tmp_path, raw))
    assert upgraded == evidence and upgraded.probes[0].reused is None


def test_version_9_file_reads_as_probes_of_this_machine(tmp_path: Path) -> None:
    evidence = rich_evidence()
    assert read_evidence(write_raw(tmp_path, as_version_9(evidence))) == evidence


def test_version_7_file_reads_as_probes_started_fresh(tmp_path: Path) -> None:
    reused = ReusedProbe(key="a" * 64, measured_at="2026-11-30T09:00:00+00:00", duration_s=14.2)
    evidence = make_evidence(
        probes=[make_probe_files(), make_probe_files(branch="other", reused=reused, launch=None)]
    )
    raw = as_version_7(evidence)
    assert "launch" not in raw["probes"][0]
    upgraded = read_evidence(write_raw(tmp_path, raw))
    assert upgraded == evidence
    assert [p.launch for p in upgraded.probes] == ["fresh", None]


def test_a_forked_probe_and_a_fallback_round_trip(tmp_path: Path) -> None:
    probes = [
        make_probe_files(launch="forked"),
        make_probe_files(
            branch="other", launch="fresh", launch_note="3 threads run after the shared imports"
        ),
    ]
    evidence = make_evidence(probes=probes)
    assert read_evidence(write_evidence(evidence, tmp_path / "evidence.json")).probes == probes


def test_a_reused_probe_round_trips(tmp_path: Path) -> None:
    reused = ReusedProbe(key="a" * 64, measured_at="2026-11-30T09:00:00+00:00", duration_s=14.2)
    evidence = make_evidence(probes=[make_probe_files(reused=reused, launch=None)])
    assert (
        read_evidence(write_evidence(evidence, tmp_path / "evidence.json")).probes[0].reused
        == reused
    )


def test_version_3_file_reads_as_the_same_current_data(tmp_path: Path) -> None:
    evidence = rich_evidence(with_tests=False)
    assert read_evidence(write_raw(tmp_path, as_version_3(evidence))) == evidence


def test_transplants_and_stacks_round_trip(tmp_path: Path) -> None:
    evidence = make_evidence(
        branches={"pr": make_transplanted_branch(), "both": make_stack_branch()}
    )
    raw = json.loads(evidence_json(evidence))
    moved = raw["branches"]["pr"]["transplants"][0]
    assert {"original_sha", "merge_base", "replayed", "onto_sha"} <= set(moved)
    assert raw["branches"]["both"]["stack"] == ["pr", "fix"]
    assert read_evidence(write_evidence(evidence, tmp_path / "e.json")) == evidence


def test_version_1_file_reads_as_the_same_data(tmp_path: Path) -> None:
    evidence = _without_version_3(rich_evidence(with_tests=False))
    raw = as_version_1(evidence)
    assert "role" not in raw["runs"]["main"][0] and "order" in raw["results"][0]
    assert read_evidence(write_raw(tmp_path, raw)) == evidence


def test_version_3_file_reads_as_the_same_data_without_a_baseline(tmp_path: Path) -> None:
    evidence = rich_evidence(with_tests=False)
    upgraded = read_evidence(write_raw(tmp_path, as_version_3(evidence)))
    assert upgraded == evidence and upgraded.baseline is None


def test_version_2_file_reads_as_the_same_data_without_probe_files(tmp_path: Path) -> None:
    evidence = _without_version_3(rich_evidence(with_tests=False))
    upgraded = read_evidence(write_raw(tmp_path, as_version_2(evidence)))
    assert upgraded == evidence and upgraded.probes == []


def test_version_1_engine_run_kept_its_role_in_notes(tmp_path: Path) -> None:
    evidence = _without_version_3(rich_evidence(with_tests=False))
    raw = as_version_1(evidence)
    # A version-1 engine reference run: label without the prefix, role in `notes`.
    raw["runs"]["main"][2]["notes"] = {"role": "reference"}
    raw["runs"]["main"][2]["label"] = "ref-a"
    upgraded = read_evidence(write_raw(tmp_path, raw)).runs["main"][2]  # type: ignore[index]
    assert (upgraded.role, upgraded.label, upgraded.notes) == ("reference", "ref-a", {})


def test_version_1_without_runs_upgrades(tmp_path: Path) -> None:
    evidence = _without_version_3(rich_evidence(with_runs=False, with_tests=False))
    assert read_evidence(write_raw(tmp_path, as_version_1(evidence))) == evidence


def test_version_9_upgrades_to_no_blame(tmp_path: Path) -> None:
    evidence = rich_evidence()
    upgraded = read_evidence(write_raw(tmp_path, as_version_9(evidence)))
    assert upgraded == evidence and upgraded.blame is None


def test_version_11_upgrades_to_the_plain_case_and_a_conditions_list_round_trips(
    tmp_path: Path,
) -> None:
    evidence = rich_evidence()
    assert read_evidence(write_raw(tmp_path, as_version_11(evidence))) == evidence
    (name,) = evidence.scenarios
    scenario = evidence.scenarios[name].model_copy(
        update={"conditions": ["prefix caching", "two steps in flight"]}
    )
    served = evidence.model_copy(update={"scenarios": {name: scenario}})
    path = tmp_path / "served.json"
    write_evidence(served, path)
    assert read_evidence(path).scenarios[name].conditions == [
        "prefix caching",
        "two steps in flight",
    ]


def test_version_12_upgrades_to_no_coverage_and_coverage_round_trips(tmp_path: Path) -> None:
    """Nothing was traced before schema 13: no changed line is known to have run."""
    from difftest.core.evidence import BranchCoverage, ChangedFileCoverage, CoverageEvidence

    evidence = rich_evidence()
    raw = json.loads(evidence_json(evidence))
    assert raw.pop("coverage") is None
    raw["schema_version"] = "12"
    upgraded = read_evidence(write_raw(tmp_path, raw))
    assert upgraded == evidence and upgraded.coverage is None
    entry = ChangedFileCoverage(
        branch="pr",
        file="vllm/v1/core/sched/scheduler.py",
        status="traced",
        lines=[1188, 1201],
        reached=[1201],
        unreached=[1188],
        arcs_missing=[(1201, 1204)],
    )
    traced = evidence.model_copy(
        update={
            "coverage": CoverageEvidence(
                traced=["vllm/v1/core/sched/scheduler.py"],
                changed=[entry],
                branches=[BranchCoverage(branch="pr", status="not verified", summary="s")],
            )
        }
    )
    path = tmp_path / "traced.json"
    write_evidence(traced, path)
    assert read_evidence(path) == traced


def test_every_older_version_has_an_upgrade_step() -> None:
    assert set(UPGRADES) == {str(v) for v in range(1, int(SCHEMA_VERSION))}


def test_unknown_version_names_the_readable_versions(tmp_path: Path) -> None:
    raw = {**json.loads(evidence_json(rich_evidence())), "schema_version": "99"}
    with pytest.raises(DifftestError) as info:
        read_evidence(write_raw(tmp_path, raw))
    assert "schema version '99'" in info.value.problem
    assert "'1', '2', '3', '4', '5', '6', '7'" in info.value.problem
    assert info.value.hint


@pytest.mark.parametrize(
    "content, needle",
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "not an evidence file"),
        ('{"schema_version": "14"}', "schema version '14'"),
        ("{}", "schema version None"),
        ('{"schema_version": "2"}', "invalid evidence file"),
        ('{"schema_version": "3"}', "invalid evidence file"),
        ('{"schema_version": "5"}', "invalid evidence file"),
        ('{"schema_version": "6"}', "invalid evidence file"),
        ('{"schema_version": "8"}', "invalid evidence file"),
        ('{"schema_version": "9"}', "invalid evidence file"),
        ('{"schema_version": "10"}', "invalid evidence file"),
        ('{"schema_version": "11"}', "invalid evidence file"),
        ('{"schema_version": "12"}', "invalid evidence file"),
        ('{"schema_version": "13"}', "invalid evidence file"),
        ('{"schema_version": "1", "reading": "sideways"}', "invalid evidence file"),
    ],
)
def test_bad_files_raise_difftest_error_with_a_fix(
    tmp_path: Path, content: str, needle: str
) -> None:
    path = tmp_path / "evidence.json"
    path.write_text(content)
    with pytest.raises(DifftestError) as info:
        read_evidence(path)
    assert needle in info.value.problem
    assert info.value.hint
    assert "fix:" in str(info.value)


def test_missing_file_raises_difftest_error(tmp_path: Path) -> None:
    with pytest.raises(DifftestError, match="does not exist"):
        read_evidence(tmp_path / "nope.json")


def test_invalid_field_is_named(tmp_path: Path) -> None:
    raw = json.loads(evidence_json(rich_evidence()))
    raw["results"][0]["verdict"] = "maybe"
    with pytest.raises(DifftestError, match=r"results\.0\.verdict"):
        read_evidence(write_raw(tmp_path, raw))


def test_a_non_integer_counter_in_a_run_is_refused(tmp_path: Path) -> None:
    raw = json.loads(evidence_json(rich_evidence()))
    raw["runs"]["main"][0]["totals"]["num_drafts"] = 4.5
    with pytest.raises(DifftestError, match=r"runs\.main\.0\.totals\.num_drafts"):
        read_evidence(write_raw(tmp_path, raw))


def test_a_lone_surrogate_from_a_branch_is_written_and_reads_back(tmp_path: Path) -> None:
    """No UTF-8 file can hold one: it is written as its JSON escape, so writing never fails."""
    evidence = make_evidence(results=[make_result("error", error="bad \udcff byte")])
    path = write_evidence(evidence, tmp_path / "evidence.json")
    assert "\\udcff" in path.read_text(encoding="utf-8")
    assert read_evidence(path) == evidence
