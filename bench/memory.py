"""Benchmark: how much memory one branch probe takes, and how many run at once by default.

Runs each tier's probe for one branch (every shipped scenario of the tier),
prints its peak resident memory (VmHWM, sampled by the runner), then the
default number of probes run at once for 3, 12 and 40 branches on this
machine now (`run.capacity`: cores, and memory available / a probe's budget).

    uv run python bench/memory.py [--branch main]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from difftest import tiers  # noqa: E402
from difftest.build.workspace import prepare  # noqa: E402
from difftest.core.config import load_config  # noqa: E402
from difftest.run.capacity import available_memory_mb, probes_at_once  # noqa: E402
from difftest.run.pipeline import make_job  # noqa: E402
from difftest.run.runner import run_probe  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--branch", default="main")
    args = parser.parse_args()
    config = load_config(ROOT / "branches.yaml")
    workspace = prepare(config, [args.branch])
    env = workspace.branch(args.branch).env
    assert env is not None
    cores = os.cpu_count() or 1
    print(f"{'tier':<11}{'runs':>6}{'probe s':>9}{'peak RSS MB':>13}{'budget MB':>11}")
    for tier in tiers.REGISTRY.values():
        scenarios = tier.load(config.scenarios_dir / tier.folder)
        scenarios = [s for s in scenarios if not tier.unavailable(s, workspace.base.fingerprint)]
        job = make_job(tier, scenarios, config.timeouts.run_s)
        with tempfile.TemporaryDirectory() as work:
            run = run_probe(args.branch, env.python, job, tier.name, Path(work), config.timeouts.probe_s)
        assert run.error is None, run.error
        print(f"{tier.name:<11}{len(run.runs):>6}{run.duration_s:>9.1f}{run.peak_rss_mb or float('nan'):>13.0f}"
              f"{tier.probe_memory_mb:>11}")
    available = available_memory_mb()
    print(f"\nnow: {cores} cores, {available or float('nan'):,.0f} MB available")
    print(f"{'branches':>9}" + "".join(f"{t.name + ' at once':>20}" for t in tiers.REGISTRY.values()))
    for branches in (3, 12, 40):
        cells = [probes_at_once(t.default_jobs(branches, cores), t.probe_memory_mb, available) for t in tiers.REGISTRY.values()]
        print(f"{branches:>9}" + "".join(f"{c:>20}" for c in cells))


if __name__ == "__main__":
    main()
