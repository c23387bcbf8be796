"""`run --shard I/N` and `merge`: two shards merged give the results and verdicts of one run (slow: real vLLM)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.cli_helpers import CONTROL, run_cli
from tests.factories import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("shards")]

SHIPPED = ROOT / "branches.yaml"
#: Two scheduler scenarios: the control, and one where pr-56195-style breaks (so traces are written).
SELECT = f"{CONTROL} or mixed-batch-invalid-async"
BRANCHES = ("main", "pr-56195-style")


def _run(out: Path, *extra: str) -> int:
    return run_cli("run", "-c", SHIPPED, "--tier", "scheduler", "-k", SELECT, "--out", out, *extra, *BRANCHES)


def _evidence(out: Path) -> dict:
    return json.loads((out / "evidence.json").read_text())


def _judged(evidence: dict) -> tuple[list, dict, dict]:
    """Results, runs and scenarios, without what a new measurement changes (durations, logged throughput)."""
    results = [{k: v for k, v in r.items() if k != "duration_s"} for r in evidence["results"]]
    runs = {b: [{k: v for k, v in r.items() if k not in ("duration_s", "notes")} for r in found]
            for b, found in evidence["runs"].items()}
    return results, runs, evidence["scenarios"]


def test_two_merged_shards_equal_one_run(tmp_path, capsys):
    assert _run(tmp_path / "whole") == 1
    assert _run(tmp_path / "s1", "--shard", "1/2") in (0, 1)
    assert _run(tmp_path / "s2", "--shard", "2/2") == 1
    one, two = _evidence(tmp_path / "s1"), _evidence(tmp_path / "s2")
    assert one["shard"]["index"] == 1 and two["shard"]["count"] == 2
    assert len(one["scenarios"]) == len(two["scenarios"]) == 1 and set(one["scenarios"]) != set(two["scenarios"])
    capsys.readouterr()
    code = run_cli("merge", "-c", SHIPPED, tmp_path / "s2" / "evidence.json", tmp_path / "s1" / "evidence.json",
                   "--out", tmp_path / "merged")
    assert code == 1
    merged, whole = _evidence(tmp_path / "merged"), _evidence(tmp_path / "whole")
    assert _judged(merged) == _judged(whole) and merged["shard"] is None
    assert len(merged["probes"]) == 4 and (tmp_path / "merged" / "report.html").stat().st_size > 0
    assert "mixed-batch-invalid-async" in (tmp_path / "merged" / "report.md").read_text()
    # `show` reads each scenario's steps from its own shard's probe files.
    for scenario in (CONTROL, "mixed-batch-invalid-async"):
        capsys.readouterr()
        assert run_cli("show", "-c", SHIPPED, scenario, "--branch", "pr-56195-style", "--out", tmp_path / "merged") == 0
        assert "step" in capsys.readouterr().out.lower()


def test_merge_refuses_what_is_not_one_comparisons_shards(tmp_path, capsys):
    """No probe needed: a shard's evidence edited to another count, a missing shard, a whole run."""
    from tests.factories import make_evidence
    from difftest.core.evidence import ShardEvidence, write_evidence

    shard = lambda i, n: make_evidence(shard=ShardEvidence(index=i, count=n, order=["a", "b"]))  # noqa: E731
    paths = {}
    for name, evidence in {"s1": shard(1, 2), "s1b": shard(1, 2), "s3": shard(1, 3), "whole": make_evidence()}.items():
        paths[name] = write_evidence(evidence, tmp_path / name / "evidence.json")
    for given, needle in (
        (["s1"], "the shards given are 1 of 2"),
        (["s1", "s1b"], "the shards given are 1, 1 of 2"),
        (["s1", "s3"], "differ in their shard count"),
        (["s1", "whole"], "is not a shard's evidence"),
    ):
        capsys.readouterr()
        assert run_cli("merge", "-c", SHIPPED, *[paths[g] for g in given], "--out", tmp_path / "m") == 2
        assert needle in capsys.readouterr().err
