"""Benchmark: the scheduler tier, one probe process per branch, against one process per scenario.

Prints, from one run: per branch, vLLM's import time, the sum of scenario run
times and the process's wall time (all scenarios in ONE process); the median
and worst single run; then, for the baseline branch, the naive alternative
measured now: one probe process per scenario file. The ratio shows why difftest
keeps interpreter starts to one per branch and tier.

    uv run python bench/scheduler.py [--skip-naive]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from difftest import tiers  # noqa: E402
from difftest.build.workspace import prepare  # noqa: E402
from difftest.core.config import load_config  # noqa: E402
from difftest.run.pipeline import make_job  # noqa: E402
from difftest.run.probes.runner import run_branches, run_probe  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--skip-naive", action="store_true")
    args = parser.parse_args()
    config = load_config(ROOT / "branches.yaml")
    workspace = prepare(config)
    tier = tiers.probe_tier("scheduler")
    scenarios = tier.load(config.scenarios_dir / tier.folder)
    expected = sum(len(s.runs()) for s in scenarios)
    job = make_job(tier, scenarios, config.timeouts.run_s)
    targets = [(b.name, b.env.python) for b in workspace.branches if b.env]
    with tempfile.TemporaryDirectory() as work:
        started = time.perf_counter()
        runs = run_branches(
            targets, job, tier.name, Path(work), config.timeouts.probe_s, len(targets)
        )
        all_wall = time.perf_counter() - started
        naive_s = None
        if not args.skip_naive:
            name, python = targets[0]
            started = time.perf_counter()
            for scenario in scenarios:
                single = make_job(tier, [scenario], config.timeouts.run_s)
                run_probe(
                    name, python, single, tier.name, Path(work) / "naive", config.timeouts.probe_s
                )
            naive_s = time.perf_counter() - started

    print(
        f"{len(scenarios)} scenarios, {expected} runs per branch, {len(targets)} branches in "
        "parallel\n"
    )
    print(
        f"{'branch':<18}{'import s':>10}{'runs s':>10}{'process s':>11}{'median run ms':>15}"
        f"{'worst run ms':>14}"
    )
    for name, delivered in runs.items():
        durations = [r.duration_s for r in delivered.runs]
        import_s = delivered.header.import_s if delivered.header else float("nan")
        print(
            f"{name:<18}{import_s:>10.1f}{sum(durations):>10.2f}{delivered.duration_s:>11.1f}"
            f"{statistics.median(durations) * 1e3:>15.1f}{max(durations) * 1e3:>14.1f}"
        )
    print(f"\nall branches, wall: {all_wall:.1f} s")
    if naive_s is not None:
        one = runs[targets[0][0]].duration_s
        print(
            f"{targets[0][0]}: one process for all scenarios {one:.1f} s; one process per scenario "
            f"{naive_s:.1f} s (x{naive_s / one:.1f})"
        )


if __name__ == "__main__":
    main()
