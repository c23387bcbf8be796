"""Benchmark: `--executor ray` on one node against two nodes, side by side in one run.

A real Ray cluster on this machine's loopback (`tests/cluster/ray_nodes.py`: every socket checked
to be on 127.0.0.1, only the processes it started ended). First with the head alone, then with a
second node added (its own DIFFTEST_HOME: it builds every branch environment from what the host
ships, as a node of a real cluster would):

- the scheduler tier, every shipped scenario, on 8 branches (the shipped ones plus comment-only
  variants of main, as `bench/fork.py` makes them): wall time on one node and on two, their ratio,
  and whether every verdict is the same;
- `difftest fuzz --seed 0` on three branches: examples per second of search on one node and on two
  (warm probes as actors), and whether the findings are the same.

Both nodes share this machine's cores (each offers `--cpus`), so a ratio here says what the executor
costs, not what a second machine gains; on separate machines the probes' work is split between
them. The load average is printed before and after.

    .venv/bin/python bench/ray.py [--cpus 2] [--examples 30]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# This file is named ray.py: its own folder, first on the path, would shadow the `ray` package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(ROOT))
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
os.environ.setdefault("DIFFTEST_RESULT_CACHE", "off")  # measure, never reuse


def _load(name: str, path: Path):
    """A module of this checkout by path (another top-level `tests` or `bench` may shadow it)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, f"{path} cannot be loaded"
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


from difftest.core.config import load_config  # noqa: E402
from difftest.core.paths import difftest_home  # noqa: E402
from difftest.run.cluster.connect import ClusterRequest  # noqa: E402
from difftest.run.fuzz.campaign import FuzzRequest, fuzz  # noqa: E402
from difftest.run.pipeline import CompareRequest, compare  # noqa: E402

fork_bench = _load("difftest_bench_fork", ROOT / "bench" / "fork.py")
ray_nodes = _load("difftest_ray_nodes", ROOT / "tests" / "cluster" / "ray_nodes.py")

FUZZED = ["main", "pr-56137-style", "pr-56195-style"]


def verdicts(comparison) -> list[tuple]:
    return sorted(
        (
            r.branch,
            r.scenario,
            r.label,
            r.verdict,
            json.dumps(r.measured.model_dump() if r.measured else None),
        )
        for r in comparison.evidence.results
    )


def run_tier(config, address: str, out: Path) -> tuple[float, list[tuple], set[str]]:
    started = time.perf_counter()
    comparison = compare(
        config,
        CompareRequest(
            tiers=["scheduler"],
            out=out,
            reuse_cached=False,
            store_results=False,
            cluster=ClusterRequest(address=address),
        ),
    )
    wall = time.perf_counter() - started
    nodes = {p.node.id for p in comparison.evidence.probes if p.node is not None}
    return wall, verdicts(comparison), nodes


def run_fuzz(config, address: str, examples: int, out: Path) -> tuple[float, float, list[tuple]]:
    report = fuzz(
        config,
        FuzzRequest(
            branches=FUZZED,
            seed=0,
            examples=examples,
            out=out,
            cluster=ClusterRequest(address=address),
        ),
    ).report
    found = [(f.name, [o.model_dump_json() for o in f.observations]) for f in report.findings]
    return report.calls / report.elapsed_s, report.probed / report.elapsed_s, found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cpus", type=int, default=2, help="CPUs each node offers (default 2)")
    parser.add_argument("--examples", type=int, default=30, help="fuzz examples per round")
    args = parser.parse_args()
    print(fork_bench.load())
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        config = load_config(fork_bench.eight_branch_config(folder))
        (folder / "no-scenarios").mkdir()
        fuzz_config = config.model_copy(update={"scenarios_dir": folder / "no-scenarios"})
        cluster = ray_nodes.LoopbackCluster({}, cpus=args.cpus)
        try:
            one = run_tier(config, cluster.address, folder / "one")
            fuzz_one = run_fuzz(fuzz_config, cluster.address, args.examples, folder / "fuzz-one")
            base = next((difftest_home() / "envs").glob("base-*"))
            home = ray_nodes.home_with(base, folder / "node-b-home")
            cluster.add(args.cpus, {}, {"DIFFTEST_HOME": str(home)})
            two = run_tier(config, cluster.address, folder / "two")
            fuzz_two = run_fuzz(fuzz_config, cluster.address, args.examples, folder / "fuzz-two")
        finally:
            left = cluster.shutdown()
    branches = len(config.branches)
    print(f"\nscheduler tier, every shipped scenario, {branches} branches, {args.cpus} CPUs a node")
    print(f"{'nodes':>5} {'wall s':>8} {'nodes used':>11}")
    print(f"{1:>5} {one[0]:>8.1f} {len(one[2]):>11}")
    print(f"{2:>5} {two[0]:>8.1f} {len(two[2]):>11}")
    print(f"two nodes / one node: {two[0] / one[0]:.2f}; same verdicts: {one[1] == two[1]}")
    print(f"\nfuzz --seed 0 --examples {args.examples}, {len(FUZZED)} branches")
    print(f"{'nodes':>5} {'examples/s':>11} {'probed/s':>9} {'findings':>9}")
    print(f"{1:>5} {fuzz_one[0]:>11.1f} {fuzz_one[1]:>9.1f} {len(fuzz_one[2]):>9}")
    print(f"{2:>5} {fuzz_two[0]:>11.1f} {fuzz_two[1]:>9.1f} {len(fuzz_two[2]):>9}")
    print(
        f"two nodes / one node: {fuzz_two[0] / fuzz_one[0]:.2f}; "
        f"same findings: {fuzz_one[2] == fuzz_two[2]}"
    )
    print(fork_bench.load())
    if left:
        print(f"processes of the cluster left running: {left}")


if __name__ == "__main__":
    main()
