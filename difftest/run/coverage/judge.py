"""Each compared branch's changed lines against what its own probes executed
(`core.coverage.judge_branch` words it): what every report prints beside the verdicts, and what
keeps a gate from reading a plain pass."""

from __future__ import annotations

from collections.abc import Mapping

from difftest.build.refs.diff import Change, changed_files, read_blob
from difftest.build.workspace import Workspace
from difftest.core.coverage import judge_branch
from difftest.core.evidence import BranchCoverage, ChangedFileCoverage, CoverageEvidence
from difftest.core.records import ProbeCoverage
from difftest.run.coverage.changed import (
    Executed,
    changed_line_numbers,
    file_coverage,
    unknown_file,
    untraced_file,
)
from difftest.run.coverage.tracing_job import TracePlan


def coverage_evidence(
    workspace: Workspace,
    baseline: str,
    traced: Mapping[str, Mapping[str, ProbeCoverage | None]],
    plan: TracePlan,
) -> CoverageEvidence:
    """Every branch but the baseline, against the baseline; `traced` is branch -> tier -> what that
    probe traced."""
    base = next((b for b in workspace.branches if b.name == baseline), None)
    files: list[ChangedFileCoverage] = []
    verdicts: list[BranchCoverage] = []
    for branch in workspace.branches:
        if base is None or branch.name == baseline or branch.env is None:
            continue
        executed = Executed.of(traced.get(branch.name, {}).items())
        mine = [
            _file(
                workspace,
                base.resolved.sha,
                branch.resolved.sha,
                branch.name,
                change,
                executed,
                plan,
            )
            for change in changed_files(workspace.repo, base.resolved.sha, branch.resolved.sha)
            if change.status != "D" and change.path.startswith("vllm/")
        ]
        files += mine
        verdicts.append(judge_branch(branch.name, mine))
    return CoverageEvidence(
        traced=plan.paths if plan.spec is not None else [],
        why_not=plan.why_not,
        changed=files,
        branches=verdicts,
    )


def _file(
    workspace: Workspace,
    baseline_sha: str,
    sha: str,
    branch: str,
    change: Change,
    executed: Executed,
    plan: TracePlan,
) -> ChangedFileCoverage:
    """One changed file of `branch` (deleted ones have no line left to run, and are not listed)."""
    path = change.path
    if not path.endswith(".py"):
        return untraced_file(branch, path, "not Python")
    if plan.spec is None:
        return unknown_file(branch, path, plan.why_not or "nothing was traced")
    if not any(path == p or (p.endswith("/") and path.startswith(p)) for p in plan.paths):
        return untraced_file(branch, path, "outside the traced files")
    if executed.traced_probes == 0:
        return unknown_file(branch, path, "no probe of this branch ran")
    if executed.unknown:
        return unknown_file(branch, path, executed.unknown[0])
    source = _text(read_blob(workspace.repo, sha, path))
    if source is None:
        return untraced_file(branch, path, "not UTF-8 text")
    old = None if change.status == "A" else _text(read_blob(workspace.repo, baseline_sha, path))
    return file_coverage(branch, path, source, changed_line_numbers(old, source), executed)


def _text(blob: bytes) -> str | None:
    try:
        return blob.decode("utf-8")
    except UnicodeDecodeError:
        return None
