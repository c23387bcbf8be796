"""The tests tier through the CLI, on real branch environments (slow: real vLLM, real pytest-xdist).

- The shipped config with the default selection (one run, shared by the tests that read it):
  upstream's selection does not separate the branches; pr-56137-style's regression test fails on
  pr-56195-style's code (broken) and passes on main's; both PRs' tests pass on pr-56137-style's
  code; nothing in the base or the branch environments changes while the tests run.
- A small selection (tests/v1/metrics/test_stats.py) beside REAL faulty branches: a planted
  undercount that upstream's test catches (broken, with the assertion), a renamed function the test
  module imports (could not measure, for that branch only); `verify` re-runs it; the gate fails on
  the planted branch; and with the workers left on the controller's sys.path (xdist's default)
  the planted bug would have "passed": the worker's foreign vLLM is caught and reads could not
  measure (these two select only the upstream test that catches the planted bug).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from difftest import tiers
from difftest.build.workspace import prepare
from difftest.core.config import load_config
from difftest.core.suites import UPSTREAM, source_label
from difftest.run.context import RunContext, default_baseline
from difftest.run.suites.measure import measure_suites
from tests.e2e.cli_helpers import run_cli
from tests.factories import ROOT, shipped_branch, write_config
from tests.patching import insert_after, make_patch

pytestmark = pytest.mark.slow

SHIPPED = ROOT / "branches.yaml"
PR37, PR95 = "pr-56137-style", "pr-56195-style"
REGRESSION_TEST = (
    "tests/v1/core/test_scheduler.py::"
    "test_spec_decoding_stats_survive_a_request_with_only_invalid_drafts"
)
EMITTED_TEST = (
    "tests/v1/core/test_scheduler.py::"
    "test_spec_decoding_mean_acceptance_length_counts_emitted_tokens"
)
STATS = "vllm/v1/metrics/stats.py"
UTILS = "vllm/v1/utils.py"
WORKER = "vllm/v1/worker/gpu_worker.py"
CORE = "vllm/v1/engine/core.py"
STATS_TESTS = "tests/v1/metrics/test_stats.py"


def evidence_of(out: Path) -> dict:
    return json.loads((out / "evidence.json").read_text())


def records(evidence: dict, source: str, test: str | None = None) -> dict[str, dict]:
    """code branch -> the record of `test` (or the only test) of `source`."""
    found = [
        r
        for r in evidence["tests"]
        if r["source"] == source and (test is None or r["test"] == test)
    ]
    return {r["code"]: r for r in found}


def verdicts(evidence: dict) -> dict[tuple[str, str], str]:
    return {
        (r["branch"], r["label"]): r["verdict"] for r in evidence["results"] if r["tier"] == "tests"
    }


def snapshot(folders: list[Path]) -> dict[str, tuple[int, int, int]]:
    """Every file and folder below `folders`: (size, mtime in ns, inode)."""
    found = {}
    for folder in folders:
        for dirpath, dirnames, filenames in os.walk(folder):
            for name in dirnames + filenames:
                path = os.path.join(dirpath, name)
                st = os.lstat(path)
                found[path] = (st.st_size, st.st_mtime_ns, st.st_ino)
    return found


# -- the shipped config, default selection ---------------------------------------------------


@pytest.fixture(scope="session")
def shipped_tests_run(tmp_path_factory, workspace):
    """`difftest run --tier tests` on the shipped branches.yaml's three original branches (the two
    drafter-skip branches add sessions, not questions, to these tests), once; the environments
    before and after."""
    envs = [workspace.base.path] + [b.env.path for b in workspace.branches if b.env is not None]
    before = snapshot(envs)
    out = tmp_path_factory.mktemp("tests-tier") / "out"
    code = run_cli("run", "-c", SHIPPED, "--tier", "tests", "--out", out, "main", PR37, PR95)
    return code, out, before, snapshot(envs)


shipped = pytest.mark.xdist_group("tests-tier-shipped")


@shipped
def test_upstreams_selection_does_not_separate_the_branches(shipped_tests_run):
    _, out, _, _ = shipped_tests_run
    evidence = evidence_of(out)
    upstream = [r for r in evidence["tests"] if r["source"] == UPSTREAM]
    by_test: dict[str, set[str]] = {}
    for r in upstream:
        by_test.setdefault(r["test"], set()).add(r["outcome"])
    assert len(by_test) >= 60 and {r["code"] for r in upstream} == {"main", PR37, PR95}
    assert all(len(outcomes) == 1 for outcomes in by_test.values()), (
        "no upstream test differs between branches"
    )
    assert sum(outcomes == {"passed"} for outcomes in by_test.values()) >= 60
    assert {r["judgement"] for r in upstream} <= {"pass", "fails-on-baseline", "skipped"}
    found = verdicts(evidence)
    assert found[("main", UPSTREAM)] == found[(PR37, UPSTREAM)] == found[(PR95, UPSTREAM)] == "pass"


@shipped
def test_the_sessions_are_traced_and_judge_each_branchs_changed_lines(shipped_tests_run):
    """A run of the tests tier alone still says what ran of each branch's changed code: every
    worker traces the files the branches change, and upstream's scheduler tests run all of both
    PRs' changed lines in scheduler.py and metrics.py."""
    _, out, _, _ = shipped_tests_run
    coverage = evidence_of(out)["coverage"]
    assert "vllm/v1/core/sched/scheduler.py" in coverage["traced"]
    standing = {b["branch"]: b for b in coverage["branches"]}
    for branch in (PR37, PR95):
        assert standing[branch]["status"] == "verified", standing[branch]
        assert standing[branch]["summary"].startswith("changed lines reached"), standing[branch]
    files = {(c["branch"], c["file"]): c for c in coverage["changed"]}
    scheduler = files[(PR95, "vllm/v1/core/sched/scheduler.py")]
    assert scheduler["status"] == "traced" and scheduler["reached"] == scheduler["lines"] != []


@shipped
def test_the_56137_regression_test_breaks_the_56195_code(shipped_tests_run):
    code, out, _, _ = shipped_tests_run
    assert code == 1
    evidence = evidence_of(out)
    test = records(evidence, source_label(PR37), REGRESSION_TEST)
    assert {b: r["outcome"] for b, r in test.items()} == {
        "main": "passed",
        PR37: "passed",
        PR95: "failed",
    }
    assert test[PR95]["judgement"] == "regression" and test[PR95]["message"] == "assert 3 == 6"
    found = verdicts(evidence)
    assert found[(PR95, source_label(PR37))] == "broken"
    assert {v for k, v in found.items() if k != (PR95, source_label(PR37))} == {"pass"}
    detail = next(
        r for r in evidence["results"] if (r["branch"], r["label"]) == (PR95, source_label(PR37))
    )
    assert detail["violations"][0]["detail"] == f"{REGRESSION_TEST}: assert 3 == 6"


@shipped
def test_both_prs_tests_pass_on_the_56137_code(shipped_tests_run):
    _, out, _, _ = shipped_tests_run
    evidence = evidence_of(out)
    emitted = records(evidence, source_label(PR95), EMITTED_TEST)
    assert {b: (r["outcome"], r["judgement"]) for b, r in emitted.items()} == {
        "main": ("failed", "fails-on-baseline"),
        PR37: ("passed", "fixed"),
        PR95: ("passed", "fixed"),
    }
    assert "4.0" in emitted["main"]["message"], "main's mean acceptance length counts accepted + 1"
    assert records(evidence, source_label(PR37), REGRESSION_TEST)[PR37]["outcome"] == "passed"
    sources = evidence["test_sources"]
    assert (
        sources[source_label(PR37)]["selection"] == [REGRESSION_TEST]
        and sources[source_label(PR37)]["session"] == "shared"
    )
    assert sources[UPSTREAM]["origin"] == "main" and len(sources[UPSTREAM]["sha"]) == 40


@shipped
def test_every_report_shows_the_cross_matrix(shipped_tests_run):
    _, out, _, _ = shipped_tests_run
    markdown = (out / "report.md").read_text()
    assert "### Tests of X on the code of Y" in markdown and "❌ 1 regression" in markdown
    assert "Tests of X on the code of Y" in (out / "report.html").read_text()
    assert f'name="repo-tests[{source_label(PR37)}]"' in (out / "junit.xml").read_text()


@shipped
def test_the_environments_are_untouched_by_the_tests(shipped_tests_run):
    _, _, before, after = shipped_tests_run
    added, removed = sorted(set(after) - set(before)), sorted(set(before) - set(after))
    changed = sorted(p for p in set(before) & set(after) if before[p] != after[p])
    assert (added, removed, changed) == ([], [], [])


# -- a small selection beside real faulty branches ---------------------------------------------

#: A planted per-source undercount of prefix-cache hits: upstream's test_stats.py catches it.
UNDERCOUNT = "        self.hits -= num_hits // 8\n"
RENAMED = "compute_iteration_stats"


def renamed_patch(path: Path, repo) -> Path:
    """One patch renaming `compute_iteration_details` in vLLM (and its two importers), not in the
    tests."""
    from difftest.build.refs import read_blob

    parts = []
    for repo_path in (UTILS, CORE, WORKER):
        old = read_blob(repo, "v0.32.0", repo_path).decode()
        single = make_patch(
            path.with_suffix(f".{len(parts)}"),
            repo_path,
            old,
            old.replace("compute_iteration_details", RENAMED),
        )
        parts.append(single.read_text())
    path.write_text("".join(parts))
    return path


#: The one upstream test of STATS_TESTS that catches the planted undercount (the faulty run shows
#: it: `test_a_planted_bug_upstreams_tests_catch_reads_broken`).
CATCHES_UNDERCOUNT = f"{STATS_TESTS}::test_prefix_cache_stats_record_hits_by_source"


def small_config(tmp: Path, *branches: dict, select: str = STATS_TESTS) -> Path:
    return write_config(
        tmp,
        list(branches),
        tests={"select": [select]},
        timeouts={"probe_s": 600, "run_s": 300},
    )


@pytest.fixture(scope="session")
def faulty_branches(tmp_path_factory, fixture_repo) -> dict[str, dict]:
    tmp = tmp_path_factory.mktemp("faulty-tests")
    planted = insert_after(
        tmp / "undercount.patch", fixture_repo, STATS, "        self.hits += num_hits\n", UNDERCOUNT
    )
    renamed = renamed_patch(tmp / "renamed.patch", fixture_repo)
    return {
        "main": shipped_branch("main"),
        "undercount": {"name": "undercount", "ref": "main", "patches": [str(planted)]},
        "renamed": {"name": "renamed", "ref": "main", "patches": [str(renamed)]},
    }


@pytest.fixture(scope="session")
def faulty_tests_run(tmp_path_factory, faulty_branches):
    tmp = tmp_path_factory.mktemp("faulty-tests-run")
    config = small_config(tmp, *faulty_branches.values())
    # A relative `--out`, as the default is (#29, case 1: the session, which runs in the test
    # root, once wrote its files there and never reported back).
    here = os.getcwd()
    os.chdir(tmp)
    try:
        code = run_cli("run", "-c", config, "--tier", "tests", "--out", "out")
    finally:
        os.chdir(here)
    return code, tmp / "out", config


faulty = pytest.mark.xdist_group("tests-tier-faulty")


@faulty
def test_a_planted_bug_upstreams_tests_catch_reads_broken(faulty_tests_run):
    code, out, _ = faulty_tests_run
    assert code == 1
    evidence = evidence_of(out)
    found = verdicts(evidence)
    assert found[("main", UPSTREAM)] == "pass" and found[("undercount", UPSTREAM)] == "broken"
    regressions = [
        r for r in evidence["tests"] if r["code"] == "undercount" and r["judgement"] == "regression"
    ]
    assert regressions, "some upstream test of the stats module catches the planted undercount"
    assert CATCHES_UNDERCOUNT in {r["test"] for r in regressions}  # the gate's selection below
    for regression in regressions:
        caught = records(evidence, UPSTREAM, regression["test"])
        assert caught["main"]["outcome"] == "passed" and caught["undercount"]["outcome"] == "failed"
        assert (
            regression["test"].startswith(f"{STATS_TESTS}::") and "assert" in regression["message"]
        )


@faulty
def test_a_module_that_does_not_import_on_one_branch_reads_could_not_measure_there_only(
    faulty_tests_run,
):
    _, out, _ = faulty_tests_run
    evidence = evidence_of(out)
    assert verdicts(evidence)[("renamed", UPSTREAM)] == "error"
    renamed = [r for r in evidence["tests"] if r["code"] == "renamed"]
    assert len(renamed) == 15 and {r["outcome"] for r in renamed} == {"not-collected"}
    assert all(
        f"could not collect {STATS_TESTS}" in r["message"]
        and "compute_iteration_details" in r["message"]
        for r in renamed
    )
    assert {r["outcome"] for r in evidence["tests"] if r["code"] == "main"} == {"passed"}


@faulty
def test_verify_reruns_the_tests_tier(faulty_tests_run, tmp_path, capsys):
    _, out, config = faulty_tests_run
    assert run_cli("verify", "-c", config, out / "evidence.json", "--out", tmp_path) == 0
    assert "identical" in capsys.readouterr().out


@faulty
def test_the_gate_fails_on_a_head_that_breaks_an_upstream_test(
    faulty_tests_run, faulty_branches, tmp_path, capsys
):
    config = small_config(
        tmp_path, faulty_branches["main"], faulty_branches["undercount"], select=CATCHES_UNDERCOUNT
    )
    code = run_cli(
        "gate",
        "-c",
        config,
        "--base",
        "main",
        "--head",
        "undercount",
        "--tier",
        "tests",
        "--out",
        tmp_path / "o",
    )
    assert code == 1
    summary = (tmp_path / "o" / "gate.md").read_text()
    assert (
        "is worse than main" in summary and "head is broken (base pass): test-regression" in summary
    )


@faulty
def test_workers_on_the_controllers_path_are_caught_not_passed(faulty_branches, tmp_path):
    """xdist's default hands each worker the controller's sys.path: undercount's worker would import
    main's vLLM and its planted bug would pass. With the plugin's fix off, the host must catch
    it."""
    config = load_config(
        small_config(
            tmp_path,
            faulty_branches["main"],
            faulty_branches["undercount"],
            select=CATCHES_UNDERCOUNT,
        )
    )
    workspace = prepare(config)
    tier = tiers.get("tests")
    (selection,) = tier.scenarios(config, explicit=True)
    context = RunContext(
        workspace, default_baseline(workspace), out=tmp_path, inherit_controller_path=True
    )
    measured = measure_suites(context, tier, selection)
    found = {(r.branch, r.label): r for r in measured.results}
    wrong = found[("undercount", UPSTREAM)]
    assert wrong.verdict == "error" and "imported vLLM from" in (wrong.error or "")
    assert str(workspace.branch("main").env.path) in (wrong.error or ""), "it ran main's code"
