"""`difftest gate` through the CLI on the shipped branches (slow: real vLLM)."""

from __future__ import annotations

import json

import pytest

from difftest.build.refs import read_blob
from tests.e2e.cli_helpers import run_cli
from tests.factories import BASE_TAG, ROOT, shipped_branch, write_config
from tests.patching import make_patch

pytestmark = pytest.mark.slow

SHIPPED = ROOT / "branches.yaml"


def test_gate_fails_on_the_56195_style_head_and_prints_json_for_scripts(tmp_path, capsys):
    code = run_cli("gate", "-c", SHIPPED, "--base", "main", "--head", "pr-56195-style", "--tier", "scheduler",
                   "--format", "json", "--out", tmp_path)
    document = json.loads(capsys.readouterr().out)
    assert code == document["exit_code"] == 1
    assert document["gate"]["worse"] and (document["base"], document["head"]) == ("main", "pr-56195-style")
    broken = [f for f in document["gate"]["findings"] if f["kind"] == "broken"]
    assert {f["scenario"] for f in broken} == {"mixed-batch-invalid-async"}
    assert {r["branch"] for r in document["results"]} == {"main", "pr-56195-style"}
    summary = (tmp_path / "gate.md").read_text()  # the Markdown summary is written whatever is printed
    assert summary.startswith("## ❌ difftest gate") and "mixed-batch-invalid-async" in summary


@pytest.mark.parametrize("reading", ["strict", "lenient"])
def test_gate_passes_the_56137_style_head_and_explains_the_residual(tmp_path, capsys, reading):
    code = run_cli("gate", "-c", SHIPPED, "--base", "main", "--head", "pr-56137-style",
                   "--tier", "scheduler", "--reading", reading, "--out", tmp_path)
    printed = capsys.readouterr().out  # piped: Markdown, as written to gate.md
    assert printed.strip() == (tmp_path / "gate.md").read_text().strip()
    # Not worse than main under either reading: it fixes truncation, and the strict-reading
    # residual (the all-invalid request counted as a draft) is one main has too.
    assert code == 0, printed
    assert reading in printed
    assert "eos-in-accepted-drafts" in printed  # listed among the improvements
    residual = printed.split("Still differs from the oracle, as on the base")[-1].split("###")[0]
    if reading == "strict":
        assert "grammar-all-invalid-async" in residual and "num\\_drafts" in residual
    else:
        assert "Still differs from the oracle" not in printed


def test_gate_skips_when_no_stats_path_file_changes(tmp_path, fixture_repo, capsys):
    old = read_blob(fixture_repo, BASE_TAG, "vllm/version.py").decode()
    unrelated = make_patch(tmp_path / "docs.patch", "vllm/version.py", old, old + "\n# unrelated change\n")
    config = write_config(tmp_path, [shipped_branch("main"), {"name": "docs-only", "ref": "main", "patches": [str(unrelated)]}])
    assert run_cli("gate", "-c", config, "--base", "main", "--head", "docs-only", "--out", tmp_path) == 0
    assert "skipped" in capsys.readouterr().out
