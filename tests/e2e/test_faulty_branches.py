"""Branches that fail in every way a branch can, next to main, through the CLI (slow: real vLLM).

Each faulty branch is a real patch on the fixture repository. Whatever it does,
it never reads as a pass, main's results are kept, and every report is written.
"""

from __future__ import annotations

import pytest

from difftest import tiers
from difftest.build.workspace import prepare
from difftest.core.config import load_config
from difftest.run.pipeline import measure_tier
from tests.e2e.cli_helpers import (
    CONTROL,
    INIT_MARKER,
    METRICS,
    SCHEDULER,
    assert_main_intact,
    by_branch,
    control_beside_main,
    faulty_config,
    run_cli,
)
from tests.factories import ROOT, shipped_branch, write_config
from tests.patching import insert_after, make_patch, prepend

pytestmark = pytest.mark.slow


#: Branch code that rewrites the probe's step records in its own process (the host must reject the key).
TAMPER = (
    "import difftest.probe.protocol as _protocol\n"
    "_step_record = _protocol.step_record\n"
    "_protocol.step_record = lambda *a, **k: {**_step_record(*a, **k), 'surprise': 1}\n"
)
#: Branch code that ends the process quietly (exit code 0) when the third scheduler is built.
QUIT = (
    "        import builtins\n"
    "        builtins._difftest_built = getattr(builtins, '_difftest_built', 0) + 1\n"
    "        if builtins._difftest_built == 3:\n"
    "            import os; os._exit(0)\n"
)


#: The tests of the shared faulty run go to one worker, so it runs once (`--dist loadgroup`).
faulty = pytest.mark.xdist_group("faulty-run")


@pytest.fixture(scope="module")
def faulty_run(tmp_path_factory, fixture_repo):
    """One `run -k CONTROL` of main beside five faulty branches (they run in parallel, as in real use)."""
    tmp = tmp_path_factory.mktemp("faulty")
    patches = {
        "broken": prepend(tmp / "broken.patch", fixture_repo, SCHEDULER, 'raise ImportError("difftest: planted import failure")'),
        "native": make_patch(tmp / "native.patch", "csrc/cache_kernels.cu", "", "// changes a kernel\n"),
        "half": insert_after(tmp / "half.patch", fixture_repo, METRICS, "        self.num_accepted_tokens += num_accepted_tokens\n",
                             "        self.num_accepted_tokens += 0.5\n"),
        "extra": prepend(tmp / "extra.patch", fixture_repo, METRICS, TAMPER),
        "quit": insert_after(tmp / "quit.patch", fixture_repo, SCHEDULER, INIT_MARKER, QUIT),
    }
    branches = [shipped_branch("main")] + [{"name": n, "ref": "main", "patches": [str(p)]} for n, p in patches.items()]
    out = tmp / "out"
    code = control_beside_main(write_config(tmp, branches), out)
    return code, out


@faulty
def test_the_run_of_faulty_branches_could_not_measure_and_kept_main(faulty_run):
    code, out = faulty_run
    assert code == 3
    assert_main_intact(out)


@faulty
def test_a_branch_that_fails_to_import_reads_error(faulty_run):
    _, out = faulty_run
    errors = by_branch(out, "broken")
    assert errors and all(r["verdict"] == "error" for r in errors)
    # The cell shows the exception's last line, not "Traceback (most recent call last):".
    assert all(r["error"].endswith("ImportError: difftest: planted import failure") for r in errors)
    junit = (out / "junit.xml").read_text()
    assert "<error" in junit and "planted import failure" in junit


@faulty
def test_a_branch_that_cannot_be_built_reads_error(faulty_run):
    _, out = faulty_run
    refused = by_branch(out, "native")
    assert refused and all(r["verdict"] == "error" and "native code" in r["error"] for r in refused)


@faulty
def test_a_non_integer_counter_is_an_error_naming_the_field(faulty_run):
    """The branch adds half a token to every accepted count: its records cannot be validated."""
    _, out = faulty_run
    half = by_branch(out, "half")
    assert half and all(r["verdict"] == "error" for r in half)
    assert all("invalid" in r["error"] and "num_accepted_tokens" in r["error"] for r in half)


@faulty
def test_a_record_with_an_unknown_key_is_an_error(faulty_run):
    _, out = faulty_run
    extra = by_branch(out, "extra")
    assert extra and all(r["verdict"] == "error" and "surprise" in r["error"] for r in extra)


@faulty
def test_a_probe_that_exits_0_without_its_trailer_keeps_what_it_reported(faulty_run):
    _, out = faulty_run
    results = by_branch(out, "quit")
    assert [r["verdict"] for r in results[:2]] == ["pass", "pass"]
    lost = results[2:]
    assert lost and all(r["verdict"] == "error" and "without its trailer" in r["error"] for r in lost)


def test_a_hanging_probe_is_killed_and_reported(tmp_path, fixture_repo):
    """Alone (no main beside it), so the probe's time limit can be short."""
    patch = prepend(tmp_path / "hang.patch", fixture_repo, SCHEDULER, "import time; time.sleep(3600)")
    config = faulty_config(tmp_path, "hang", patch, timeouts={"probe_s": 5})
    out = tmp_path / "out"
    assert run_cli("run", "-c", config, "--tier", "scheduler", "-k", CONTROL, "--out", out, "hang") == 3
    hung = by_branch(out, "hang")
    assert hung and all(r["verdict"] == "error" and "timed out after 5 s" in r["error"] for r in hung)


def test_a_probe_that_crashes_midway_keeps_the_runs_it_finished(tmp_path, fixture_repo):
    """The branch's scheduler kills its own process when it is built with k = 5 (long-random-k5 runs last)."""
    crash = (
        "        if vllm_config.speculative_config.num_speculative_tokens == 5:\n"
        "            import os, sys; sys.stderr.write('planted crash\\n'); sys.stderr.flush(); os._exit(7)\n"
    )
    patch = insert_after(tmp_path / "crash.patch", fixture_repo, SCHEDULER, INIT_MARKER, crash)
    out = tmp_path / "out"
    config = faulty_config(tmp_path, "crash", patch)
    assert run_cli("run", "-c", config, "--tier", "scheduler", "-k", "long-random", "--out", out) == 1
    crashed = by_branch(out, "crash")
    verdicts = {s: {r["verdict"] for r in crashed if r["scenario"] == s} for s in ("long-random-k1", "long-random-k3")}
    assert verdicts["long-random-k1"] and "error" not in verdicts["long-random-k1"] | verdicts["long-random-k3"]
    errors = [r for r in crashed if r["scenario"] == "long-random-k5"]
    assert errors and all(r["verdict"] == "error" and r["error"] == "probe exited with code 7: planted crash" for r in errors)


def test_a_hanging_run_times_out_and_the_next_scenarios_still_run(tmp_path, fixture_repo):
    """The branch's AsyncScheduler never finishes constructing; sync scenarios after it must still run."""
    hang = "        if type(self).__name__ == 'AsyncScheduler':\n            import time; time.sleep(3600)\n"
    patch = insert_after(tmp_path / "hang.patch", fixture_repo, SCHEDULER, INIT_MARKER, hang)
    config = faulty_config(tmp_path, "hang-async", patch, timeouts={"probe_s": 300, "run_s": 3})
    out = tmp_path / "out"
    # grammar-all-invalid-async (async, 1 run) sorts before grammar-trim-sync (sync, 4 runs).
    assert run_cli("run", "-c", config, "--tier", "scheduler", "-k", "grammar", "--out", out) == 1
    results = by_branch(out, "hang-async")
    hung = [r for r in results if r["scenario"] == "grammar-all-invalid-async"]
    assert hung and all(r["verdict"] == "error" and "time limit of 3 s" in r["error"] for r in hung)
    after = [r for r in results if r["scenario"] == "grammar-trim-sync"]
    assert len(after) == 4 and {r["verdict"] for r in after} == {"pass"}


@pytest.mark.parametrize("jobs, overlap", [(None, True), (1, False)])
def test_branches_run_in_parallel_unless_jobs_is_one(tmp_path, jobs, overlap):
    config = load_config(ROOT / "branches.yaml")
    workspace = prepare(config, ["main", "pr-56137-style"])
    tier = tiers.get("scheduler")
    scenarios = [s for s in tier.load(config.scenarios_dir / tier.folder) if s.name == CONTROL]
    runs = measure_tier(workspace, tier, scenarios, tmp_path, jobs)
    (a, b) = runs.values()
    assert a.error is None and b.error is None and a.runs and b.runs
    overlapped = max(a.started_at, b.started_at) < min(a.ended_at, b.ended_at)
    assert overlapped is overlap
