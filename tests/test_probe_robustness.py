"""The probe keeps going when a scenario raises, and writes the error with its traceback (slow)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from difftest.tiers.scheduler.scenario import load_scenarios

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]


def test_raising_scenario_is_an_error_run_and_others_run(branch_python, probe_job, tmp_path: Path) -> None:
    from difftest.run.runner import probe_environ

    good = [s for s in load_scenarios(ROOT / "scenarios") if s.name in ("eos-on-bonus", "eos-in-accepted-drafts")]
    job = json.loads(probe_job(good).read_text())
    broken = {  # bypasses the loader on purpose: the target runs out mid-run, inside the probe
        "name": "broken",
        "file": "broken.yaml",
        "data": {"name": "broken", "k": 2, "draft_path": "sync", "requests": [
            {"id": "r", "prompt": "hi", "max_tokens": 50, "target": "abc",
             "drafter": {"kind": "scripted", "steps": [], "then": "perfect"}}]},
    }
    job["scenarios"].insert(1, broken)
    job_file, out = tmp_path / "job.json", tmp_path / "runs.jsonl"
    job_file.write_text(json.dumps(job))
    proc = subprocess.run(
        [str(branch_python("main")), "-m", "difftest.probe", "--job", str(job_file), "--out", str(out)],
        capture_output=True, text=True, timeout=600, env=probe_environ(),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert lines[0]["kind"] == "header" and "num_drafts" in lines[0]["spec_decoding_stats_fields"]
    runs = [line for line in lines[1:] if line["kind"] == "run"]
    errors = [r for r in runs if r["status"] == "error"]
    assert [r["scenario"] for r in errors] == ["broken"]
    assert "Traceback" in errors[0]["error"] and "too short" in errors[0]["error"]
    ok = {r["scenario"] for r in runs if r["status"] == "ok"}
    assert ok == {"eos-on-bonus", "eos-in-accepted-drafts"}


def test_vllm_import_failure_exits_nonzero(tmp_path: Path) -> None:
    import sys

    job = tmp_path / "job.json"
    job.write_text(json.dumps({"tier": "scheduler", "work_dir": str(tmp_path), "scenarios": []}))
    shadow = tmp_path / "shadow" / "vllm"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('broken vllm for the test')\n")
    proc = subprocess.run(
        [sys.executable, "-m", "difftest.probe", "--job", str(job), "--out", str(tmp_path / "o.jsonl")],
        capture_output=True, text=True, timeout=120,
        env={"PYTHONPATH": f"{shadow.parent}:{ROOT}", "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode != 0
    assert "broken vllm for the test" in proc.stderr
