"""Each compared branch's changed lines against what its own probes executed
(`core.coverage.judge_branch` words it): what every report prints beside the verdicts, and what
keeps a gate from reading a plain pass."""

from __future__ import annotations

import io
import tokenize
from collections.abc import Mapping

from difftest.build.refs.diff import Change, changed_files, changed_lines, read_blob
from difftest.build.workspace import Workspace
from difftest.core.coverage import judge_branch
from difftest.core.errors import DifftestError
from difftest.core.evidence import BranchCoverage, ChangedFileCoverage, CoverageEvidence
from difftest.core.records import ProbeCoverage
from difftest.run.coverage.changed import (
    Executed,
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
            _file(workspace, base.resolved.sha, branch.resolved.sha, branch.name, c, executed, plan)
            for c in changed_files(workspace.repo, base.resolved.sha, branch.resolved.sha)
            if c.path.startswith("vllm/")
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
    """One changed file of `branch`; a deleted one is named, with no line left to run."""
    path = change.path
    if change.status == "D":
        return ChangedFileCoverage(branch=branch, file=path, status="traced", why="deleted")
    if not path.endswith(".py"):
        return untraced_file(branch, path, "not Python")
    if plan.spec is None:
        return unknown_file(branch, path, plan.why_not or "nothing was traced")
    if not any(path == p or (p.endswith("/") and path.startswith(p)) for p in plan.paths):
        return untraced_file(branch, path, "outside the traced files")
    if executed.traced_probes == 0:
        why = "no probe of this branch was traced (only probe tiers are: the tests tier is not yet)"
        return unknown_file(branch, path, why)
    if executed.unknown:
        return unknown_file(branch, path, executed.unknown[0])
    try:
        source = _text(read_blob(workspace.repo, sha, path))
        changed = changed_lines(workspace.repo, baseline_sha, sha, path)
    except DifftestError as exc:  # one file never loses the run's evidence
        return unknown_file(branch, path, f"could not be read from git ({exc.problem})")
    if source is None:
        return untraced_file(branch, path, "not text in its declared encoding")
    return file_coverage(branch, path, source, changed, executed)


def _text(blob: bytes) -> str | None:
    """The file's text, decoded as Python decodes a source file (a BOM, a coding line)."""
    try:
        encoding, _lines = tokenize.detect_encoding(io.BytesIO(blob).readline)
        return blob.decode(encoding).removeprefix("\ufeff")
    except (SyntaxError, LookupError, UnicodeDecodeError):
        return None
