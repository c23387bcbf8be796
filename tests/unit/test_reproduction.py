"""What `verify` compares: every field a verdict rests on,
except what an older file could not hold."""

from __future__ import annotations

import json
from pathlib import Path

from difftest.core.evidence import (
    BranchCoverage,
    ChangedFileCoverage,
    CoverageEvidence,
    Evidence,
    evidence_json,
    read_evidence,
    written_version,
)
from difftest.core.reproduction import evidence_differences
from tests.factories import LABEL, make_evidence, make_result, make_violation


def _broken(requests: list[str]):
    return make_evidence(
        results=[make_result("broken", violations=[make_violation(requests=requests)])]
    )


def _written_as(tmp_path: Path, version: str, requests: list[str]):
    """The broken evidence as a file of `version` (2: violations had no `requests`)."""
    raw = json.loads(evidence_json(_broken(requests)))
    if version == "2":
        raw["schema_version"] = "2"
        raw.pop("baseline", None)
        raw.pop("probes", None)
        for violation in raw["results"][0]["violations"]:
            violation.pop("requests")
    path = tmp_path / "evidence.json"
    path.write_text(json.dumps(raw))
    return path


def test_a_violation_naming_other_requests_is_a_difference() -> None:
    assert any(
        "violations differ" in line for line in evidence_differences(_broken(["a"]), _broken(["b"]))
    )


def test_a_file_without_violation_requests_is_not_held_against_a_rerun_that_names_them(
    tmp_path: Path,
) -> None:
    path = _written_as(tmp_path, "2", [])
    assert written_version(path) == "2"
    assert evidence_differences(read_evidence(path), _broken(["a"]), written_version(path)) == []


def test_a_current_file_with_edited_violation_requests_differs(tmp_path: Path) -> None:
    path = _written_as(tmp_path, "4", ["edited"])
    assert evidence_differences(read_evidence(path), _broken(["a"]), written_version(path))


def test_a_rerun_differing_only_in_one_verdict_is_reported() -> None:
    """Same totals, violations and runs; only the verdict was edited
    (by hand, or by another judge)."""
    recorded = make_evidence(results=[make_result("pass"), make_result("pass", label="order:b")])
    rerun = make_evidence(results=[make_result("pass"), make_result("diverge", label="order:b")])
    assert evidence_differences(recorded, rerun) == [
        "main/eos/order:b: verdicts differ: pass -> diverge"
    ]


def test_a_result_the_rerun_lacks_and_one_the_evidence_lacks_are_reported() -> None:
    both = [make_result("pass"), make_result("pass", label="order:b")]
    assert evidence_differences(make_evidence(results=both), make_evidence(results=both[:1])) == [
        "main/eos/order:b: not re-run"
    ]
    assert evidence_differences(make_evidence(results=both[:1]), make_evidence(results=both)) == [
        "main/eos/order:b: not in the evidence"
    ]


def test_durations_in_a_violations_detail_are_not_held_against_a_rerun() -> None:
    """ "main completes this run in 0.49 s" re-runs as "in 0.52 s": the same judgement
    (review F5)."""
    from difftest.core.records import Violation
    from difftest.core.reproduction import _result_differences

    def broken(detail: str):
        return make_result(
            "broken",
            violations=[
                Violation(invariant="completes-as-on-baseline", label=LABEL, detail=detail)
            ],
        )

    then = broken("did not finish: RunTimeout (main completes this run in 0.49 s)")
    assert (
        _result_differences(
            [then], [broken("did not finish: RunTimeout (main completes this run in 0.52 s)")]
        )
        == []
    )
    assert _result_differences(
        [then], [broken("crashed in vLLM: ValueError (main completes this run in 0.49 s)")]
    )


def _covered(reached: list[int], status: str = "verified") -> Evidence:
    return make_evidence(results=[make_result("pass")]).model_copy(
        update={
            "coverage": CoverageEvidence(
                traced=["vllm/a.py"],
                changed=[
                    ChangedFileCoverage(
                        branch="fix",
                        file="vllm/a.py",
                        status="traced",
                        lines=[3, 4],
                        reached=reached,
                        unreached=[n for n in (3, 4) if n not in reached],
                    )
                ],
                branches=[BranchCoverage(branch="fix", status=status, summary="")],
            )
        }
    )


def test_a_rerun_that_reaches_other_changed_lines_differs() -> None:
    """#48: verify re-checks coverage as it re-checks results; a file older than schema 13 holds
    none, and nothing is held against its re-run."""
    assert evidence_differences(_covered([3, 4]), _covered([3, 4])) == []
    found = evidence_differences(_covered([3, 4]), _covered([3], "not verified"))
    assert found == [
        "coverage/fix/vllm/a.py: reached [3, 4] -> [3]",
        "coverage/fix/vllm/a.py: unreached [] -> [4]",
        "coverage/fix: verified -> not verified",
    ]
    untraced = _covered([3, 4]).model_copy(update={"coverage": None})
    assert evidence_differences(_covered([3, 4]), untraced) == [
        "coverage: recorded, but the re-run traced nothing"
    ]
    assert evidence_differences(_covered([3, 4]), untraced, written_as="12") == []
