"""`difftest run` and `verify` on the shipped branches, through the CLI (slow: real vLLM).

One scheduler-tier run of the shipped config serves every test here that only
reads its outputs (`shipped_run`); the verify tests re-run it, as a reviewer would.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from difftest.core.evidence import SCHEMA_VERSION
from tests.e2e.cli_helpers import CONTROL, results_of, run_cli
from tests.factories import ROOT, SCENARIOS_DIR, shipped_branch, write_config

#: One worker runs this module's tests, so the shared run happens once (`--dist loadgroup`).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("shipped-run")]

SHIPPED = ROOT / "branches.yaml"


@dataclass(frozen=True)
class ShippedRun:
    code: int
    out: Path
    printed: str

    @property
    def evidence(self) -> dict:
        return json.loads((self.out / "evidence.json").read_text())


@pytest.fixture(scope="module")
def shipped_run(tmp_path_factory) -> ShippedRun:
    """`difftest run --tier scheduler` on the shipped branches.yaml, once for this module."""
    out = tmp_path_factory.mktemp("run") / "out"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = run_cli("run", "-c", SHIPPED, "--tier", "scheduler", "--out", out)
    return ShippedRun(code, out, printed.getvalue())


def test_run_tells_the_known_story_and_writes_every_file(shipped_run):
    assert shipped_run.code == 1
    for name in ("report.md", "report.html", "junit.xml", "evidence.json"):
        assert (shipped_run.out / name).stat().st_size > 0
    evidence = shipped_run.evidence
    assert evidence["schema_version"] == SCHEMA_VERSION and evidence["reading"] == "strict"
    for name, branch in evidence["branches"].items():
        assert len(branch["sha"]) == 40 and branch["fingerprint"]["sha"] == branch["sha"]
        assert branch["fingerprint"]["base"]["wheel_hash"] == evidence["base"]["fingerprint"]["wheel_hash"]
    assert evidence["branches"]["pr-56195-style"]["patches"]["pr-56195-style.patch"]
    assert all(len(s["sha256"]) == 64 for s in evidence["scenarios"].values())

    verdicts: dict[tuple[str, str], set[str]] = {}
    for r in evidence["results"]:
        if r["label"].startswith("order:"):  # the batches (alone runs of a plain request may pass)
            verdicts.setdefault((r["branch"], r["scenario"]), set()).add(r["verdict"])
    for truncation in ("eos-in-accepted-drafts", "stop-token-in-accepted-drafts", "max-tokens-mid-block"):
        assert verdicts[("main", truncation)] == {"diverge"}
        main_counters = {
            d["counter"] for r in evidence["results"] if (r["branch"], r["scenario"]) == ("main", truncation)
            for d in r["differences"]
        }
        assert "num_emitted_tokens" in main_counters and "num_accepted_tokens" not in main_counters
        assert verdicts[("pr-56137-style", truncation)] == {"pass"}
        assert verdicts[("pr-56195-style", truncation)] == {"pass"}
    assert "broken" in verdicts[("pr-56195-style", "mixed-batch-invalid-async")]
    assert "broken" not in {v for (b, _), vs in verdicts.items() if b != "pr-56195-style" for v in vs}
    # The #56137-style residual under the strict reading: the all-invalid request still counts a draft.
    residual = [r for r in evidence["results"] if r["branch"] == "pr-56137-style" and r["verdict"] != "pass"]
    assert residual and {d["counter"] for r in residual for d in r["differences"]} >= {"num_drafts"}
    assert {r["scenario"] for r in residual} == {"grammar-all-invalid-async", "mixed-batch-invalid-async"}


def test_the_scheduler_tier_counts_are_the_known_ones(shipped_run):
    counts: dict[str, dict[str, int]] = {}
    for r in shipped_run.evidence["results"]:
        per = counts.setdefault(r["branch"], {"pass": 0, "diverge": 0, "broken": 0, "error": 0})
        per[r["verdict"]] += 1
    assert counts["pr-56195-style"]["broken"] == 4 and counts["pr-56195-style"]["error"] == 0
    assert counts["pr-56137-style"]["diverge"] == 8 and counts["pr-56137-style"]["broken"] == 0
    assert counts["main"]["broken"] == 0 and counts["main"]["error"] == 0


def test_run_prints_the_tables_and_summary(shipped_run):
    printed = shipped_run.printed
    assert CONTROL in printed and "oracle" in printed and "summary" in printed
    assert all(name in printed for name in ("main", "pr-56137-style", "pr-56195-style"))


def test_evidence_keeps_every_run_with_its_role(shipped_run):
    runs = shipped_run.evidence["runs"]
    assert set(runs) == {"main", "pr-56137-style", "pr-56195-style"}
    roles = {run["role"] for branch_runs in runs.values() for run in branch_runs}
    assert roles == {"batch", "alone"}
    assert all(run["steps"] == [] for branch_runs in runs.values() for run in branch_runs)


def test_run_exits_0_when_everything_passes(tmp_path, capsys):
    assert run_cli("run", "-c", SHIPPED, "--tier", "scheduler", "-k", CONTROL, "--out", tmp_path / "out") == 0
    assert CONTROL in capsys.readouterr().out


def test_verify_reproduces_the_evidence(shipped_run, tmp_path):
    assert run_cli("verify", "-c", SHIPPED, shipped_run.out / "evidence.json", "--out", tmp_path) == 0


def test_verify_reads_the_previous_schema(shipped_run, tmp_path, capsys):
    """An evidence file of schema 1 (results keyed by `order`) still verifies."""
    old = shipped_run.evidence
    old["schema_version"] = "1"
    for result in old["results"]:
        result["order"] = result.pop("label")
        result["explanation"] = result.pop("statement")
        result.pop("duration_s")
    for branch_runs in old["runs"].values():
        for run in branch_runs:
            role = run.pop("role")
            run.pop("failure")
            if role == "reference":
                run["notes"]["role"] = "reference"
    path = tmp_path / "evidence-v1.json"
    path.write_text(json.dumps(old))
    assert run_cli("verify", "-c", SHIPPED, path, "--out", tmp_path / "o") == 0
    assert "identical" in capsys.readouterr().out


def test_verify_catches_a_tampered_result(shipped_run, tmp_path, capsys):
    evidence = shipped_run.evidence
    victim = next(r for r in evidence["results"] if r["branch"] == "main" and r["scenario"] == CONTROL)
    victim["measured"]["num_accepted_tokens"] += 1
    tampered = tmp_path / "evidence.json"
    tampered.write_text(json.dumps(evidence))
    assert run_cli("verify", "-c", SHIPPED, tampered, "--out", tmp_path / "o") == 1
    assert f"main/{CONTROL}/{victim['label']}: measured totals differ" in capsys.readouterr().out


def test_verify_refuses_a_changed_scenario_file(shipped_run, tmp_path, capsys):
    scenarios = tmp_path / "scenarios"
    shutil.copytree(SCENARIOS_DIR, scenarios)
    target = scenarios / "scheduler" / f"{CONTROL}.yaml"
    target.write_text(target.read_text() + "\n# edited\n")
    config = write_config(tmp_path, [shipped_branch(n) for n in ("main", "pr-56137-style", "pr-56195-style")])
    raw = yaml.safe_load(config.read_text())
    raw["scenarios_dir"] = str(scenarios)
    config.write_text(yaml.safe_dump(raw))
    assert run_cli("verify", "-c", config, shipped_run.out / "evidence.json") == 2
    err = capsys.readouterr().err
    assert CONTROL in err and "file changed" in err


def test_verify_refuses_evidence_from_another_base(shipped_run, tmp_path, capsys):
    evidence = shipped_run.evidence
    evidence["base"]["fingerprint"]["wheel_hash"] = "0" * 64
    other = tmp_path / "evidence.json"
    other.write_text(json.dumps(evidence))
    assert run_cli("verify", "-c", SHIPPED, other) == 2
    assert "base wheel_hash differs" in capsys.readouterr().err


def test_verify_refuses_evidence_from_another_probe(shipped_run, tmp_path, capsys):
    evidence = shipped_run.evidence
    evidence["branches"]["main"]["fingerprint"]["probe_digest"] = "f" * 64
    other = tmp_path / "evidence.json"
    other.write_text(json.dumps(evidence))
    assert run_cli("verify", "-c", SHIPPED, other) == 2
    assert "another version of difftest's probe" in capsys.readouterr().err
