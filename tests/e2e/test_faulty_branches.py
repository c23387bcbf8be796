"""Branches that fail in every way a branch can, next to main, through the CLI (slow: real vLLM).

Each faulty branch is a real patch on the fixture repository. Whatever it does,
it never reads as a pass, main's results are kept, and every report is written.
A branch whose own code crashes inside vLLM where main completes reads
`broken` (exit 1); one that cannot be measured reads `error`.

The config lives in a tmp folder, outside the repository, without
`scenarios_dir`: the scenarios come from the package.
"""

from __future__ import annotations

import re

import pytest

from difftest import tiers
from difftest.build.workspace import prepare
from difftest.core.config import load_config
from difftest.run.context import RunContext, default_baseline
from difftest.run.pipeline import measure_tier
from tests.e2e.cli_helpers import (
    CONTROL,
    INIT_MARKER,
    METRICS,
    SCHEDULER,
    assert_main_intact,
    by_branch,
    capture_stderr,
    control_beside_main,
    faulty_config,
    results_of,
    run_cli,
)
from tests.factories import ROOT, shipped_branch, write_config
from tests.patching import binary_patch, insert_after, make_patch, prepend

pytestmark = pytest.mark.slow


#: Branch code that rewrites the probe's step records in its own process (the host must reject the
#: key).
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


#: Branch code that crashes inside vLLM's scheduler on every step, with text no report may carry
#: raw.
GARBLED = (
    '        raise ValueError("planted \\udcff crash \\x00 with \\x1b[31mcontrol characters")\n'
)
#: Branch code that, when the probe exits, appends a "pass" record for every run and a trailer, as
#: the probe would write them but without the nonce (the branch cannot know it).
FORGE = (
    "import atexit as _atexit, json as _json, os as _os\n"
    "def _link(fd):\n"
    "    try:\n"
    "        return _os.readlink(f'/proc/self/fd/{fd}')\n"
    "    except OSError:\n"
    "        return ''\n"
    # The descriptor the host opened for its records, kept past the probe's own close.
    "_kept = _os.dup(next(int(f) for f in _os.listdir('/proc/self/fd') "
    "if _link(f).endswith('-runs.jsonl')))\n"
    "def _forge():\n"
    "    with open(_kept, 'a') as f:\n"
    "        for label in ('order:a',):\n"
    "            f.write(_json.dumps({'kind': 'run', 'scenario': 'eos-on-bonus', 'label': label, "
    "'status': 'ok'}) + '\\n')\n"
    "        f.write(_json.dumps({'kind': 'trailer', 'runs': 1}) + '\\n')\n"
    "_atexit.register(_forge)\n"
)
#: Branch code that makes the probe write every run record twice (with the real nonce).
TWICE = (
    "import difftest.probe.protocol as _protocol\n"
    "_run = _protocol.RecordWriter.run\n"
    "_protocol.RecordWriter.run = lambda self, *a: (_run(self, *a), _run(self, *a))[0]\n"
)

#: The tests of the shared faulty run go to one worker, so it runs once (`--dist loadgroup`).
faulty = pytest.mark.xdist_group("faulty-run")


@pytest.fixture(scope="session")
def faulty_run(tmp_path_factory, fixture_repo):
    """One `run -k CONTROL` of main beside ten faulty branches (they run in parallel, as in real
    use)."""
    tmp = tmp_path_factory.mktemp("faulty")
    patches = {
        "broken": prepend(
            tmp / "broken.patch",
            fixture_repo,
            SCHEDULER,
            'raise ImportError("difftest: planted import failure")',
        ),
        "native": make_patch(
            tmp / "native.patch", "csrc/cache_kernels.cu", "", "// changes a kernel\n"
        ),
        "sofile": binary_patch(tmp / "so.patch", "vllm/_C.abi3.so", b"\x7fELF" + bytes(range(256))),
        "blob": binary_patch(
            tmp / "blob.patch", "vllm/model_executor/weights.bin", bytes(range(256)) * 4
        ),
        "kernel": make_patch(
            tmp / "kernel.patch", "vllm/attention/ops/planted.cpp", "", "// a kernel\n"
        ),
        "half": insert_after(
            tmp / "half.patch",
            fixture_repo,
            METRICS,
            "        self.num_accepted_tokens += num_accepted_tokens\n",
            "        self.num_accepted_tokens += 0.5\n",
        ),
        "extra": prepend(tmp / "extra.patch", fixture_repo, METRICS, TAMPER),
        "quit": insert_after(tmp / "quit.patch", fixture_repo, SCHEDULER, INIT_MARKER, QUIT),
        "garbled": insert_after(
            tmp / "garbled.patch",
            fixture_repo,
            SCHEDULER,
            "        self.current_step += 1\n",
            GARBLED,
        ),
        "forged": prepend(tmp / "forged.patch", fixture_repo, SCHEDULER, FORGE),
        "twice": prepend(tmp / "twice.patch", fixture_repo, METRICS, TWICE),
    }
    branches = [shipped_branch("main")] + [
        {"name": n, "ref": "main", "patches": [str(p)]} for n, p in patches.items()
    ]
    out = tmp / "out"
    with capture_stderr() as err:
        code = control_beside_main(write_config(tmp, branches), out)
    return code, out, err.getvalue()


@faulty
def test_the_run_of_faulty_branches_kept_main_and_wrote_every_report(faulty_run):
    code, out, log = faulty_run
    assert (
        code == 1
    )  # `garbled` and `quit` are broken; every other faulty branch could not be measured
    assert_main_intact(out)
    verdicts = {r["branch"]: r["verdict"] for r in results_of(out)}
    assert {b for b, v in verdicts.items() if v == "broken"} == {"garbled", "quit"}
    assert {b for b, v in verdicts.items() if v == "pass"} == {"main"}
    # Eight probes, as many at once as the cores and the memory available allow
    # (`run.probes.capacity`).
    assert "scheduler tier: 8 branch probe(s), " in log and "MB per probe" in log


@faulty
def test_a_crash_inside_vllm_where_main_completes_is_broken_naming_where(faulty_run):
    _, out, _ = faulty_run
    garbled = by_branch(out, "garbled")
    assert len(garbled) == 4 and all(
        r["verdict"] == "broken" and r["error"] is None for r in garbled
    )
    detail = garbled[0]["violations"][0]["detail"]
    assert detail.startswith(
        "crashed in vLLM: ValueError: planted \ufffd crash \ufffd with \ufffd[31mcontrol characters"
    )
    assert "at vllm/v1/core/sched/scheduler.py:" in detail and "in schedule" in detail
    assert re.search(r"\(main completes this run in \d+\.\d\d s\)$", detail), detail


@faulty
def test_text_from_a_branch_never_reaches_a_report_raw(faulty_run):
    """The lone surrogate, NUL and ESC of `garbled`'s message: cleaned everywhere, every report
    written."""
    _, out, _ = faulty_run
    for name in ("report.md", "report.html", "junit.xml", "evidence.json"):
        text = (out / name).read_text(encoding="utf-8")
        assert "planted" in text, name
        assert not any(c in text for c in ("\x00", "\x1b", "\udcff")), name
    raw = (out / "probe" / "garbled-scheduler-runs.jsonl").read_text()
    assert "\\udcff" in raw  # the probe's own record still says what the branch raised


@faulty
def test_compiled_and_binary_files_are_refused_like_native_code(faulty_run):
    _, out, _ = faulty_run
    report = (out / "report.md").read_text()
    for branch, path, what in (
        ("sofile", "vllm/_C.abi3.so", "native code"),
        ("blob", "vllm/model_executor/weights.bin", "binary files"),  # data, not code (#29.5)
        ("kernel", "vllm/attention/ops/planted.cpp", "native code"),
    ):
        refused = by_branch(out, branch)
        assert refused and all(
            r["verdict"] == "error" and f"{what} ({path})" in r["error"] for r in refused
        ), branch
        # The one-line summaries keep the problem, not only its fix (#29, case 5).
        assert f"{what} ({path})" in report, branch


@faulty
def test_forged_records_make_the_output_untrusted(faulty_run):
    """The branch appended "pass" records and a trailer: without the nonce, nothing of the output
    counts."""
    _, out, _ = faulty_run
    forged = by_branch(out, "forged")
    assert len(forged) == 4
    assert all(
        r["verdict"] == "error" and "does not carry this probe's nonce" in r["error"]
        for r in forged
    )


@faulty
def test_duplicate_records_are_an_error_not_a_crash(faulty_run):
    _, out, _ = faulty_run
    twice = by_branch(out, "twice")
    assert len(twice) == 4 and all(
        r["verdict"] == "error" and "duplicate records" in r["error"] for r in twice
    )


@faulty
def test_a_branch_that_fails_to_import_reads_error(faulty_run):
    _, out, _ = faulty_run
    errors = by_branch(out, "broken")
    assert errors and all(r["verdict"] == "error" for r in errors)
    # The cell shows the exception's last line, not "Traceback (most recent call last):".
    assert all(r["error"].endswith("ImportError: difftest: planted import failure") for r in errors)
    junit = (out / "junit.xml").read_text()
    assert "<error" in junit and "planted import failure" in junit


@faulty
def test_a_branch_that_cannot_be_built_reads_error(faulty_run):
    _, out, _ = faulty_run
    refused = by_branch(out, "native")
    assert refused and all(r["verdict"] == "error" and "native code" in r["error"] for r in refused)


@faulty
def test_a_non_integer_counter_is_an_error_naming_the_field(faulty_run):
    """The branch adds half a token to every accepted count: its records cannot be validated."""
    _, out, _ = faulty_run
    half = by_branch(out, "half")
    assert half and all(r["verdict"] == "error" for r in half)
    assert all("invalid" in r["error"] and "num_accepted_tokens" in r["error"] for r in half)


@faulty
def test_a_record_with_an_unknown_key_is_an_error(faulty_run):
    _, out, _ = faulty_run
    extra = by_branch(out, "extra")
    assert extra and all(r["verdict"] == "error" and "surprise" in r["error"] for r in extra)


@faulty
def test_a_probe_that_exits_0_without_its_trailer_keeps_what_it_reported(faulty_run):
    """The branch's own code ended its process: the runs it never reported are broken (main
    completes them); the two it reported before keep their verdicts."""
    _, out, _ = faulty_run
    results = by_branch(out, "quit")
    assert [r["verdict"] for r in results[:2]] == ["pass", "pass"]
    lost = results[2:]
    assert lost and all(r["verdict"] == "broken" for r in lost)
    assert all(
        r["violations"][0]["detail"].startswith(
            "its probe exited without its trailer before reporting this run"
        )
        for r in lost
    )


@faulty
def test_show_explains_runs_without_steps_instead_of_failing(faulty_run, capsys):
    """A branch with no probe output, one whose records were rejected, and one whose probe quit
    early."""
    _, out, _ = faulty_run
    config = out.parent / "branches.yaml"
    assert run_cli("show", "-c", config, CONTROL, "--branch", "broken", "--out", out) == 0
    assert "could not be measured, no steps were recorded" in " ".join(
        capsys.readouterr().out.split()
    )
    assert run_cli("show", "-c", config, CONTROL, "--branch", "half", "--out", out) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert "no steps to show" in printed and "num_accepted_tokens" in printed
    assert run_cli("show", "-c", config, CONTROL, "--branch", "quit", "--out", out) == 0
    assert "without its trailer" in " ".join(capsys.readouterr().out.split())
    assert (
        run_cli("show", "-c", config, CONTROL, "--out", out) == 0
    )  # every branch that does not pass
    printed = capsys.readouterr().out
    assert all(f"· {name} ·" in printed for name in ("broken", "native", "half", "extra", "quit"))
    assert "· main ·" not in printed


def test_a_hanging_probe_is_killed_and_reported(tmp_path, fixture_repo):
    """Alone (no main beside it), so the probe's time limit can be short."""
    patch = prepend(
        tmp_path / "hang.patch", fixture_repo, SCHEDULER, "import time; time.sleep(3600)"
    )
    config = faulty_config(tmp_path, "hang", patch, timeouts={"probe_s": 5})
    out = tmp_path / "out"
    assert (
        run_cli("run", "-c", config, "--tier", "scheduler", "-k", CONTROL, "--out", out, "hang")
        == 3
    )
    hung = by_branch(out, "hang")
    assert hung and all(
        r["verdict"] == "error" and "timed out after 5 s" in r["error"] for r in hung
    )


def test_a_probe_that_crashes_midway_keeps_the_runs_it_finished(tmp_path, fixture_repo):
    """The branch's scheduler kills its own process when it is built with k = 5 (long-random-k5 runs
    last)."""
    crash = (
        "        if vllm_config.speculative_config.num_speculative_tokens == 5:\n"
        "            import os, sys; sys.stderr.write('planted crash\\n'); sys.stderr.flush(); "
        "os._exit(7)\n"
    )
    patch = insert_after(tmp_path / "crash.patch", fixture_repo, SCHEDULER, INIT_MARKER, crash)
    out = tmp_path / "out"
    config = faulty_config(tmp_path, "crash", patch)
    assert (
        run_cli("run", "-c", config, "--tier", "scheduler", "-k", "long-random", "--out", out) == 1
    )
    crashed = by_branch(out, "crash")
    verdicts = {
        s: {r["verdict"] for r in crashed if r["scenario"] == s}
        for s in ("long-random-k1", "long-random-k3")
    }
    assert (
        verdicts["long-random-k1"]
        and "error" not in verdicts["long-random-k1"] | verdicts["long-random-k3"]
    )
    # The branch's own code killed its process where main completes the same runs: broken, saying
    # how.
    lost = [r for r in crashed if r["scenario"] == "long-random-k5"]
    assert lost and all(
        r["verdict"] == "broken"
        and r["violations"][0]["detail"].startswith(
            "its probe exited with code 7 (planted crash) before reporting this run (main "
            "completes this run"
        )
        for r in lost
    )


def test_a_hanging_run_times_out_and_the_next_scenarios_still_run(tmp_path, fixture_repo):
    """The branch's AsyncScheduler never finishes constructing; sync scenarios after it must still
    run, and the hung run reads broken, since main completes it."""
    hang = (
        "        if type(self).__name__ == 'AsyncScheduler':\n"
        "            import time; time.sleep(3600)\n"
    )
    patch = insert_after(tmp_path / "hang.patch", fixture_repo, SCHEDULER, INIT_MARKER, hang)
    # run_s: far above main's slowest run (about 0.5 s; a busy machine may take several), far below
    # the hang.
    config = faulty_config(tmp_path, "hang-async", patch, timeouts={"probe_s": 300, "run_s": 15})
    out = tmp_path / "out"
    # grammar-all-invalid-async (async, 1 run) sorts before grammar-trim-sync (sync, 4 runs).
    assert run_cli("run", "-c", config, "--tier", "scheduler", "-k", "grammar", "--out", out) == 1
    results = by_branch(out, "hang-async")
    hung = [r for r in results if r["scenario"] == "grammar-all-invalid-async"]
    # main completes that run: hanging in the branch's own scheduler is broken, not "could not
    # measure".
    assert hung and all(r["verdict"] == "broken" for r in hung)
    assert all(
        r["violations"][0]["detail"].startswith(
            "did not finish: RunTimeout: run exceeded its time limit of 15 s"
        )
        and re.search(r"\(main completes this run in \d+\.\d\d s\)$", r["violations"][0]["detail"])
        for r in hung
    )

    after = [r for r in results if r["scenario"] == "grammar-trim-sync"]
    assert len(after) == 4 and {r["verdict"] for r in after} == {"pass"}


@pytest.mark.parametrize("jobs, overlap", [(None, True), (1, False)])
def test_branches_run_in_parallel_unless_jobs_is_one(tmp_path, jobs, overlap):
    config = load_config(ROOT / "branches.yaml")
    workspace = prepare(config, ["main", "pr-56137-style"])
    tier = tiers.get("scheduler")
    scenarios = [s for s in tier.load(config.scenarios_dir / tier.folder) if s.name == CONTROL]
    context = RunContext(workspace, default_baseline(workspace), out=tmp_path, jobs=jobs)
    runs = measure_tier(context, tier, scenarios)
    (a, b) = runs.values()
    assert a.error is None and b.error is None and a.runs and b.runs
    overlapped = max(a.started_at, b.started_at) < min(a.ended_at, b.ended_at)
    assert overlapped is overlap


#: DraftTokenIds gains #54054's field, and nothing reads it: the scheduler still schedules the
#: zero-fill.
FLAG_ONLY_MARKER = "    # num_reqs x num_draft_tokens\n    draft_token_ids: list[list[int]]\n"


def test_a_branch_that_declares_the_skip_flag_but_ignores_it_diverges_like_main(
    tmp_path, fixture_repo
):
    """The probe sets the flag because the field exists; the verdict comes from what the scheduler
    does."""
    patch = insert_after(
        tmp_path / "flag-only.patch",
        fixture_repo,
        "vllm/v1/outputs.py",
        FLAG_ONLY_MARKER,
        "    drafting_skipped: bool = False\n",
    )
    out = tmp_path / "out"
    config = faulty_config(tmp_path, "flag-only", patch)
    assert (
        run_cli("run", "-c", config, "--tier", "scheduler", "-k", "drafter-skip", "--out", out) == 1
    )
    main_results, flagged = by_branch(out, "main"), by_branch(out, "flag-only")
    assert [r["verdict"] for r in flagged] == [
        r["verdict"] for r in main_results
    ] and "diverge" in {r["verdict"] for r in flagged}
    assert [r["measured"]["num_drafts"] for r in flagged] == [
        r["measured"]["num_drafts"] for r in main_results
    ]


def test_probes_run_as_many_at_a_time_as_the_memory_holds(tmp_path, monkeypatch):
    """With room for one scheduler probe (the memory reading is the one value faked: this machine
    has plenty), two branches run one after the other, and their results are the usual ones."""
    import difftest.run.pipeline as pipeline

    monkeypatch.setattr(
        pipeline, "available_memory_mb", lambda: 1.2 * tiers.get("scheduler").probe_memory_mb
    )
    with capture_stderr() as log:
        code = run_cli(
            "run",
            "-c",
            ROOT / "branches.yaml",
            "--tier",
            "scheduler",
            "-k",
            CONTROL,
            "--out",
            tmp_path,
            "main",
            "pr-56137-style",
        )
    assert code == 0
    assert "scheduler tier: 2 branch probe(s), 1 at a time (" in log.getvalue()
    assert {r["verdict"] for r in results_of(tmp_path)} == {"pass"}
