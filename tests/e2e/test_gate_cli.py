"""`difftest gate` through the CLI on the shipped branches (slow: real vLLM)."""

from __future__ import annotations

import json
import re

import pytest

from difftest.build.refs import read_blob
from tests.e2e.cli_helpers import CONTROL, SCHEDULER, faulty_config, run_cli
from tests.factories import BASE_TAG, ROOT, shipped_branch, write_config
from tests.patching import make_patch, prepend

pytestmark = pytest.mark.slow

SHIPPED = ROOT / "branches.yaml"


def rows(markdown: str, heading: str) -> set[tuple[str, str]]:
    """(scenario, run) of every row of one section of the gate's Markdown summary."""
    if f"### {heading}" not in markdown:
        return set()
    section = markdown.split(f"### {heading}", 1)[1].split("###", 1)[0]
    cells = [
        line.split("|")
        for line in section.splitlines()
        if line.startswith("| ") and not line.startswith("| scenario")
    ]
    return {(c[1].strip().replace("\\", ""), c[2].strip()) for c in cells}


def test_gate_fails_on_the_56195_style_head_and_prints_json_for_scripts(tmp_path, capsys):
    code = run_cli(
        "gate",
        "-c",
        SHIPPED,
        "--base",
        "main",
        "--head",
        "pr-56195-style",
        "--tier",
        "scheduler",
        "--format",
        "json",
        "--out",
        tmp_path,
    )
    document = json.loads(capsys.readouterr().out)
    assert code == document["exit_code"] == 1
    assert document["gate"]["worse"] and (document["base"], document["head"]) == (
        "main",
        "pr-56195-style",
    )
    broken = [f for f in document["gate"]["findings"] if f["kind"] == "broken"]
    # The all-invalid request by grammar, by an empty async proposal, and with per-request
    # metrics on (#49).
    assert {f["scenario"] for f in broken} == {
        "mixed-batch-invalid-async",
        "async-short-drafts",
        "per-request-metrics",
    }
    assert {r["branch"] for r in document["results"]} == {"main", "pr-56195-style"}
    summary = (
        tmp_path / "gate.md"
    ).read_text()  # the Markdown summary is written whatever is printed
    assert summary.startswith("## ❌ difftest gate") and "mixed-batch-invalid-async" in summary
    # A broken run is only ever "worse", never also "better" (it is closer to the oracle on some
    # counter).
    broken_runs = {(f["scenario"], f["label"]) for f in broken}
    assert rows(summary, "Why it is worse") >= broken_runs
    better = rows(summary, "Better than the base")
    assert better and not better & broken_runs
    assert not any(
        f["kind"] == "improved" and (f["scenario"], f["label"]) in broken_runs
        for f in document["gate"]["findings"]
    )


def test_a_head_that_passes_without_running_all_its_changed_lines_reads_not_verified(
    tmp_path, capsys
):
    """#48: on one scenario the 56195 style passes, but its early return for a request without a
    valid draft never runs: never a plain pass; exit 0, or 1 with `--require-coverage`."""
    gate = ["gate", "-c", SHIPPED, "--base", "main", "--head", "pr-56195-style"]
    chosen = ["--tier", "scheduler", "-k", "eos-on-bonus", "--format", "json"]
    code = run_cli(*gate, *chosen, "--out", tmp_path / "plain")
    document = json.loads(capsys.readouterr().out)
    assert code == document["exit_code"] == 0
    assert not document["gate"]["worse"] and document["gate"]["not_verified"]
    summary = (tmp_path / "plain" / "gate.md").read_text()
    assert summary.startswith(
        "## ⚠️ difftest gate: pr-56195-style is not worse than main, but not verified"
    )
    assert "Changed code (not verified): changed lines reached" in summary
    assert "not reached: scheduler.py " in summary
    code = run_cli(*gate, *chosen, "--require-coverage", "--out", tmp_path / "required")
    assert code == json.loads(capsys.readouterr().out)["exit_code"] == 1


def test_gate_exits_3_when_the_base_cannot_be_measured(tmp_path, fixture_repo, capsys):
    """The base fails to import: nothing can be compared, and the gate says so instead of
    passing."""
    patch = prepend(
        tmp_path / "broken.patch",
        fixture_repo,
        SCHEDULER,
        'raise ImportError("planted: the base cannot import")',
    )
    config = faulty_config(tmp_path, "broken-base", patch)
    code = run_cli(
        "gate",
        "-c",
        config,
        "--base",
        "broken-base",
        "--head",
        "main",
        "--tier",
        "scheduler",
        "-k",
        CONTROL,
        "--out",
        tmp_path / "out",
    )
    printed = capsys.readouterr().out
    assert code == 3
    assert "could not measure the base (broken-base)" in printed
    assert len(rows(printed, "Could not measure the base")) == 4
    assert "ImportError: planted: the base cannot import" in printed
    assert "matches" not in printed and "not worse" not in printed


def test_gate_fails_a_head_whose_engine_never_finishes(tmp_path, fixture_repo, capsys):
    """The head drops the rollback of rejected drafts: its engine never finishes a request, main's
    does."""
    old = read_blob(fixture_repo, BASE_TAG, SCHEDULER).decode()
    rollback = "request.num_computed_tokens -= num_rejected"
    assert old.count(rollback) == 1
    patch = make_patch(
        tmp_path / "no-rollback.patch",
        SCHEDULER,
        old,
        old.replace(rollback, "pass  # rollback dropped"),
    )
    config = faulty_config(tmp_path, "no-rollback", patch)
    code = run_cli(
        "gate",
        "-c",
        config,
        "--base",
        "main",
        "--head",
        "no-rollback",
        "--tier",
        "engine",
        "-k",
        "engine-max-tokens-mid-block",
        "--out",
        tmp_path / "out",
    )
    printed = capsys.readouterr().out
    assert code == 1, printed
    assert "no-rollback is worse than main" in printed
    (why,) = [line for line in printed.splitlines() if "head is broken" in line]
    assert "did not finish" in why and "within 5000 engine steps" in why
    assert (
        "unfinished: cut (" in why
        and "tokens computed)" in why
        and re.search(r"\(main completes this run in \d+\.\d\d s\)", why)
    )
    assert " at difftest/probe/engine/session.py:" in why


@pytest.mark.parametrize("reading", ["strict", "lenient"])
def test_gate_passes_the_56137_style_head_and_explains_the_residual(tmp_path, capsys, reading):
    code = run_cli(
        "gate",
        "-c",
        SHIPPED,
        "--base",
        "main",
        "--head",
        "pr-56137-style",
        "--tier",
        "scheduler",
        "--reading",
        reading,
        "--out",
        tmp_path,
    )
    printed = capsys.readouterr().out  # piped: Markdown, as written to gate.md
    assert printed.strip() == (tmp_path / "gate.md").read_text().strip()
    # Not worse than main under either reading: it fixes truncation, and its residuals are main's
    # too: the skipped drafter's zero-fill counted as drafts (#34734, which #54054 fixes,
    # not #56137) and, under the strict reading, the all-invalid request counted as a draft.
    assert code == 0, printed
    assert reading in printed
    assert "eos-in-accepted-drafts" in printed  # listed among the improvements
    residual = printed.split("Still differs from the oracle, as on the base")[1].split("###")[0]
    assert "drafter-skip" in residual
    assert ("grammar-all-invalid-async" in residual) is (reading == "strict")
    if reading == "strict":
        assert "num\\_drafts" in residual


def test_gate_skips_when_no_stats_path_file_changes(tmp_path, fixture_repo, capsys):
    old = read_blob(fixture_repo, BASE_TAG, "vllm/version.py").decode()
    unrelated = make_patch(
        tmp_path / "docs.patch", "vllm/version.py", old, old + "\n# unrelated change\n"
    )
    config = write_config(
        tmp_path,
        [shipped_branch("main"), {"name": "docs-only", "ref": "main", "patches": [str(unrelated)]}],
    )
    assert (
        run_cli("gate", "-c", config, "--base", "main", "--head", "docs-only", "--out", tmp_path)
        == 0
    )
    assert "skipped" in capsys.readouterr().out


def _sampling_params_head(tmp_path, fixture_repo, name, old_text, new_text):
    """A config whose branch `name` edits vllm/sampling_params.py (off the stats path)."""
    old = read_blob(fixture_repo, BASE_TAG, "vllm/sampling_params.py").decode()
    assert old.count(old_text) == 1
    patch = make_patch(
        tmp_path / f"{name}.patch",
        "vllm/sampling_params.py",
        old,
        old.replace(old_text, new_text),
    )
    return write_config(
        tmp_path, [shipped_branch("main"), {"name": name, "ref": "main", "patches": [str(patch)]}]
    )


def test_a_head_off_the_stats_path_is_skipped_only_where_no_scenario_runs_its_lines(
    tmp_path, fixture_repo, capsys
):
    """#48: the skip rule reads the base's coverage: an edit inside a method no scenario calls
    (`SamplingParams.__repr__`) is skipped, naming what was checked; an edit to a line every
    request runs (`__post_init__`) is measured although the file is off the stats path."""
    chosen = ["--tier", "scheduler", "-k", "eos-on-bonus"]
    config = _sampling_params_head(
        tmp_path,
        fixture_repo,
        "repr-only",
        'f"SamplingParams(n={self.n}, "',
        'f"Params(n={self.n}, "',
    )
    gate = ["gate", "-c", config, "--base", "main", "--format", "md", *chosen]
    assert run_cli(*gate, "--head", "repr-only", "--out", tmp_path / "skip") == 0
    captured = capsys.readouterr()
    assert "skipped: repr-only changes none of the stats-path files" in captured.out
    assert (
        "none of the code it changes in vllm/sampling_params.py ran on main in 1 scenario(s) "
        "of the scheduler tier(s)" in captured.out
    )
    assert "checking which code of vllm/ the scenarios run on main" in captured.err
    config = _sampling_params_head(
        tmp_path,
        fixture_repo,
        "post-init",
        "        if 0 < self.temperature < _MAX_TEMP:",
        "        if 0 < self.temperature < _MAX_TEMP:\n            _ = None",
    )
    gate = ["gate", "-c", config, "--base", "main", "--format", "md", *chosen]
    assert run_cli(*gate, "--head", "post-init", "--out", tmp_path / "measure") == 0
    captured = capsys.readouterr()
    assert "skipped" not in captured.out
    assert re.search(
        r"measuring: post-init changes no stats-path file, but vllm/sampling_params.py line "
        r"\d+ is in SamplingParams.__post_init__, which ran on main",
        captured.err,
    ), captured.err
    assert (tmp_path / "measure" / "gate.md").read_text().startswith("## ")


@pytest.mark.parametrize("where", ["missing-folder/summary.md", "a-directory"])
def test_a_job_summary_that_cannot_be_written_is_a_warning_not_a_failure(
    tmp_path, fixture_repo, capsys, monkeypatch, where
):
    """#40, case 6: the gate's exit code stands (here the skip's 0); the warning names the file."""
    old = read_blob(fixture_repo, BASE_TAG, "vllm/version.py").decode()
    unrelated = make_patch(tmp_path / "docs.patch", "vllm/version.py", old, old + "\n# unrelated\n")
    config = write_config(
        tmp_path,
        [shipped_branch("main"), {"name": "docs-only", "ref": "main", "patches": [str(unrelated)]}],
    )
    (tmp_path / "a-directory").mkdir()
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / where))
    code = run_cli("gate", "-c", config, "--base", "main", "--head", "docs-only", "--out", tmp_path)
    captured = capsys.readouterr()
    assert code == 0 and "skipped" in captured.out
    assert "could not append the job summary" in captured.err and where in captured.err
    assert "Traceback" not in captured.err
