"""`core.shards` on hand-built shard evidence: what every shard must agree on, and that the join
takes the re-judged results, never the shards' own (the records themselves are in
tests/e2e/test_shards.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from difftest import __version__
from difftest.core.errors import DifftestError
from difftest.core.evidence import (
    BaseEvidence,
    BranchEvidence,
    Evidence,
    ScenarioEvidence,
    ShardEvidence,
)
from difftest.core.records import ProbeRun, StepRecord
from difftest.core.shards import Shard, check_shards, merge_shards
from tests.factories import (
    BRANCH,
    make_evidence,
    make_probe_files,
    make_result,
    make_run,
    make_test_record,
)

ORDER = ["a", "b", "c"]
SCHEMA = "13"


def shard(index: int, count: int = 2, schema: str = SCHEMA, **overrides: Any) -> Shard:
    """Shard `index` of `count` of one comparison of ORDER: exactly its slice's scenarios."""
    mine = ORDER[index - 1 :: count]
    fields: dict[str, Any] = {
        "baseline": BRANCH,
        "branches": {**make_evidence().branches, "fix": BranchEvidence(ref="fix")},
        "scenarios": {
            name: ScenarioEvidence(file=f"s/{name}.yaml", sha256="0" * 64, seed=0, tier="scheduler")
            for name in mine
        },
        "results": [make_result(scenario=name) for name in mine],
        "runs": {BRANCH: [make_run(scenario=name) for name in mine]},
        "probes": [make_probe_files()],
        "shard": ShardEvidence(index=index, count=count, order=ORDER),
    }
    return Shard(f"s{index}/evidence.json", make_evidence(**{**fields, **overrides}), schema)


def refusal(parts: list[Shard]) -> str:
    with pytest.raises(DifftestError) as caught:
        check_shards(parts)
    return str(caught.value)


def test_the_shards_of_one_comparison_pass() -> None:
    check_shards([shard(2), shard(1)])


#: One field of the second shard changed -> the `_SAME` entry that must name it.
DIFFERENT: dict[str, Callable[[Evidence], dict[str, Any]]] = {
    "base wheel": lambda e: {
        "base": BaseEvidence(requirement="vllm==0.10.0", fingerprint={"wheel_hash": "other"})
    },
    "branches (refs, commits, patches, environments)": lambda e: {
        "branches": {BRANCH: e.branches[BRANCH].model_copy(update={"sha": "c" * 40})}
    },
    "oracle reading": lambda e: {"reading": "lenient" if e.reading == "strict" else "strict"},
    "baseline": lambda e: {"baseline": "fix"},
    "reference branches": lambda e: {"reference_branches": [BRANCH]},
    # A VLLM_* switch set for one shard only (review F7): its branches measured other code paths.
    "probe environment (the variables that reach the probes)": lambda e: {
        "probe_environ_sha256": "e" * 64
    },
    "difftest version": lambda e: {"difftest_version": "0.0.1"},
}


@pytest.mark.parametrize("what", [*DIFFERENT, "evidence schema version"])
def test_shards_that_differ_in_what_a_whole_run_shares_are_refused(what: str) -> None:
    """Each `_SAME` check is needed: without it, this very difference would merge."""
    first, second = shard(1), shard(2)
    if what == "evidence schema version":
        second = Shard(second.name, second.evidence, "8")
    else:
        second = Shard(
            second.name, second.evidence.model_copy(update=DIFFERENT[what](second.evidence)), SCHEMA
        )
    message = refusal([first, second])
    assert f"s2/evidence.json and s1/evidence.json differ in their {what}" in message
    assert "fix: merge the shards of one `difftest run --shard I/N` matrix" in message


def test_the_branches_check_reads_every_branch_field_but_its_environment_by_hash() -> None:
    """A patch, a stack member, another environment: each is another comparison; the environment's
    fingerprint is compared by its hash alone (paths in it differ between machines)."""
    branches = shard(2).evidence.branches
    base = branches[BRANCH]
    for changed in (
        {"patches": {"fix.patch": "e" * 64}},
        {"stack": ["x"]},
        {"fingerprint": {"fingerprint_hash": "other"}},
    ):
        second = shard(2, branches={**branches, BRANCH: base.model_copy(update=changed)})
        assert "differ in their branches" in refusal([shard(1), second]), changed
    elsewhere = base.model_copy(update={"fingerprint": {"python": "/elsewhere/bin/python"}})
    same_env = shard(2, branches={**branches, BRANCH: elsewhere})
    check_shards([shard(1), same_env])


def test_shards_of_another_difftest_are_refused_naming_the_version_to_merge_with() -> None:
    old = [
        Shard(s.name, s.evidence.model_copy(update={"difftest_version": "0.0.1"}), s.schema)
        for s in (shard(1), shard(2))
    ]
    message = refusal(old)
    assert f"written by difftest 0.0.1; this is difftest {__version__}" in message
    assert "fix: merge with difftest 0.0.1, or run the shards again with this one" in message


def test_a_shard_holding_other_scenarios_than_its_slice_is_refused() -> None:
    """A scenario dropped from a shard (its failing verdicts with it)
    would leave the merge without it."""
    dropped = shard(1, scenarios={"a": shard(1).evidence.scenarios["a"]})  # its slice is a and c
    assert "holds the scenarios a, but shard 1/2 of its selection is a, c" in refusal(
        [dropped, shard(2)]
    )
    moved = shard(
        2, scenarios={**shard(2).evidence.scenarios, "c": shard(1).evidence.scenarios["c"]}
    )
    assert "holds the scenarios b, c, but shard 2/2 of its selection is b" in refusal(
        [shard(1), moved]
    )


def test_a_shard_holding_test_records_is_refused() -> None:
    """The tests tier keeps its outcomes in the evidence only: nothing to judge them again from."""
    message = refusal([shard(1, tests=[make_test_record()]), shard(2)])
    assert (
        "s1/evidence.json holds results of the tests tier" in message and "--tier tests" in message
    )


def test_missing_repeated_and_whole_run_evidence_are_refused() -> None:
    assert "the shards given are 1 of 2" in refusal([shard(1)])
    assert "the shards given are 1, 1 of 2" in refusal([shard(1), shard(1)])
    assert "differ in their shard count" in refusal([shard(1), shard(1, count=3)])
    whole = Shard("whole/evidence.json", make_evidence(), SCHEMA)
    assert "whole/evidence.json is not a shard's evidence" in refusal([shard(1), whole])
    assert "nothing to merge" in refusal([])


def test_the_join_holds_the_results_given_never_the_shards_own() -> None:
    """The shards say every run passed; the re-judged results say `a` diverges: the join says so."""
    judged = {
        1: [make_result("diverge", scenario="c"), make_result("diverge", scenario="a")],
        2: [make_result(scenario="b")],
    }
    step = StepRecord(step=0, scheduled=["a"])
    runs: dict[int, dict[str, list[ProbeRun]]] = {
        1: {BRANCH: [make_run(scenario="c", steps=[step]), make_run(scenario="a", steps=[step])]},
        2: {BRANCH: [make_run(scenario="b", steps=[step])]},
    }
    merged = merge_shards(
        [shard(2), shard(1)],
        lambda i, f: f.model_copy(update={"job": f"shard-{i}/{f.job}"}),
        judged,
        runs,
    )
    assert [(r.scenario, r.verdict) for r in merged.results] == [
        ("a", "diverge"),
        ("b", "pass"),
        ("c", "diverge"),
    ]
    assert [r.scenario for r in merged.runs[BRANCH]] == ORDER and all(
        not r.steps for r in merged.runs[BRANCH]
    )
    assert list(merged.scenarios) == ORDER and merged.shard is None
    assert [p.job for p in merged.probes] == [f"shard-{i}/{make_probe_files().job}" for i in (1, 2)]
