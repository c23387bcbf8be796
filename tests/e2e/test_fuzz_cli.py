"""`difftest fuzz` through the CLI, on the real branches (slow: real vLLM in every branch
environment).

One shipped search (`--seed 0`, three branches, no scenario files involved)
is shared by the tests that read it: what it finds for each branch and how
small, that its files are valid scenarios that `difftest run` reproduces, and
that its evidence is whole. Against main, a branch that only renames a local
variable must show nothing while a real fix shows its difference; under the
lenient reading pr-56137-style shows only the padding of new decodes (#50518).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import yaml

from difftest.build.refs import read_blob
from difftest.core.evidence import read_evidence
from difftest.core.fuzz import FuzzReport
from tests.e2e.cli_helpers import SCHEDULER, results_of, run_cli
from tests.factories import shipped_branch, write_config
from tests.patching import make_patch
from tests.sessions import once_per_session

pytestmark = pytest.mark.slow

#: Examples per search round in the shared shipped search (the issue's acceptance figure).
EXAMPLES = 300


@pytest.fixture(scope="session")
def shipped(tmp_path_factory) -> tuple[int, Path, FuzzReport]:
    """The search, run once per test session and shared by the xdist workers
    (`tests/sessions.py`)."""

    def search(folder: Path) -> dict[str, int]:
        (folder / "no-scenarios").mkdir()  # an empty scenarios_dir: fuzz reads none
        config = write_config(
            folder,
            [shipped_branch(n) for n in ("main", "pr-56137-style", "pr-56195-style")],
            scenarios_dir=str(folder / "no-scenarios"),
        )
        code = run_cli(
            "fuzz", "-c", config, "--seed", "0", "--examples", EXAMPLES, "--out", folder / "out"
        )
        return {"code": code}

    folder, answer = once_per_session(tmp_path_factory, "fuzz-shipped", search)
    out = folder / "out"
    return int(answer["code"]), out, FuzzReport.model_validate_json((out / "fuzz.json").read_text())


def kinds(report: FuzzReport, branch: str) -> dict[tuple[str, str], Path]:
    """(verdict, what) -> the finding's scenario file, for one branch."""
    return {(o.kind.verdict, o.kind.what): Path(f.file) for o, f in report.by_branch()[branch]}


def scenario_of(out: Path, file: Path) -> dict:
    return yaml.safe_load((out / file).read_text())


def _pads(scenario: dict) -> bool:
    """Whether a scenario schedules a new decode padded with -1 placeholders (#50518): a
    prefix-cache hit, a P/D decode node, or a 1-token prompt."""
    return bool(
        scenario.get("prefix_caching")
        or scenario.get("kv_connector") == "decode-node"
        or any(len(r["prompt"]) == 1 for r in scenario["requests"])
    )


def _residual(scenario: dict) -> bool:
    """Whether a scenario holds an all-invalid grammar request on the async path (the strict
    reading's residual of main and #56137)."""
    return scenario["draft_path"] == "async" and any("grammar" in r for r in scenario["requests"])


def own(found) -> set:
    """The kinds found, but the per-request metrics' (#49), which every branch shares."""
    return {(v, w) for v, w in found if not w.startswith("request_metrics.")}


def test_the_shipped_search_finds_each_branch_s_known_story(shipped) -> None:
    code, out, report = shipped
    assert code == 1 and report.unmeasured == {} and report.stopped is None
    assert report.searched == EXAMPLES
    main = kinds(report, "main")
    # main: the truncation overcount, shrunk to one request; plus num_drafts rows the oracle does
    # not count (the scheduler's padding of a new decode, or the strict reading's residual).
    # Since #49 fuzz draws per-request metrics: every branch's per-request mean counts cut tokens
    # (and, strictly read, its histogram the all-invalid steps): set apart, as `own` does.
    assert own(main) == {
        ("diverge", "num_emitted_tokens"),
        ("diverge", "num_drafts"),
    }
    truncation = scenario_of(out, main[("diverge", "num_emitted_tokens")])
    assert len(truncation["requests"]) == 1
    # pr-56137-style: truncation fixed; only rows the oracle does not count remain.
    assert own(kinds(report, "pr-56137-style")) == {("diverge", "num_drafts")}
    rows = scenario_of(out, kinds(report, "pr-56137-style")[("diverge", "num_drafts")])
    assert _pads(rows) or _residual(rows)
    # pr-56195-style: the lost stats of a mixed batch (an all-invalid grammar request among others).
    lost = kinds(report, "pr-56195-style")
    assert ("broken", "stats-lost") in lost
    assert {(v, w) for v, w in own(lost) if v != "broken"} <= {("diverge", "num_drafts")}
    mixed = scenario_of(out, lost[("broken", "stats-lost")])
    assert len(mixed["requests"]) >= 2 and mixed["draft_path"] == "async"
    # The all-invalid request is a grammar request, or (#49) one whose async drafter proposed
    # nothing for a step: either way the batch holds another request whose stats it loses.


def test_found_files_name_branch_difference_and_seed(shipped) -> None:
    _, out, report = shipped
    assert report.findings and all(f.reproduced for f in report.findings)
    for finding in report.findings:
        text = (out / finding.file).read_text()
        comments = [line for line in text.splitlines() if line.startswith("#")]
        assert "--seed 0" in comments[0]
        for obs in finding.observations:
            assert any(
                line.startswith(f"# {obs.kind.branch}: {obs.kind.verdict}") and obs.reason in line
                for line in comments
            )
        assert f"-k {finding.name}" in comments[-1]


def test_difftest_run_on_the_found_files_reproduces_every_finding(shipped, tmp_path) -> None:
    _, out, report = shipped
    again = tmp_path / "again"
    assert run_cli("run", "-c", out / "found" / "branches.yaml", "--out", again) == 1
    results = results_of(again)
    for finding in report.findings:
        for obs in finding.observations:
            ours = [
                r
                for r in results
                if r["scenario"] == finding.name and r["branch"] == obs.kind.branch
            ]
            shown = {
                (r["verdict"], r["differences"][0]["counter"])
                for r in ours
                if r["verdict"] == "diverge"
            }
            shown |= {
                ("broken", v["invariant"])
                for r in ours
                if r["verdict"] == "broken"
                for v in r["violations"]
            }
            assert (obs.kind.verdict, obs.kind.what) in shown, (finding.name, obs.kind)


def test_each_finding_has_its_evidence(shipped) -> None:
    _, out, report = shipped
    for finding in report.findings:
        evidence = read_evidence(out / finding.evidence)
        scenario = evidence.scenarios[finding.name]
        assert scenario.file == finding.file.removeprefix("found/")
        assert scenario.sha256 == hashlib.sha256((out / finding.file).read_bytes()).hexdigest()
        assert {r.branch for r in evidence.results} == {"main", "pr-56137-style", "pr-56195-style"}
        assert evidence.runs and all(evidence.runs.values())
    summary = (out / "fuzz.md").read_text()
    assert all(f.file in summary for f in report.findings)


def test_against_main_a_renamed_local_shows_nothing_and_a_real_fix_shows_its_difference(
    tmp_path, fixture_repo
) -> None:
    """One search, two branches judged against main: one that only renames a local variable of the
    stats path, and pr-56137-style, which counts committed tokens where main counts accepted + 1."""
    old = read_blob(fixture_repo, "v0.32.0", SCHEDULER).decode()
    assert (
        old.count("scheduled_spec_token_ids") == 3
    )  # the one local variable of update_from_output renamed
    patch = make_patch(
        tmp_path / "rename.patch",
        SCHEDULER,
        old,
        old.replace("scheduled_spec_token_ids", "spec_ids_of_step"),
    )
    rename = {"name": "rename", "ref": "main", "patches": [str(patch)]}
    config = write_config(
        tmp_path, [shipped_branch("main"), rename, shipped_branch("pr-56137-style")]
    )
    out = tmp_path / "out"
    assert (
        run_cli("fuzz", "-c", config, "--against", "main", "--examples", EXAMPLES, "--out", out)
        == 1
    )
    report = FuzzReport.model_validate_json((out / "fuzz.json").read_text())
    assert (report.branches, report.against, report.unmeasured) == (
        ["rename", "pr-56137-style"],
        "main",
        {},
    )
    assert report.searched == EXAMPLES and report.by_branch()["rename"] == []
    assert "| rename | nothing found |" in (out / "fuzz.md").read_text()
    # ... and that "nothing found" checked something: every line the rename changes ran.
    standing = report.coverage_of("rename")
    assert standing is not None and standing.status == "verified", standing
    assert {r.branch for r in report.first_reached} == {"rename", "pr-56137-style"}
    found = kinds(report, "pr-56137-style")
    assert ("diverge", "num_emitted_tokens") in found
    assert len(scenario_of(out, found[("diverge", "num_emitted_tokens")])["requests"]) == 1
    obs = next(
        o for o, _ in report.by_branch()["pr-56137-style"] if o.kind.what == "num_emitted_tokens"
    )
    assert obs.reason.startswith("num_emitted_tokens: measured") and ", main " in obs.reason


def test_under_the_lenient_reading_pr_56137_style_shows_only_the_padding(tmp_path) -> None:
    """Lenient: its all-invalid grammar residual is gone; what is left is #50518's (it counts the
    scheduler's -1 padding of a new decode as a draft round, as main does)."""
    config = write_config(tmp_path, [shipped_branch("pr-56137-style")], baseline="pr-56137-style")
    out = tmp_path / "out"
    code = run_cli(
        "fuzz", "-c", config, "--reading", "lenient", "--seed", "0", "--examples", EXAMPLES,
        "--out", out,
    )  # fmt: skip
    report = FuzzReport.model_validate_json((out / "fuzz.json").read_text())
    assert (report.reading, report.searched) == ("lenient", EXAMPLES)
    found = kinds(report, "pr-56137-style")
    assert code == 1 and own(found) == {("diverge", "num_drafts")}
    assert _pads(scenario_of(out, found[("diverge", "num_drafts")]))


def test_usage_errors_exit_2_before_anything_is_built(tmp_path) -> None:
    config = write_config(tmp_path, [shipped_branch("main")])
    assert run_cli("fuzz", "-c", config, "--against", "main", "main", "--out", tmp_path / "o") == 2
    assert (
        run_cli("fuzz", "-c", config, "--against", "main", "--out", tmp_path / "o") == 2
    )  # nothing left to fuzz
    with pytest.raises(SystemExit) as exc:
        run_cli("fuzz", "-c", config, "--examples", "0")
    assert exc.value.code == 2
    with pytest.raises(SystemExit) as exc:
        run_cli("fuzz", "-c", config, "--examples", "10", "--time", "5")
    assert exc.value.code == 2
    assert not (tmp_path / "o").exists()
