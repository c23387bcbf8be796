"""`difftest coverage` through the CLI on the shipped config (slow: real vLLM, real coverage.py in
the probe)."""

from __future__ import annotations

import json

import pytest

from tests.e2e.cli_helpers import faulty_config, run_cli
from tests.factories import ROOT
from tests.faults.kit import METRICS, TRACER_SWAP
from tests.patching import prepend

pytestmark = pytest.mark.slow

SHIPPED = ROOT / "branches.yaml"
ONE = ["--tier", "scheduler", "-k", "eos-on-bonus"]


def test_the_stats_paths_reach_per_file_and_function_in_every_output(tmp_path, capsys):
    """#48 item 3: the scheduler's reach on one scenario, in 80 columns, coverage.json and pages
    marked as coverage.py's HTML marks them."""
    out = tmp_path / "out"
    assert run_cli("coverage", "-c", SHIPPED, *ONE, "--out", out) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("difftest coverage: main (")
    assert max(len(line) for line in printed.splitlines()) <= 80
    assert "v1/core/ " in printed and "\n  no scenario reaches it " in printed
    body = json.loads((out / "coverage.json").read_text())
    assert body["schema"] == 1 and body["status"] == "ok" and body["tiers"] == ["scheduler"]
    assert body["scenarios"] == 1 and body["traced"] == ["vllm/"]
    files = {f["file"]: f for f in body["files"]}
    scheduler = files["vllm/v1/core/sched/scheduler.py"]
    assert 0 < scheduler["reached"] < scheduler["statements"]
    assert scheduler["unreached"] and scheduler["partial"]
    functions = {f["name"]: f for f in scheduler["functions"]}
    assert functions["Scheduler.update_from_output"]["reached"] > 0
    assert functions["Scheduler.reset_prefix_cache"]["reached"] == 0
    # No scheduler scenario runs the rejection sampler: not run, with the reason.
    sampler = files["vllm/v1/sample/rejection_sampler.py"]
    assert sampler["reached"] == 0 and sampler["reason"] == "no scenario reaches it"
    # The map the gate's skip rule reads: every executed line of vllm/, off the stats path too.
    assert body["executed"]["vllm/sampling_params.py"]
    assert sum(f["reached"] for f in body["files"]) == body["totals"]["reached"]
    index = (out / "coverage" / "index.html").read_text()
    assert 'href="v1--core--sched--scheduler.py.html"' in index
    page = (out / "coverage" / "v1--core--sched--scheduler.py.html").read_text()
    assert 'class="run"' in page and 'class="mis"' in page and 'class="par"' in page
    assert not (out / "coverage" / "v1--sample--rejection_sampler.py.html").exists()
    # The next command clears what this one wrote, pages included.
    assert run_cli("coverage", "-c", SHIPPED, *ONE, "--out", out) == 0
    capsys.readouterr()
    assert (
        len(list((out / "coverage").glob("*.html")))
        == len([f for f in body["files"] if f["reached"]]) + 1
    )


def test_a_branch_that_replaces_the_tracer_reads_coverage_unknown(tmp_path, fixture_repo, capsys):
    """The fault kit's tracer swap: no figure at all, the reason instead, and exit 3."""
    patch = prepend(tmp_path / "swap.patch", fixture_repo, METRICS, TRACER_SWAP)
    config = faulty_config(tmp_path, "swap", patch)
    out = tmp_path / "out"
    assert run_cli("coverage", "-c", config, *ONE, "--out", out, "swap") == 3
    printed = capsys.readouterr().out
    assert (
        "coverage unknown: scheduler tier: the tracer was replaced while the probe ran" in printed
    )
    body = json.loads((out / "coverage.json").read_text())
    assert body["status"] == "unknown" and body["branch"] == "swap"
    assert "stats path" not in printed
