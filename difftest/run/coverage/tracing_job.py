"""What every probe of one comparison traces: every Python file under `vllm/` that a compared
branch changes (relative to the base release), with coverage.py taken from a folder beside the
base.

One list for every branch and tier of a comparison: a file that branch X does not change but the
baseline does differs between them just the same, so each branch traces it too. Only changed files
are traced, not the whole stats path: the tracer's cost grows with what it traces in the
scheduler's hot loop (bench/coverage.py: the whole stats path cost a scheduler probe 26 %, the
changed files 14 %). A comparison in which no branch changes a file under `vllm/` traces nothing.
coverage.py is never installed into an environment (a branch environment's files are hard links
to the base); like the tests tier's packages it lies in a folder of its own per base, put on the
probe's `sys.path` after the environment's own packages (`probe.tracing`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import coverage

from difftest.build.envs.base import BaseEnv, Log
from difftest.build.tests.deps import site_dir, suite_packages
from difftest.build.workspace import Workspace
from difftest.core.errors import DifftestError
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
    #: Trace the baseline too (`difftest coverage`, the gate's map of the base): otherwise the
    #: baseline's result is keyed and reused untraced, its coverage never judged.
    everywhere: bool = False

    def add_to(self, job: Job) -> None:
        if self.spec is not None:
            job["trace"] = self.spec


def plan_tracing(workspace: Workspace, log: Log, chosen: Sequence[str] | None = None) -> TracePlan:
    """Each branch environment's changed Python files under `vllm/`, and the tracer's folder (built
    on first use); no tracing when nothing changed, or (with the reason) when it cannot be had.
    `chosen` (`vllm/...` files, folders ending in `/`) traces those instead, in every branch, the
    baseline too."""
    paths = sorted(chosen) if chosen is not None else traced_paths(workspace)
    everywhere = chosen is not None
    if not paths:
        return TracePlan(None)
    if os.environ.get(SWITCH_ENV, "").lower() == "off":
        why = f"turned off ({SWITCH_ENV}=off)"
        log(f"changed-line coverage is off: {why}; no branch's changed code reads verified")
        return TracePlan(None, paths, why, everywhere)
    try:
        site = tracer_site(workspace.base, log)
    except DifftestError as exc:
        why = f"coverage.py could not be installed beside the base ({exc.problem})"
        log(f"changed-line coverage is off: {why}")
        return TracePlan(None, paths, why, everywhere)
    spec = {"site": str(site), "paths": paths, "version": coverage.__version__}
    return TracePlan(spec, paths, everywhere=everywhere)


def traced_paths(workspace: Workspace) -> list[str]:
    """Every Python file under `vllm/` that a compared branch's environment changes, sorted."""
    changed: set[str] = set()
    for branch in workspace.branches:
        if branch.env is None:
            continue
        for entry in branch.env.fingerprint.get("changed_files", []):
            status, _, path = str(entry).partition(" ")
            if status != "D" and path.startswith("vllm/") and path.endswith(".py"):
                changed.add(path)
    return sorted(changed)


def tracer_site(base: BaseEnv, log: Log) -> str:
    """The folder holding coverage.py for the base's Python (what goes on the probe's path)."""
    return str(site_dir(suite_packages(base, [TRACER_REQUIREMENT], log)))
