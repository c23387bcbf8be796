"""The probe keeps going when a run raises, and says what failed and where (slow: real vLLM)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from difftest import tiers
from difftest.probe.protocol import PROTOCOL_VERSION
from difftest.run.pipeline import make_job
from difftest.run.probes.runner import run_probe
from tests.factories import ROOT

pytestmark = pytest.mark.slow


def test_a_raising_run_is_an_error_with_its_last_line_and_the_others_run(
    shipped_scenarios, workspace, tmp_path: Path
) -> None:
    good = [
        s
        for s in shipped_scenarios("scheduler")
        if s.name in ("eos-on-bonus", "eos-in-accepted-drafts")
    ]
    job = make_job(tiers.get("scheduler"), good, run_timeout_s=120)
    broken = {  # bypasses the loader on purpose: the target runs out mid-run, inside the probe
        "name": "broken",
        "file": "broken.yaml",
        "data": {
            "name": "broken",
            "k": 2,
            "draft_path": "sync",
            "seed": 0,
            "requests": [
                {
                    "id": "r",
                    "prompt": "hi",
                    "max_tokens": 50,
                    "target": "abc",
                    "drafter": {"kind": "scripted", "steps": [], "then": "perfect"},
                }
            ],
        },
        "runs": [{"label": "order:r", "order": ["r"], "role": "batch"}],
    }
    job["scenarios"].insert(1, broken)
    delivered = run_probe(
        "main", workspace.branch("main").env.python, job, "scheduler", tmp_path, 600
    )
    assert delivered.error is None, delivered.log_tail
    assert (
        delivered.header is not None
        and "num_drafts" in delivered.header.info["spec_decoding_stats_fields"]
    )
    failed = [r for r in delivered.runs if r.status != "ok"]
    assert [r.scenario for r in failed] == ["broken"]
    failure = failed[0].failure
    assert failure is not None and failure.kind == "exception" and failure.origin == "probe"
    assert failure.summary.startswith("ScriptError: target stream too short")
    assert "script.py" in failure.where and "Traceback" in failure.traceback
    assert {r.scenario for r in delivered.runs if r.status == "ok"} == {
        "eos-on-bonus",
        "eos-in-accepted-drafts",
    }


def test_a_vllm_that_fails_to_import_exits_3_with_the_reason(tmp_path: Path) -> None:
    job = tmp_path / "job.json"
    job.write_text(
        json.dumps(
            {
                "protocol": PROTOCOL_VERSION,
                "entry": "scheduler",
                "work_dir": str(tmp_path),
                "run_timeout_s": None,
                "scenarios": [],
            }
        )
    )
    shadow = tmp_path / "shadow" / "vllm"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('broken vllm for the test')\n")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "difftest.probe",
            "--job",
            str(job),
            "--out",
            str(tmp_path / "o.jsonl"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": f"{shadow.parent}:{ROOT}", "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 3
    assert proc.stderr.strip().splitlines()[-1] == "ImportError: broken vllm for the test"
    assert not (tmp_path / "o.jsonl").exists()


def test_a_relative_work_folder_is_found_by_the_probe(
    shipped_scenarios, workspace, tmp_path: Path, monkeypatch
) -> None:
    """`difftest run` with the default `--out out`: the probe runs inside that folder, not the
    caller's."""
    monkeypatch.chdir(tmp_path)
    control = [s for s in shipped_scenarios("scheduler") if s.name == "eos-on-bonus"]
    delivered = run_probe(
        "main",
        workspace.branch("main").env.python,
        make_job(tiers.get("scheduler"), control, 120),
        "scheduler",
        Path("out") / "probe",
        600,
    )
    assert delivered.error is None, delivered.log_tail
    assert {r.status for r in delivered.runs} == {"ok"}
