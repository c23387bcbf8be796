"""Every hostile branch of the fault kit, through every path a verdict comes by (slow: real vLLM).

One `run -k CONTROL --tier scheduler` of main beside every fault per path:
- `forked`: the default, each probe forked from the tier's fork server;
- `fresh`: `--no-fork`, each probe an interpreter of its own;
- `cached`: a result cache of the kit's own, written by the `forked` path's run and read by a second
  run of the same config (what was clean is reused; the faults are never stored, so they are
  measured again);
- `merged`: `--shard 1/2` and `--shard 2/2` of two scenarios, joined by `difftest merge`;
- `ray`: `--executor ray` on the two-node loopback cluster (`ray_cluster`), the faults placed on
  both nodes in turn: each probe runs on a node and comes back to be read and judged here; one more
  fault there only, a branch that kills the Ray worker running its probe.
On each path the contract is the same (`check_contract`): every fault's runs read what the kit
says, main passes, the exit code is the worst verdict's, every report is whole, and no process a
branch started is left.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from difftest.build.envs.contents import changed_contents
from difftest.run.probes.sandbox import protection
from tests.e2e.cli_helpers import (
    CONTROL,
    INIT_MARKER,
    SCHEDULER,
    capture_stderr,
    run_cli,
)
from tests.factories import ROOT, shipped_branch, write_config
from tests.faults.kit import (
    CONFINED,
    ESCAPED,
    FAULTS,
    KILLS_ITS_RAY_WORKER,
    SKEW_ENV,
    Fault,
    deep_orphan,
    deep_orphan_pids,
    environ_seen,
    escape_targets,
    orphan_pids,
)
from tests.patching import insert_after
from tests.processes import survivors

pytestmark = pytest.mark.slow

#: run_s: far above main's slowest run on a busy machine, short enough for a hung schedule() (once
#: per probe). exit_s: the probe that hangs at exit is killed this long after its trailer.
TIMEOUTS = {"run_s": 8, "exit_s": 3, "probe_s": 300}
#: The faults whose probe never ends cleanly (a hang, an exit code, records it destroys, an import
#: that fails): the result cache never stores them.
NEVER_STORED = (
    "exit-hang",
    "sched-hang",
    "truncate",
    "exit-one",
    "tamper-shared",
    *(() if CONFINED else ("fifo",)),
)
#: The faults whose probe ends cleanly, its runs measured or broken by vLLM's own code the same way
#: each time: stored, then read back by the cached path (so on that path the files they write in
#: their folder, which the forked path's run shares, hold only the forked run's lines).
STORED = (
    "sched-crash",
    "orphan",
    "environ",
    "env-count",
    # Confined, these two cannot reach what they aim at: they measure as main does.
    *(("fifo", "escape") if CONFINED else ()),
)
#: The two scenarios a sharded run splits (one each), both passing on main.
SHARDED = f"{CONTROL} or grammar-trim-sync"
PATHS = ("forked", "fresh", "cached", "merged", "ray")


def _config(tmp: Path, fixture_repo, faults: tuple[Fault, ...] = FAULTS) -> Path:
    branches = [shipped_branch("main")] + [
        {"name": f.name, "ref": "main", "patches": [str(f.patch(tmp, fixture_repo))]}
        for f in faults
    ]
    return write_config(tmp, branches, timeouts=TIMEOUTS)


def _run(config: Path, out: Path, *extra: str, select: str = CONTROL) -> tuple[int, str]:
    with capture_stderr() as err:
        code = run_cli(
            "run", "-c", config, "--tier", "scheduler", "-k", select, "--out", out, *extra
        )
    return code, err.getvalue()


@pytest.fixture(scope="session", params=PATHS)
def path_run(request, tmp_path_factory, fixture_repo):
    """(path, exit code, out folder, log, tmp folder) of one path's run of every fault beside main;
    once per path and process (pytest may set a parametrized module fixture up again when it
    reorders)."""
    return _path_run(request.param, request, tmp_path_factory, fixture_repo)


def _path_run(
    path: str, request, tmp_path_factory, fixture_repo
) -> tuple[str, int, Path, str, Path]:
    if path not in _PATH_RUNS:
        cluster = request.getfixturevalue("ray_cluster") if path == "ray" else None
        # The cached path's first run is the forked path's (which stores into a result cache).
        first = (
            _path_run("forked", request, tmp_path_factory, fixture_repo)
            if path == "cached"
            else None
        )
        _PATH_RUNS[path] = _run_path(path, tmp_path_factory, fixture_repo, cluster, first)
    return _PATH_RUNS[path]


#: Each path's run, by path name (see `path_run`).
_PATH_RUNS: dict[str, tuple[str, int, Path, str, Path]] = {}


def _run_path(
    path: str, tmp_path_factory, fixture_repo, cluster=None, first=None
) -> tuple[str, int, Path, str, Path]:
    if path == "cached":
        # The forked path's run wrote the result cache: the same config (its faults record what
        # they see in that run's folder, which both runs share), run again reading the cache.
        _path, first_code, _out, _log, tmp = first
        code, log = _run_cached(tmp / "branches.yaml", tmp / "cached-out", tmp / "results")
        assert first_code == code
        return path, code, tmp / "cached-out", log, tmp
    tmp = tmp_path_factory.mktemp(f"faults-{path}")
    config = _config(
        tmp, fixture_repo, (*FAULTS, KILLS_ITS_RAY_WORKER) if path == "ray" else FAULTS
    )
    out = tmp / "out"
    if path == "fresh":
        code, log = _run(config, out, "--no-fork")
    elif path == "forked":
        code, log = _run_cached(config, out, tmp / "results")  # which the cached path then reads
    elif path == "ray":
        nodes = ("node_a", "node_b")
        place = [f"{f.name}={nodes[i % 2]}" for i, f in enumerate((*FAULTS, KILLS_ITS_RAY_WORKER))]
        code, log = _run(
            config,
            out,
            "--executor",
            "ray",
            "--ray-address",
            cluster.address,
            *[a for p in ["main=node_a", *place] for a in ("--ray-place", p)],
        )
    else:
        one, _ = _run(config, tmp / "shard1", "--shard", "1/2", select=SHARDED)
        two, _ = _run(config, tmp / "shard2", "--shard", "2/2", select=SHARDED)
        with capture_stderr() as err:
            code = run_cli(
                "merge",
                "-c",
                config,
                tmp / "shard1" / "evidence.json",
                tmp / "shard2" / "evidence.json",
                "--out",
                out,
            )
        log = err.getvalue()
        assert {one, two} <= {0, 1, 3}
    return path, code, out, log, tmp


def _run_cached(config: Path, out: Path, cache: Path) -> tuple[int, str]:
    """`_run` with a result cache of the kit's own (the suite's is off)."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("DIFFTEST_RESULT_CACHE", str(cache))
        return _run(config, out)


def _evidence(out: Path) -> dict:
    return json.loads((out / "evidence.json").read_text())


def _results(out: Path) -> list[dict]:
    return _evidence(out)["results"]


def _reason(result: dict) -> str:
    if result["verdict"] == "error":
        return result["error"] or ""
    return " ".join(v["detail"] for v in result["violations"])


@pytest.mark.xdist_group("fault-kit")
@pytest.mark.parametrize("fault", FAULTS, ids=[f.name for f in FAULTS])
def test_each_fault_reads_what_the_kit_says_on_every_path(path_run, fault):
    path, _code, out, _log, _tmp = path_run
    runs = [r for r in _results(out) if r["branch"] == fault.name]
    assert runs, f"{fault.name}: no result on the {path} path"
    if fault.once:
        # Each probe's first run (one probe, or one per shard) reads what the kit says; the probe's
        # later runs are measured and pass.
        probes = [p for p in _evidence(out)["probes"] if p["branch"] == fault.name]
        struck = [r for r in runs if r["verdict"] != "pass"]
        assert len(struck) == len(probes) and len(runs) > len(struck), (path, runs)
        runs = struck
    verdicts = {r["verdict"] for r in runs}
    assert verdicts == set(fault.expect), (
        path,
        fault.name,
        [(r["verdict"], _reason(r)) for r in runs],
    )
    assert all(fault.says in _reason(r) for r in runs), (path, [_reason(r) for r in runs])


@pytest.mark.xdist_group("fault-kit")
def test_a_branch_that_disturbs_the_tracer_reads_coverage_unknown_and_the_others_keep_theirs(
    path_run,
):
    """On every path: the tracer-swapping branch's coverage reads unknown, with the reason, never
    verified; every other branch that measures keeps its own coverage, judged line by line."""
    path, _code, out, _log, _tmp = path_run
    coverage = _evidence(out)["coverage"]
    assert coverage is not None, path
    standing = {b["branch"]: b for b in coverage["branches"]}
    for fault in FAULTS:
        if fault.coverage is not None:
            assert standing[fault.name]["status"] == fault.coverage, (path, standing[fault.name])
            assert fault.coverage_says in standing[fault.name]["summary"], path
    measured = [f.name for f in FAULTS if f.expect == {"pass"} and f.coverage is None]
    for name in measured:
        assert standing[name]["status"] in ("verified", "not verified"), (path, standing[name])
        assert standing[name]["summary"].startswith("changed lines reached"), path


@pytest.mark.xdist_group("fault-kit")
def test_a_branch_that_kills_its_ray_worker_is_retried_there_then_could_not_measure(
    request, tmp_path_factory, fixture_repo
):
    """#29, case 4, hostile: the worker's death is named on both tries, on the same node, and the
    other branches' results are kept (the Ray path's run, shared with the tests above). Confined
    (#47), the branch sees no Ray worker at all: it measures as main does, and no worker died."""
    _path, _code, out, log, _tmp = _path_run("ray", request, tmp_path_factory, fixture_repo)
    runs = [r for r in _results(out) if r["branch"] == KILLS_ITS_RAY_WORKER.name]
    assert runs and {r["verdict"] for r in runs} == KILLS_ITS_RAY_WORKER.expect
    if CONFINED:
        assert "worker died" not in log and "trying once more there" not in log, log
        return
    for run in runs:
        first, then = run["error"].split("; then ")
        assert KILLS_ITS_RAY_WORKER.says in first and KILLS_ITS_RAY_WORKER.says in then
        # Both tries on the same node: "node <id> at <address>: ..."
        assert first.split(": ", 1)[1].split(":")[0] == then.split(":")[0], run["error"]
    assert f"{KILLS_ITS_RAY_WORKER.name}: scheduler probe ended early: " in log
    assert "trying once more there" in log
    assert {r["verdict"] for r in _results(out) if r["branch"] == "main"} == {"pass"}


@pytest.mark.xdist_group("fault-kit")
def test_main_is_kept_every_report_is_whole_and_the_exit_code_is_the_worst(path_run):
    path, code, out, log, _tmp = path_run
    assert code == 1, (
        log
    )  # exit-hang, sched-hang and exit-one are broken; truncate could not be measured
    assert {r["verdict"] for r in _results(out) if r["branch"] == "main"} == {"pass"}
    for name in ("report.md", "report.html", "junit.xml", "evidence.json"):
        assert (out / name).stat().st_size > 0, (path, name)
    assert "Traceback" not in log
    if path == "cached":
        # main's runs came from the cache; a probe that did not end cleanly was never stored (a
        # crash raised in vLLM, repeatable, is: `sched-crash` reads broken from the cache too).
        for name in ("main", *STORED):
            assert f"{name}: scheduler tier reused from the result cache" in log, (name, log)
        assert not [name for name in NEVER_STORED if f"{name}: scheduler tier reused" in log], log


@pytest.mark.xdist_group("fault-kit")
def test_no_branch_changed_a_file_the_base_shares_with_every_branch(path_run, base_env):
    """tamper-shared rewrote metrics.py in place through its overlay's hard link (same size, mtime
    and bytecode): under the probes' sandbox the write failed, so the base, and every other
    branch's overlay of it, still holds what was installed, by content."""
    path, *_ = path_run
    assert protection().active, protection().describe()
    assert changed_contents(base_env.path, base_env.vllm_dir) is None, path


@pytest.mark.xdist_group("fault-kit")
def test_the_escape_branch_reached_nothing_outside_its_scratch_folder(path_run):
    """#47: every write of the hostile sweep, tried from a real branch's vLLM import on every path
    (a home's git config and a `git` first on PATH, pip's and uv's config, the config and its
    patches, the result cache outside difftest's home, the models, the git mirrors, the locks,
    `--out`) failed: none holds the branch's mark, no lock is a link, and main passed beside it."""
    if not CONFINED:
        pytest.skip(f"this machine cannot confine probes: {protection().describe()}")
    path, _code, out, _log, tmp = path_run
    assert {r["verdict"] for r in _results(out) if r["branch"] == "escape"} == {"pass"}, path
    targets = escape_targets(tmp)
    home = targets["difftest home"]
    assert not (tmp / "user-home").exists(), path
    reached = [
        file
        for folder in (tmp, home / "models", home / "repos", home / "locks", out)
        for file in folder.rglob("*")
        if file.is_file()
        and not file.is_symlink()
        and file.name != "escape.patch"  # its own payload, which names the mark
        and file.suffix in ("", ".json", ".yaml", ".patch", ".lock")
        and ESCAPED in file.read_text(errors="replace")
    ]
    assert not reached, (path, reached)
    assert not [lock for lock in (home / "locks").glob("*.lock") if lock.is_symlink()], path
    assert not (out / "escaped").exists() and not (home / "escaped").exists(), path


@pytest.mark.xdist_group("fault-kit")
def test_no_process_a_branch_started_is_left(path_run):
    path, _code, _out, _log, tmp = path_run
    pids = orphan_pids(tmp)
    assert pids, "the orphan fault never started its child"
    left = survivors(pids)
    assert not left, f"{path}: the branch's children {left} outlived its probe"


@pytest.mark.xdist_group("fault-kit")
def test_branch_code_cannot_read_its_nonce_from_its_environment(path_run):
    path, _code, out, _log, tmp = path_run
    evidence = json.loads((out / "evidence.json").read_text())
    nonces = [p["nonce"] for p in evidence["probes"] if p["branch"] == "environ" and p["nonce"]]
    seen = environ_seen(tmp)
    assert seen and nonces, path
    assert not any(nonce in seen for nonce in nonces), (
        f"{path}: the nonce was readable by branch code"
    )


@pytest.mark.xdist_group("fault-kit")
def test_a_probe_that_hangs_at_exit_is_killed_at_exit_s_not_probe_s(path_run):
    """The outcome the door judged is in the evidence: killed for overstaying its exit, not timed
    out."""
    path, _code, out, _log, _tmp = path_run
    evidence = json.loads((out / "evidence.json").read_text())
    probes = [p for p in evidence["probes"] if p["branch"] == "exit-hang"]
    assert len(probes) == (2 if path == "merged" else 1)  # one per shard
    for probe in probes:
        assert probe["outcome"]["exit_overdue"] and not probe["outcome"]["timed_out"], path
        assert "stats-flusher" in probe["outcome"]["stuck"]


def test_a_counting_switch_in_the_environment_is_part_of_the_cache_key(
    tmp_path, fixture_repo, monkeypatch
):
    """The same run with a variable that reaches probes set: never "reused", measured again (defect
    4)."""
    (env_count,) = [f for f in FAULTS if f.name == "env-count"]
    config = write_config(
        tmp_path,
        [
            shipped_branch("main"),
            {
                "name": "env-count",
                "ref": "main",
                "patches": [str(env_count.patch(tmp_path, fixture_repo))],
            },
        ],
    )
    monkeypatch.setenv("DIFFTEST_RESULT_CACHE", str(tmp_path / "results"))
    assert _run(config, tmp_path / "first")[0] == 0
    monkeypatch.setenv(SKEW_ENV, "1")
    code, log = _run(config, tmp_path / "second")
    assert "env-count: scheduler tier reused" not in log
    assert code == 1 and {
        r["verdict"] for r in _results(tmp_path / "second") if r["branch"] == "env-count"
    } != {"pass"}
    # An unrelated variable never reaches a probe, so it neither changes a result nor misses the
    # cache.
    monkeypatch.delenv(SKEW_ENV)
    monkeypatch.setenv("DIFFTEST_FAULT_UNRELATED", "1")
    code, log = _run(config, tmp_path / "third")
    assert code == 0 and "env-count: scheduler tier reused from the result cache" in log


#: The faults that apply to `fuzz`'s warm probes (one process answers job after job on a pipe and
#: leaves with `os._exit` once its input ends: a hang at exit, an exit code after the last job or a
#: records file do not exist there), and the one that disturbs the tracer every job reports to.
FUZZED = ("sched-crash", "orphan", "environ", "tracer-swap")


def test_fuzz_judges_through_the_same_door_and_leaves_nothing_behind(tmp_path, fixture_repo):
    faults = [f for f in FAULTS if f.name in FUZZED]
    branches = [shipped_branch("main")] + [
        {"name": f.name, "ref": "main", "patches": [str(f.patch(tmp_path, fixture_repo))]}
        for f in faults
    ]
    (tmp_path / "no-scenarios").mkdir()
    config = write_config(
        tmp_path, branches, timeouts=TIMEOUTS, scenarios_dir=str(tmp_path / "no-scenarios")
    )
    out = tmp_path / "out"
    with capture_stderr() as err:
        code = run_cli("fuzz", "-c", config, "--seed", "0", "--examples", "3", "--out", out)
    report = json.loads((out / "fuzz.json").read_text())
    kinds = {
        (o["kind"]["branch"], o["kind"]["verdict"])
        for f in report["findings"]
        for o in f["observations"]
    }
    assert code == 1, err.getvalue()
    # schedule() raises where main completes the same example: broken, as `run` judges it; the
    # branches that change no counting find what main finds (its own #56101 divergence), nothing
    # more.
    assert ("sched-crash", "broken") in kinds
    mains = {verdict for branch, verdict in kinds if branch == "main"}
    assert (
        {v for b, v in kinds if b == "orphan"}
        == {v for b, v in kinds if b == "environ"}
        == {v for b, v in kinds if b == "tracer-swap"}
        == mains
    )
    # The tracer-swapping branch's changed code reads unknown, never reached; the others' changed
    # lines are judged line by line from what their examples executed.
    standing = {b["branch"]: b for b in report["coverage"]["branches"]}
    assert standing["tracer-swap"]["status"] == "unknown"
    assert "the tracer was replaced while the probe ran" in standing["tracer-swap"]["summary"]
    assert not [r for r in report["first_reached"] if r["branch"] == "tracer-swap"]
    for name in ("sched-crash", "orphan", "environ"):
        assert standing[name]["status"] in ("verified", "not verified"), standing[name]
    assert {r["branch"] for r in report["first_reached"]} >= {"orphan", "environ"}

    assert orphan_pids(tmp_path) and not survivors(orphan_pids(tmp_path))
    seen = environ_seen(tmp_path)
    assert seen and "DIFFTEST_PROBE_NONCE=" not in seen and "'DIFFTEST_PROBE_NONCE'" not in seen


def test_a_branch_named_alone_is_still_judged_against_the_baseline(tmp_path, fixture_repo):
    """`run ... sched-crash`: main is measured as the reference (not reported), so the crash reads
    broken as it does beside main, never "could not measure" nor "closest to the oracle" (defects 2
    and 12)."""
    (crash,) = [f for f in FAULTS if f.name == "sched-crash"]
    config = write_config(
        tmp_path,
        [
            shipped_branch("main"),
            {
                "name": crash.name,
                "ref": "main",
                "patches": [str(crash.patch(tmp_path, fixture_repo))],
            },
        ],
        timeouts=TIMEOUTS,
    )
    out = tmp_path / "out"
    code, log = _run(config, out, crash.name)
    assert code == 1, log
    evidence = json.loads((out / "evidence.json").read_text())
    assert evidence["reference_branches"] == ["main"] and "baseline main is measured too" in log
    assert {r["branch"] for r in evidence["results"]} == {crash.name}
    assert {r["verdict"] for r in evidence["results"]} == {"broken"}
    assert {p["branch"] for p in evidence["probes"]} == {
        "main",
        crash.name,
    }  # what the judgement rests on
    report = (out / "report.md").read_text()
    assert "closest to the oracle" not in report and "| main |" not in report
    assert "Judged against main, the baseline: measured beside the named branches" in report


def test_an_orphan_that_cleared_its_environment_and_left_the_group_ends_with_difftest(
    tmp_path, fixture_repo
):
    """Only the subreaper can find it: difftest, the console script, ends it (and its children) on
    exit."""
    patch = insert_after(
        tmp_path / "deep.patch", fixture_repo, SCHEDULER, INIT_MARKER, deep_orphan(tmp_path)
    )
    config = write_config(
        tmp_path,
        [shipped_branch("main"), {"name": "deep", "ref": "main", "patches": [str(patch)]}],
        timeouts=TIMEOUTS,
    )
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "difftest"),
            "run",
            "-c",
            str(config),
            "--tier",
            "scheduler",
            "-k",
            CONTROL,
            "--out",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        timeout=900,  # a hang guard only
    )
    assert done.returncode == 0, done.stderr
    pids = deep_orphan_pids(tmp_path)
    assert pids, "the fault never started its grandchild"
    left = survivors(pids)
    assert not left, f"{left} outlived difftest"


def test_a_scenario_named_to_run_a_shell_command_is_refused_before_anything_runs(tmp_path, capsys):
    """#40, case 5: a scenario called `x$(touch P)` once reached `others: difftest show ...` and
    blame.md's Reproduce line raw, to be pasted into a shell. The loader refuses the name (exit 2,
    nothing built, nothing run) and every command difftest prints is shell-quoted besides."""
    import shutil

    planted = Path.cwd() / "pwned"
    scenarios = tmp_path / "scenarios"
    shutil.copytree(ROOT / "scenarios", scenarios)
    shipped = scenarios / "scheduler" / f"{CONTROL}.yaml"
    hostile = scenarios / "scheduler" / "x$(touch pwned).yaml"
    shipped.rename(hostile)
    config = write_config(tmp_path, [shipped_branch("main")], scenarios_dir=str(scenarios))
    assert run_cli("run", "-c", config, "--tier", "scheduler", "--out", tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert "letters, digits" in err and "x$(touch" in err
    assert not planted.exists() and not (tmp_path / "out" / "evidence.json").exists()
