"""Benchmark: the fork server against fresh interpreters, 1, 4 and 8 branches, side by side in one
run.

On the scheduler tier with every shipped scenario: the shipped branches plus
comment-only variants of main (distinct commits, so distinct environments) up
to eight. For each N, the same job is probed on N branches twice: every probe
in a fresh interpreter (`--no-fork`), then every probe forked from one warm
interpreter (the default), at the tier's default parallelism; the runs must be
identical apart from what a clock decides. Also printed: how much of a probe's
import the fork server shares (a fresh probe's vLLM import, the server's
shared imports, a forked child's remaining import), and the target: 8 branches
forked within one warm-up + 3 s per branch.

    .venv/bin/python bench/fork.py
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from difftest import tiers  # noqa: E402
from difftest.build.envs.base import ensure_base  # noqa: E402
from difftest.build.refs import read_blob  # noqa: E402
from difftest.build.workspace import open_source_repo, prepare  # noqa: E402
from difftest.core.config import load_config  # noqa: E402
from difftest.run.pipeline import make_job, probes_at_a_time  # noqa: E402
from difftest.run.probes.runner import BranchRun, run_branches, warm_fork_server  # noqa: E402


def _make_patch():
    """tests/patching.py's `make_patch` (another top-level `tests` package may shadow this
    one's)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "difftest_test_patching", ROOT / "tests" / "patching.py"
    )
    assert spec is not None and spec.loader is not None, "tests/patching.py cannot be loaded"
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.make_patch


make_patch = _make_patch()

TIER = tiers.probe_tier("scheduler")
COUNTS = (1, 4, 8)
#: Where the comment-only variants change main (a module every scheduler probe imports).
TOUCHED = "vllm/v1/core/sched/scheduler.py"


def load() -> str:
    return (
        "load average "
        + " ".join(f"{v:.2f}" for v in os.getloadavg())
        + f" ({os.cpu_count()} cores)"
    )


def eight_branch_config(folder: Path) -> Path:
    """The shipped branches.yaml plus comment-only variants of main, eight branches in all."""
    shipped = ROOT / "branches.yaml"
    config = load_config(shipped)
    repo = open_source_repo(config, ensure_base(config.base))
    raw = yaml.safe_load(shipped.read_text())
    for branch in raw["branches"]:  # the copy lives elsewhere: patch paths made absolute
        if "patches" in branch:
            branch["patches"] = [str((shipped.parent / p).resolve()) for p in branch["patches"]]
    source = read_blob(repo, "main", TOUCHED).decode()
    for index in range(max(COUNTS) - len(raw["branches"])):
        patch = make_patch(
            folder / f"variant-{index}.patch",
            TOUCHED,
            source,
            source + f"# bench variant {index}\n",
        )
        raw["branches"].append(
            {"name": f"main-variant-{index}", "ref": "main", "patches": [str(patch)]}
        )
    raw["scenarios_dir"] = str(config.scenarios_dir)
    path = folder / "branches.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def comparable(runs: dict[str, BranchRun]) -> dict[str, list[str]]:
    """Every run, without its duration and vLLM's throughput line (what a clock decides)."""
    return {
        name: [
            json.dumps(r.model_dump(exclude={"duration_s", "notes"}), sort_keys=True)
            for r in run.runs
        ]
        for name, run in runs.items()
    }


def measure(
    targets, job, work: Path, probe_s: float, fork: bool
) -> tuple[float, dict[str, BranchRun]]:
    jobs, _why = probes_at_a_time(TIER, len(targets), None)
    started = time.perf_counter()
    runs = run_branches(targets, job, TIER.name, work, probe_s, jobs, fork=fork)
    return time.perf_counter() - started, runs


def main() -> None:
    print(load())
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        config = load_config(eight_branch_config(folder))
        workspace = prepare(config)
        targets = [(b.name, b.env.python) for b in workspace.branches if b.env]
        assert len(targets) >= max(COUNTS), [b.error for b in workspace.branches]
        job = make_job(TIER, TIER.load(config.scenarios_dir / TIER.folder), config.timeouts.run_s)
        probe_s = config.timeouts.probe_s

        started = time.perf_counter()
        server, why = warm_fork_server(targets[0][1], TIER.name, folder / "warm", probe_s, 1)
        warm_up = time.perf_counter() - started
        assert server is not None, why
        shared_s, shared = server.state.import_s, len(server.state.modules)
        server.close()

        rows = []
        fresh_import: list[float] = []
        forked_import: list[float] = []
        for count in COUNTS:
            chosen = targets[:count]
            fresh_s, fresh = measure(chosen, job, folder / f"fresh-{count}", probe_s, fork=False)
            fork_s, forked = measure(chosen, job, folder / f"fork-{count}", probe_s, fork=True)
            assert all(r.launch == "fresh" for r in fresh.values())
            launched = {r.launch for r in forked.values()}
            if count == 1:  # alone on the machine: an import's cost, not its share of the cores
                fresh_import += [r.header.import_s for r in fresh.values() if r.header]
                forked_import += [r.header.import_s for r in forked.values() if r.header]
            errors = [f"{n}: {r.error}" for n, r in {**fresh, **forked}.items() if r.error]
            rows.append(
                (count, fresh_s, fork_s, comparable(fresh) == comparable(forked), launched, errors)
            )

    print(
        f"\nscheduler tier, {len(job['scenarios'])} scenarios, "
        f"{sum(len(s['runs']) for s in job['scenarios'])} runs per branch\n"
    )
    print(
        f"fork server warm-up: {warm_up:.1f} s ({shared} shared libraries imported in "
        f"{shared_s:.1f} s)"
    )
    fresh_med, forked_med = statistics.median(fresh_import), statistics.median(forked_import)
    print(
        f"vLLM import of one probe alone: fresh {fresh_med:.2f} s, forked {forked_med:.2f} s "
        f"-> {1 - forked_med / fresh_med:.0%} of it shared\n"
    )
    print(
        f"{'branches':>8} {'fresh s':>9} {'forked s':>9} {'forked/fresh':>13} {'same runs':>10}  "
        "launched"
    )
    for count, fresh_s, fork_s, same, launched, errors in rows:
        print(
            f"{count:>8} {fresh_s:>9.1f} {fork_s:>9.1f} {fork_s / fresh_s:>13.2f} {str(same):>10}  "
            f"{'/'.join(sorted(str(x) for x in launched))}"
        )
        for line in errors:
            print(f"         error: {line}")
    eight = next(r for r in rows if r[0] == 8)
    budget = warm_up + 3 * 8
    print(
        "\n"
        f"target: 8 branches forked <= warm-up + 3 s per branch = {budget:.1f} s: measured "
        f"{eight[2]:.1f} s ({'met' if eight[2] <= budget else 'MISSED'})"
    )
    print(load())


if __name__ == "__main__":
    main()
