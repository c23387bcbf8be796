"""What every probe of one comparison traces: the stats path and every Python file under `vllm/`
that a compared branch changes, with coverage.py taken from a folder beside the base.

One list for every branch and tier of a comparison: a file that branch X does not change but the
baseline does differs between them just the same, so each branch traces it too. coverage.py is
never installed into an environment (a branch environment's files are hard links to the base);
like the tests tier's packages it lies in a folder of its own per base, put on the probe's
`sys.path` after the environment's own packages (`probe.tracing`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import coverage

from difftest.build.envs.base import BaseEnv, Log
from difftest.build.tests.deps import site_dir, suite_packages
from difftest.build.workspace import Workspace
from difftest.core.errors import DifftestError
from difftest.core.stats_path import STATS_PATHS
from difftest.probe.protocol import Job

#: `off` traces nothing (what tracing costs is measured against it: bench/coverage.py); every
#: branch's changed code then reads "coverage unknown", never verified.
SWITCH_ENV = "DIFFTEST_COVERAGE"
#: The coverage.py the probes trace with: the host's own version, so what they record is what the
#: host's parser expects.
TRACER_REQUIREMENT = f"coverage=={coverage.__version__}"


@dataclass(frozen=True)
class TracePlan:
    """The job's `trace` entry, or why there is none."""

    spec: dict[str, Any] | None
    paths: list[str] = field(default_factory=list)
    why_not: str = ""

    def add_to(self, job: Job) -> None:
        if self.spec is not None:
            job["trace"] = self.spec


def plan_tracing(workspace: Workspace, log: Log) -> TracePlan:
    """The stats path plus each branch environment's changed Python files under `vllm/`, and the
    tracer's folder (built on first use); no tracing, with the reason, when it cannot be had."""
    paths = traced_paths(workspace)
    if os.environ.get(SWITCH_ENV, "").lower() == "off":
        why = f"turned off ({SWITCH_ENV}=off)"
        log(f"changed-line coverage is off: {why}; no branch's changed code reads verified")
        return TracePlan(None, paths, why)
    try:
        site = tracer_site(workspace.base, log)
    except DifftestError as exc:
        why = f"coverage.py could not be installed beside the base ({exc.problem})"
        log(f"changed-line coverage is off: {why}")
        return TracePlan(None, paths, why)
    return TracePlan({"site": str(site), "paths": paths}, paths)


def traced_paths(workspace: Workspace) -> list[str]:
    """`STATS_PATHS`, then every changed Python file under `vllm/` outside them, sorted."""
    changed: set[str] = set()
    for branch in workspace.branches:
        if branch.env is None:
            continue
        for entry in branch.env.fingerprint.get("changed_files", []):
            _status, _, path = str(entry).partition(" ")
            if path.startswith("vllm/") and path.endswith(".py"):
                changed.add(path)
    outside = sorted(p for p in changed if not any(_under(p, part) for part in STATS_PATHS))
    return [*STATS_PATHS, *outside]


def tracer_site(base: BaseEnv, log: Log) -> str:
    """The folder holding coverage.py for the base's Python (what goes on the probe's path)."""
    return str(site_dir(suite_packages(base, [TRACER_REQUIREMENT], log)))


def _under(path: str, part: str) -> bool:
    return path.startswith(part) if part.endswith("/") else path == part
