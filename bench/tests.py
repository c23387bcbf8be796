"""Benchmark: the tests tier (one pytest-xdist session, every branch a worker) against running the
same selection branch after branch (one plain `python -m pytest` per branch environment).

Both sides run the same tests from the same tree with the same test-only packages and environment
variables, on the shipped branches; the tier's side also runs each branch's own tests (grafted into
the same session). Prints wall and CPU seconds of each and their ratio, with the load average before
and after (the machine is shared: read the ratio, and trust it only on a quiet machine).

    uv run python bench/tests.py [-c branches.yaml] [--select PATH ...]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from difftest import tiers  # noqa: E402
from difftest.build.tests.deps import site_dir, suite_packages  # noqa: E402
from difftest.build.tests.standins import hub_cache  # noqa: E402
from difftest.build.tests.trees import PYTEST_CONFIG  # noqa: E402
from difftest.build.workspace import prepare  # noqa: E402
from difftest.core.config import TestsSpec, load_config  # noqa: E402
from difftest.probe.tests.contract import OUT_ENV  # noqa: E402
from difftest.run.context import RunContext, default_baseline  # noqa: E402
from difftest.run.suites.measure import measure_suites, session_environ  # noqa: E402
from difftest.tiers.tests.selection import selection_from  # noqa: E402


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-c", "--config", default=str(ROOT / "branches.yaml"))
    parser.add_argument(
        "--select", nargs="*", help="pytest paths (default: the tier's default selection)"
    )
    args = parser.parse_args()
    config = load_config(args.config)
    spec = TestsSpec(select=args.select) if args.select else (config.tests or TestsSpec())
    selection = selection_from(spec)
    workspace = prepare(config)
    tier = tiers.get("tests")
    load_before = os.getloadavg()

    with tempfile.TemporaryDirectory() as work:
        cpu, started = children_cpu(), time.perf_counter()
        context = RunContext(workspace, default_baseline(workspace), out=Path(work))
        measured = measure_suites(context, tier, selection)
        tier_wall, tier_cpu = time.perf_counter() - started, children_cpu() - cpu
        (session,) = [s for s in measured.sessions if s.name == "shared"]
        plan_session = session.command[
            session.command.index("--junitxml=" + str(session.out / "junit.xml")) + 1 :
        ]
        tests_per_branch = len(
            {r.test for r in measured.tests if r.code == workspace.config.baseline}
        )

        # The same session arguments, branch after branch, without xdist and without the plugin.
        root = session.root
        deps = site_dir(suite_packages(workspace.base, spec.requirements))
        env = {
            k: v
            for k, v in session_environ_for(plan_session, deps, Path(work)).items()
            if k != OUT_ENV
        }
        per_branch = {}
        cpu, started = children_cpu(), time.perf_counter()
        for branch in workspace.branches:
            one = time.perf_counter()
            subprocess.run(
                [
                    str(branch.env.python),
                    "-m",
                    "pytest",
                    "-p",
                    "no:cacheprovider",
                    "--rootdir",
                    str(root),
                    "-c",
                    str(root / PYTEST_CONFIG),
                    "-o",
                    "addopts=",
                    "-o",
                    f"timeout={config.timeouts.run_s:g}",
                    "-q",
                    "--color=no",
                    *plan_session,
                ],
                cwd=root,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                check=False,
            )
            per_branch[branch.name] = time.perf_counter() - one
        serial_wall, serial_cpu = time.perf_counter() - started, children_cpu() - cpu
    load_after = os.getloadavg()

    branches = len(workspace.branches)
    print(
        f"{tests_per_branch} tests (selection + each branch's own), {branches} branches, "
        f"{os.cpu_count()} cores"
    )
    print(f"load average before {load_before[0]:.1f}, after {load_after[0]:.1f}\n")
    print(f"{'how':<44}{'wall s':>9}{'CPU s':>9}")
    print(
        f"{'tests tier: one xdist session, ' + str(branches) + ' workers':<44}{tier_wall:>9.1f}"
        f"{tier_cpu:>9.1f}"
    )
    for name, seconds in per_branch.items():
        print(f"{'  plain pytest, ' + name:<44}{seconds:>9.1f}")
    print(f"{'branch after branch (sum)':<44}{serial_wall:>9.1f}{serial_cpu:>9.1f}")
    print(
        f"\nwall: the tier takes x{tier_wall / serial_wall:.2f} of branch after branch "
        f"({serial_wall / tier_wall:.2f}x faster); CPU x{tier_cpu / serial_cpu:.2f} "
        "(the controller's own interpreter is the extra cost)"
    )


def session_environ_for(args: list[str], deps: Path, work: Path) -> dict[str, str]:
    from difftest.core.suites import SuiteSession

    plan = SuiteSession(
        name="serial", sha="", grafts={}, args=args, allowed_grafts=[], owners={}, default_source=""
    )
    return session_environ(plan, [deps], hub_cache(), work / "serial", 1)


if __name__ == "__main__":
    main()
