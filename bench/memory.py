"""Benchmark: how much memory one branch probe takes, and how many run at once by default.

Runs each tier's probe for one branch (every shipped scenario of the tier),
prints its peak resident memory (VmHWM, sampled by the runner), then the
default number of probes run at once for 3, 12 and 40 branches on this
machine now (`run.probes.capacity`: cores, and memory available / a probe's budget).
With `--many N`, also a real run of N branches (main plus N-1 one-line
variants) on one scheduler scenario with the default parallelism: how many
overlapped, the sum of their peaks, the wall time.

    uv run python bench/memory.py [--branch main] [--many 12]
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
from difftest.run.pipeline import make_job  # noqa: E402
from difftest.run.probes.capacity import available_memory_mb, probes_at_once  # noqa: E402
from difftest.run.probes.runner import run_probe  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--branch", default="main")
    parser.add_argument(
        "--many", type=int, default=0, help="also run this many branches at once, by default"
    )
    args = parser.parse_args()
    config = load_config(ROOT / "branches.yaml")
    workspace = prepare(config, [args.branch])
    env = workspace.branch(args.branch).env
    assert env is not None
    cores = os.cpu_count() or 1
    print(f"{'tier':<11}{'runs':>6}{'probe s':>9}{'peak RSS MB':>13}{'budget MB':>11}")
    for tier in tiers.probe_tiers():
        scenarios = tier.load(config.scenarios_dir / tier.folder)
        scenarios = [s for s in scenarios if not tier.unavailable(s, workspace.base.fingerprint)]
        job = make_job(tier, scenarios, config.timeouts.run_s)
        with tempfile.TemporaryDirectory() as work:
            run = run_probe(
                args.branch, env.python, job, tier.name, Path(work), config.timeouts.probe_s
            )
        assert run.error is None, run.error
        print(
            f"{tier.name:<11}{len(run.runs):>6}{run.duration_s:>9.1f}"
            f"{run.peak_rss_mb or float('nan'):>13.0f}{tier.probe_memory_mb:>11}"
        )
    available = available_memory_mb()
    print(f"\nnow: {cores} cores, {available or float('nan'):,.0f} MB available")
    print(f"{'branches':>9}" + "".join(f"{t.name + ' at once':>20}" for t in tiers.probe_tiers()))
    for branches in (3, 12, 40):
        cells = [
            probes_at_once(t.default_jobs(branches, cores), t.probe_memory_mb, available)
            for t in tiers.probe_tiers()
        ]
        print(f"{branches:>9}" + "".join(f"{c:>20}" for c in cells))
    if args.many:
        many_branches(config, args.many)


def many_branches(config, count: int) -> None:
    """A real run of `count` scheduler probes with the default parallelism (`compare`, as
    `difftest run`)."""
    import time

    from difftest.build.refs import read_blob
    from difftest.core.config import BranchSpec
    from difftest.run.pipeline import CompareRequest, compare
    from tests.patching import make_patch

    with tempfile.TemporaryDirectory() as work:
        folder = Path(work)
        repo = prepare(config, ["main"]).repo
        old = read_blob(repo, config.base_ref, "vllm/version.py").decode()
        branches = [BranchSpec(name="main", ref="main")]
        for n in range(1, count):
            patch = make_patch(
                folder / f"v{n}.patch", "vllm/version.py", old, old + f"\n# variant {n}\n"
            )
            branches.append(BranchSpec(name=f"variant-{n}", ref="main", patches=[patch]))
        many = config.model_copy(update={"branches": branches})
        prepare(many)  # environments first: the figures below are the probes'
        started = time.perf_counter()
        logged: list[str] = []
        comparison = compare(
            many,
            CompareRequest(tiers=["scheduler"], select="eos-on-bonus", out=folder / "out"),
            logged.append,
        )
        wall = time.perf_counter() - started
    runs = list(comparison.delivered["scheduler"].values())
    overlap = max(sum(r.started_at <= t.started_at < r.ended_at for r in runs) for t in runs)
    verdicts = {r.verdict for r in comparison.evidence.results}
    print(
        f"\n{count} branches, one scheduler scenario: "
        + next(line for line in logged if "at a time" in line)
    )
    print(
        f"  at most {overlap} probes overlapped; sum of their peaks "
        f"{sum(r.peak_rss_mb or 0 for r in runs):,.0f} MB; largest "
        f"{max(r.peak_rss_mb or 0 for r in runs):,.0f} MB; wall {wall:.0f} s; verdicts "
        f"{sorted(verdicts)}"
    )


if __name__ == "__main__":
    main()
