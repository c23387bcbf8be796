"""`run --shard I/N` and `merge`: two shards merged give the results and verdicts of one run, judged
again from the shards' records, never from what the shards say (slow: real vLLM, once per module;
every merge after that reads files only)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from difftest.build.envs.fingerprint import sha256_file
from difftest.core.config import SHIPPED_SCENARIOS
from difftest.core.evidence import Evidence, ShardEvidence, write_evidence
from tests.e2e.cli_helpers import CONTROL, run_cli
from tests.factories import ROOT, make_evidence, shipped_branch, write_config

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("shards")]

SHIPPED = ROOT / "branches.yaml"
#: Two scheduler scenarios: the control, and one where pr-56195-style breaks (so traces are
#: written).
FAILING = "mixed-batch-invalid-async"
SELECT = f"{CONTROL} or {FAILING}"
BRANCHES = ("main", "pr-56195-style")


def _run(out: Path, *extra: str) -> int:
    return run_cli(
        "run", "-c", SHIPPED, "--tier", "scheduler", "-k", SELECT, "--out", out, *extra, *BRANCHES
    )


def _evidence(out: Path) -> dict:
    return json.loads((out / "evidence.json").read_text())


def _judged(evidence: dict) -> tuple[list, dict, dict]:
    """Results, runs and scenarios, without what a new measurement changes (durations, logged
    throughput)."""
    results = [{k: v for k, v in r.items() if k != "duration_s"} for r in evidence["results"]]
    runs = {
        b: [{k: v for k, v in r.items() if k not in ("duration_s", "notes")} for r in found]
        for b, found in evidence["runs"].items()
    }
    return results, runs, evidence["scenarios"]


@pytest.fixture(scope="session")
def measured(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One whole run and its two shards (`whole`, `s1`, `s2`), measured once: tests merge copies."""
    root = tmp_path_factory.mktemp("shards")
    assert _run(root / "whole") == 1
    assert _run(root / "s1", "--shard", "1/2") in (0, 1)
    assert _run(root / "s2", "--shard", "2/2") == 1
    return root


@pytest.fixture
def shards(measured: Path, tmp_path: Path) -> Path:
    """This test's own copy of both shards (their evidence and probe files), free to edit."""
    for name in ("s1", "s2"):
        shutil.copytree(measured / name, tmp_path / name)
    return tmp_path


def _merge(folder: Path, out: Path, config: Path = SHIPPED) -> int:
    return run_cli(
        "merge",
        "-c",
        config,
        folder / "s2" / "evidence.json",
        folder / "s1" / "evidence.json",
        "--out",
        out,
    )


def _edit(shard: Path, change: Callable[[dict], None]) -> None:
    """Change a shard's evidence.json as a person with an editor would (no hash of it is kept)."""
    raw = _evidence(shard)
    change(raw)
    (shard / "evidence.json").write_text(json.dumps(raw, indent=2))


def _holding(folder: Path, scenario: str) -> Path:
    """The shard that holds `scenario`."""
    return next(folder / s for s in ("s1", "s2") if scenario in _evidence(folder / s)["scenarios"])


def _probe(raw: dict, branch: str) -> dict:
    return next(p for p in raw["probes"] if p["branch"] == branch)


def _refused(code: int, capsys: pytest.CaptureFixture[str], out: Path, *needles: str) -> None:
    """Exit 2, the error naming each needle, and nothing merged into `out`."""
    err = capsys.readouterr().err
    assert code == 2, err
    for needle in needles:
        assert needle in err, err
    assert not (out / "evidence.json").exists()


def test_two_merged_shards_equal_one_run(
    measured: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    one, two = _evidence(measured / "s1"), _evidence(measured / "s2")
    assert one["shard"]["index"] == 1 and two["shard"]["count"] == 2
    assert len(one["scenarios"]) == len(two["scenarios"]) == 1 and set(one["scenarios"]) != set(
        two["scenarios"]
    )
    capsys.readouterr()
    assert _merge(measured, tmp_path / "merged") == 1
    merged, whole = _evidence(tmp_path / "merged"), _evidence(measured / "whole")
    assert _judged(merged) == _judged(whole) and merged["shard"] is None
    assert merged["reference_branches"] == whole["reference_branches"]
    assert len(merged["probes"]) == 4 and (tmp_path / "merged" / "report.html").stat().st_size > 0
    assert FAILING in (tmp_path / "merged" / "report.md").read_text()
    # `show` reads each scenario's steps from its own shard's probe files.
    for scenario in (CONTROL, FAILING):
        capsys.readouterr()
        assert (
            run_cli(
                "show",
                "-c",
                SHIPPED,
                scenario,
                "--branch",
                "pr-56195-style",
                "--out",
                tmp_path / "merged",
            )
            == 0
        )
        assert "step" in capsys.readouterr().out.lower()


def test_verdicts_edited_to_pass_merge_to_the_true_verdicts(
    shards: Path, measured: Path, tmp_path: Path
) -> None:
    """Issue 19, item 9: every non-pass verdict of both shards edited to a pass; the merge judges
    the runs."""

    def all_pass(raw: dict) -> None:
        raw["results"] = [
            {**r, "verdict": "pass", "differences": [], "violations": [], "error": None}
            for r in raw["results"]
        ]

    for name in ("s1", "s2"):
        _edit(shards / name, all_pass)
    assert _merge(shards, tmp_path / "merged") == 1
    merged = _evidence(tmp_path / "merged")
    assert _judged(merged) == _judged(_evidence(measured / "whole"))
    assert any(r["verdict"] != "pass" for r in merged["results"] if r["branch"] == "pr-56195-style")


@pytest.mark.parametrize("damage", ["records edited", "records missing", "job edited"])
def test_a_shard_whose_probe_files_do_not_match_their_hashes_is_refused(
    damage: str, shards: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A blank line the reader would skip, a file gone, a job reformatted: the hash names each."""
    probe = _probe(_evidence(shards / "s1"), "pr-56195-style")
    path = shards / "s1" / probe["job" if damage == "job edited" else "records"]
    if damage == "records missing":
        path.unlink()
    else:
        path.write_bytes(path.read_bytes() + b"\n")
    capsys.readouterr()
    code = _merge(shards, tmp_path / "merged")
    _refused(
        code,
        capsys,
        tmp_path / "merged",
        path.name,
        "is missing" if damage == "records missing" else "changed after the evidence was written",
    )


def test_a_shard_of_another_difftest_version_is_refused(
    shards: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _edit(shards / "s2", lambda raw: raw.update(difftest_version="0.0.1"))
    capsys.readouterr()
    code = _merge(shards, tmp_path / "merged")
    _refused(code, capsys, tmp_path / "merged", "s2/evidence.json differ in their difftest version")


def test_each_probes_outcome_is_taken_from_the_evidence(
    shards: Path, measured: Path, tmp_path: Path
) -> None:
    """Without outcomes (files before schema 9) the clean exits are derived and nothing changes, an
    unclean one is no clean end; an outcome that says the branch's probe was killed after its runs
    makes them broken."""
    for name in ("s1", "s2"):
        _edit(shards / name, lambda raw: [p.update(outcome=None) for p in raw["probes"]])
    assert _merge(shards, tmp_path / "derived") == 1
    assert _judged(_evidence(tmp_path / "derived")) == _judged(_evidence(measured / "whole"))

    def control(out: Path) -> list[dict]:
        return [
            r
            for r in _evidence(out)["results"]
            if r["scenario"] == CONTROL and r["branch"] == "pr-56195-style"
        ]

    # A probe recorded before schema 9 as not exiting cleanly: how is not known, so it is no clean
    # end.
    _edit(
        _holding(shards, CONTROL),
        lambda raw: _probe(raw, "pr-56195-style").update(exited_cleanly=False),
    )
    assert _merge(shards, tmp_path / "unclean") == 1
    assert {r["verdict"] for r in control(tmp_path / "unclean")} == {"broken"}

    def killed(raw: dict) -> None:
        probe = _probe(raw, "pr-56195-style")
        probe.update(
            exited_cleanly=False, outcome={"exit_code": -9, "trailer": True, "started": True}
        )

    _edit(_holding(shards, CONTROL), killed)
    assert _merge(shards, tmp_path / "killed") == 1
    assert control(tmp_path / "killed") and {
        r["verdict"] for r in control(tmp_path / "killed")
    } == {"broken"}
    assert all(
        "was killed by signal 9" in v["detail"]
        for r in control(tmp_path / "killed")
        for v in r["violations"]
    )


def test_an_outcome_the_records_contradict_is_refused(
    shards: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def unreported(raw: dict) -> None:
        _probe(raw, "main")["outcome"]["unreported"] = [[CONTROL, "order:made-up"]]

    _edit(_holding(shards, CONTROL), unreported)
    capsys.readouterr()
    code = _merge(shards, tmp_path / "merged")
    _refused(
        code, capsys, tmp_path / "merged", "main-scheduler-runs.jsonl does not match the records"
    )


def test_a_shard_claiming_a_scenario_was_not_run_is_refused(
    shards: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Skipping is recomputed from the base: a failing scenario cannot be hidden as "not run on this
    base"."""
    _edit(
        _holding(shards, FAILING),
        lambda raw: raw["scenarios"][FAILING].update(skipped="needs CUDA"),
    )
    capsys.readouterr()
    code = _merge(shards, tmp_path / "merged")
    _refused(
        code,
        capsys,
        tmp_path / "merged",
        f"says scenario {FAILING!r} was not run: needs CUDA",
        "can run",
    )


def test_a_job_that_did_not_play_the_scenario_is_refused(
    shards: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Even with its hash made to match, a job whose scenario is not the config's file is not
    judged."""
    folder = _holding(shards, CONTROL)
    raw = _evidence(folder)
    probe = _probe(raw, "main")
    job_path = folder / probe["job"]
    job = json.loads(job_path.read_text())
    job["scenarios"][0]["file"] = "another.yaml"
    job_path.write_text(json.dumps(job))
    probe["job_sha256"] = sha256_file(job_path)
    (folder / "evidence.json").write_text(json.dumps(raw))
    capsys.readouterr()
    code = _merge(shards, tmp_path / "merged")
    _refused(
        code,
        capsys,
        tmp_path / "merged",
        "main's scheduler probe",
        "not the scenarios the evidence names",
    )


def test_a_changed_scenario_file_is_refused(
    shards: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenarios = tmp_path / "scenarios"
    shutil.copytree(SHIPPED_SCENARIOS, scenarios)
    with (scenarios / "scheduler" / f"{CONTROL}.yaml").open("a") as handle:
        handle.write("# edited\n")
    config = write_config(
        tmp_path, [shipped_branch(b) for b in BRANCHES], scenarios_dir=str(scenarios)
    )
    capsys.readouterr()
    code = _merge(shards, tmp_path / "merged", config)
    _refused(
        code, capsys, tmp_path / "merged", f"scenario {CONTROL!r}", "is missing or its file changed"
    )


def test_merge_refuses_what_is_not_one_comparisons_shards(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No probe needed: a shard's evidence edited to another count, a missing shard, a whole run."""

    def shard(i: int, n: int) -> Evidence:
        return make_evidence(shard=ShardEvidence(index=i, count=n, order=["a", "b"]))

    paths = {}
    for name, evidence in {
        "s1": shard(1, 2),
        "s1b": shard(1, 2),
        "s3": shard(1, 3),
        "whole": make_evidence(),
    }.items():
        paths[name] = write_evidence(evidence, tmp_path / name / "evidence.json")
    for given, needle in (
        (["s1"], "the shards given are 1 of 2"),
        (["s1", "s1b"], "the shards given are 1, 1 of 2"),
        (["s1", "s3"], "differ in their shard count"),
        (["s1", "whole"], "is not a shard's evidence"),
    ):
        capsys.readouterr()
        assert (
            run_cli("merge", "-c", SHIPPED, *[paths[g] for g in given], "--out", tmp_path / "m")
            == 2
        )
        assert needle in capsys.readouterr().err
