"""Probes forked from the warm fork server are the probes fresh interpreters give (slow: real vLLM).

The server is started with the FIRST branch's interpreter (main), so a child
that did not really switch to its own branch would measure main's code: the
PR-style branches' runs, which differ from main's, must come out exactly as
their fresh probes measure them, and each probe must report vLLM from its own
environment's overlay.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from difftest import tiers
from difftest.core.records import ProbeRun
from difftest.run.pipeline import make_job
from difftest.run.runner import run_branches, run_probe, warm_fork_server

pytestmark = pytest.mark.slow

TIER = tiers.get("scheduler")
BRANCHES = ["main", "pr-56137-style", "pr-56195-style"]


def comparable(run: ProbeRun) -> str:
    """A run without what a clock decides: its duration, vLLM's throughput line in the notes, and the
    engine's idle steps while a grammar compiles in the background (how many there are depends on how
    fast the compiler thread is, in a fresh interpreter as in a forked one)."""
    dumped = run.model_dump(mode="json", exclude={"duration_s", "notes"})
    dumped["steps"] = [step for step in dumped["steps"] if step["scheduled"] or step["sampled"]]
    for index, step in enumerate(dumped["steps"]):
        step["step"] = index
    return json.dumps(dumped, sort_keys=True)


def test_forked_probes_measure_what_fresh_probes_measure_each_on_its_own_branch(
    workspace, shipped_scenarios, probe_runs, tmp_path
) -> None:
    job = make_job(TIER, shipped_scenarios("scheduler"), run_timeout_s=120)
    targets = [(name, workspace.branch(name).env.python) for name in BRANCHES]
    forked = run_branches(targets, job, TIER.name, tmp_path, 600, jobs=2, fork=True)
    for name, python in targets:
        delivered = forked[name]
        assert (delivered.launch, delivered.launch_note, delivered.error) == ("forked", "", None), delivered.log_tail
        assert delivered.header is not None and delivered.header.origin is not None
        assert delivered.header.origin.vllm_dir == os.path.realpath(python.parent.parent / "overlay" / "vllm")
        assert delivered.header.origin.executable == str(python)
        assert [comparable(r) for r in delivered.runs] == [comparable(r) for r in probe_runs("scheduler", name)]
    # The branches measure differently, so a child running main's code would have shown.
    for name in BRANCHES[1:]:
        assert [comparable(r) for r in forked[name].runs] != [comparable(r) for r in forked["main"].runs]


def test_where_forking_is_unsafe_every_probe_starts_fresh_and_says_why(
    workspace, shipped_scenarios, tmp_path, monkeypatch
) -> None:
    # OpenBLAS then starts its thread pool when NumPy is imported: a process with threads is not forked.
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "2")
    control = [s for s in shipped_scenarios("scheduler") if s.name == "eos-on-bonus"]
    job = make_job(TIER, control, run_timeout_s=120)
    logged: list[str] = []
    delivered = run_branches([("main", workspace.branch("main").env.python)], job, TIER.name, tmp_path, 600, 1,
                             fork=True, log=logged.append)["main"]
    assert delivered.launch == "fresh" and "threads run after the shared imports" in delivered.launch_note
    assert any("probes start in fresh interpreters" in line and "threads" in line for line in logged)
    assert delivered.error is None and {r.status for r in delivered.runs} == {"ok"}


def copy_env(env: Path, dest: Path) -> Path:
    """A hard-linked copy of a branch environment, to tamper with (files are replaced, never edited)."""
    subprocess.run(["cp", "-al", str(env), str(dest)], check=True)
    return dest


def replace(path: Path, text: str) -> None:
    path.unlink()
    path.write_text(text)


def test_a_probe_whose_vllm_is_not_its_branch_overlay_is_not_trusted(workspace, shipped_scenarios, tmp_path) -> None:
    """An environment whose path finds the base's vLLM before its overlay measures the wrong code."""
    env = copy_env(workspace.branch("pr-56195-style").env.path, tmp_path / "env")
    (pth,) = env.glob("lib/python3*/site-packages/difftest_overlay.pth")
    lines = pth.read_text().splitlines()
    replace(pth, "\n".join([lines[-1], *lines[:-1]]) + "\n")  # the base's site-packages first
    control = [s for s in shipped_scenarios("scheduler") if s.name == "eos-on-bonus"]
    job = make_job(TIER, control, run_timeout_s=120)
    for fork in (True, False):
        delivered = run_branches([("tampered", env / "bin" / "python")], job, TIER.name, tmp_path / str(fork), 600, 1,
                                 fork=fork)["tampered"]
        assert delivered.runs and {r.status for r in delivered.runs} == {"error"}
        reason = delivered.runs[0].error or ""
        assert "imported vLLM from" in reason and "not from its branch environment" in reason, reason


def test_a_branch_that_would_import_a_shared_library_from_elsewhere_is_started_fresh(
    workspace, shipped_scenarios, tmp_path
) -> None:
    """The child checks every shared library against its own branch's path before importing vLLM."""
    env = copy_env(workspace.branch("main").env.path, tmp_path / "env")
    shutil.copytree(workspace.base.site_packages / "cpuinfo", env / "overlay" / "cpuinfo")  # same code, another file
    control = [s for s in shipped_scenarios("scheduler") if s.name == "eos-on-bonus"]
    job = make_job(TIER, control, run_timeout_s=120)
    targets = [("main", workspace.branch("main").env.python), ("shadowing", env / "bin" / "python")]
    delivered = run_branches(targets, job, TIER.name, tmp_path, 600, 2, fork=True)
    assert delivered["main"].launch == "forked"
    shadowing = delivered["shadowing"]
    assert shadowing.launch == "fresh" and "cpuinfo would come from" in shadowing.launch_note, shadowing.launch_note
    assert shadowing.error is None and {r.status for r in shadowing.runs} == {"ok"}


def test_a_forked_probe_past_its_time_limit_is_killed_and_reads_timeout(workspace, shipped_scenarios, tmp_path) -> None:
    control = [s for s in shipped_scenarios("scheduler") if s.name == "eos-on-bonus"]
    job = make_job(TIER, control, run_timeout_s=120)
    python = workspace.branch("main").env.python
    server, why = warm_fork_server(python, TIER.name, tmp_path, 600, 1)
    assert server is not None, why
    try:
        # The server's imports are done; the child's own import of vLLM takes longer than 1 s.
        delivered = run_probe("main", python, job, TIER.name, tmp_path, 1.0, server=server)
    finally:
        server.close()
    assert delivered.launch == "forked" and delivered.timed_out
    assert delivered.error and "timed out" in delivered.error
    assert {r.status for r in delivered.runs} == {"error"}


def test_a_forked_engine_probe_measures_what_a_fresh_one_measures(workspace, shipped_scenarios, probe_runs, tmp_path) -> None:
    """The real in-process engine (model, KV cache, OpenMP) in a child forked after torch was imported."""
    engine = tiers.get("engine")
    job = make_job(engine, shipped_scenarios("engine"), run_timeout_s=120)
    python = workspace.branch("main").env.python
    delivered = run_branches([("main", python)], job, engine.name, tmp_path, 900, 1, fork=True)["main"]
    assert (delivered.launch, delivered.error) == ("forked", None), delivered.log_tail
    assert [comparable(r) for r in delivered.runs] == [comparable(r) for r in probe_runs("engine", "main")]
