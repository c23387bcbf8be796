"""One branch's probes run traced over all of `vllm/`: what `difftest coverage` reports and what
the gate's skip rule reads of its base. Results come from and go to the result cache, as `run`'s
do (traced results are keyed apart from untraced ones)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from difftest.build.envs.base import Log
from difftest.core.config import Config
from difftest.core.errors import NotMeasured
from difftest.run.context import ProgressFactory, no_progress
from difftest.run.coverage.changed import Executed
from difftest.run.coverage.reach import vllm_root
from difftest.run.pipeline import CompareRequest, Comparison, compare, traced_by_branch

#: What is traced: all of vLLM, so the map also shows what runs outside the stats path.
TRACED = ("vllm/",)


@dataclass(frozen=True)
class TracedRun:
    """What one branch's probes executed, and where it came from."""

    comparison: Comparison
    branch: str
    executed: Executed
    #: The tiers whose probes were traced.
    tiers: list[str]
    #: The scenarios those tiers ran (those the base can run).
    scenarios: int
    #: The commit the branch was built from.
    sha: str
    #: The branch's `vllm/` folder, as its probes imported it.
    root: Path
    #: tier -> why that tier's probe failed (its coverage is partial).
    failures: dict[str, str]


def run_traced(
    config: Config,
    request: CompareRequest,
    branch: str,
    log: Log,
    progress: ProgressFactory = no_progress,
) -> TracedRun:
    """`branch` alone, as its own baseline, traced over `TRACED`."""
    request = dataclasses.replace(request, branches=[branch], baseline=branch, trace_paths=TRACED)
    comparison = compare(config, request, log, progress)
    workspace = comparison.workspace
    built = next((b for b in workspace.branches if b.env is not None), None)
    if built is None or built.env is None:
        raise NotMeasured(
            f"{branch} has no environment to trace",
            "see the log above for why it could not be built",
        )
    traced = traced_by_branch(comparison.outcomes).get(built.name, {})
    tiers = [tier for tier, coverage in traced.items() if coverage is not None]
    failures = {
        tier: str(outcome.probes[built.name].error)
        for tier, outcome in comparison.outcomes.items()
        if built.name in outcome.probes and outcome.probes[built.name].error
    }
    return TracedRun(
        comparison=comparison,
        branch=built.name,
        executed=Executed.of(traced.items()),
        tiers=tiers,
        scenarios=sum(
            len(s.scenarios) - len(s.skipped) for s in comparison.selected if s.tier.name in tiers
        ),
        sha=built.resolved.sha,
        root=vllm_root(workspace, built.env.path),
        failures=failures,
    )
