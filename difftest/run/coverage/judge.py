"""Each compared branch's changed lines against what its own probes executed
(`core.coverage.judge_branch` words it): what every report prints beside the verdicts, and what
keeps a gate from reading a plain pass."""

from __future__ import annotations

import io
import tokenize
from collections.abc import Mapping
from dataclasses import dataclass

from difftest.build.refs.diff import Change, changed_files, changed_lines, read_blob
from difftest.build.workspace import Workspace
from difftest.core.coverage import judge_branch
from difftest.core.errors import DifftestError
from difftest.core.evidence import BranchCoverage, ChangedFileCoverage, CoverageEvidence
from difftest.core.records import ProbeCoverage
from difftest.run.coverage.changed import (
    Executed,
    FileAnalysis,
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
    return ChangedCode.of(workspace, baseline, plan).evidence(traced)


@dataclass(frozen=True)
class _Changed:
    """One changed file of a branch, as far as it can be judged before anything ran: decided
    (`final`: deleted, not Python, not traced), unreadable (`unreadable`: judged so once its
    probes vouch for their coverage), or to be judged line by line (`analysis`)."""

    change: Change
    final: ChangedFileCoverage | None = None
    unreadable: ChangedFileCoverage | None = None
    analysis: FileAnalysis | None = None


@dataclass(frozen=True)
class ChangedCode:
    """Every compared branch's changed files under `vllm/`, read from git and parsed once; judged
    against what the branches' probes executed as often as asked (`fuzz` judges after every
    example that ran something new)."""

    plan: TracePlan
    #: branch -> its changed files, in git's order (the baseline is not among them).
    files: dict[str, list[_Changed]]

    @classmethod
    def of(cls, workspace: Workspace, baseline: str, plan: TracePlan) -> ChangedCode:
        base = next((b for b in workspace.branches if b.name == baseline), None)
        files: dict[str, list[_Changed]] = {}
        for branch in workspace.branches:
            if base is None or branch.name == baseline or branch.env is None:
                continue
            files[branch.name] = [
                _prepared(workspace, base.resolved.sha, branch.resolved.sha, branch.name, c, plan)
                for c in changed_files(workspace.repo, base.resolved.sha, branch.resolved.sha)
                if c.path.startswith("vllm/")
            ]
        return cls(plan, files)

    def evidence(
        self, traced: Mapping[str, Mapping[str, ProbeCoverage | None]]
    ) -> CoverageEvidence:
        """Judged against what each branch's probes traced (branch -> tier -> coverage)."""
        return self.judged({b: Executed.of(traced.get(b, {}).items()) for b in self.files})

    def judged(self, executed_by_branch: Mapping[str, Executed]) -> CoverageEvidence:
        """Judged against what each branch executed, already summed."""
        files: list[ChangedFileCoverage] = []
        verdicts: list[BranchCoverage] = []
        for branch, changed in self.files.items():
            executed = executed_by_branch.get(branch) or Executed()
            mine = [_judged(branch, c, executed) for c in changed]
            files += mine
            verdicts.append(judge_branch(branch, mine))
        return CoverageEvidence(
            traced=self.plan.paths if self.plan.spec is not None else [],
            why_not=self.plan.why_not,
            changed=files,
            branches=verdicts,
        )


def targets_of(code: ChangedCode, branch: str) -> dict[str, tuple[set[int], set[tuple[int, int]]]]:
    """`branch`'s changed files that can be judged line by line -> their changed statements and
    the arcs out of their changed branch points."""
    return {
        c.change.path: c.analysis.targets()
        for c in code.files.get(branch, [])
        if c.analysis is not None
    }


def _prepared(
    workspace: Workspace,
    baseline_sha: str,
    sha: str,
    branch: str,
    change: Change,
    plan: TracePlan,
) -> _Changed:
    """What can be known of one changed file of `branch` before anything ran."""
    path = change.path
    if change.status == "D":
        deleted = ChangedFileCoverage(branch=branch, file=path, status="traced", why="deleted")
        return _Changed(change, final=deleted)
    if not path.endswith(".py"):
        return _Changed(change, final=untraced_file(branch, path, "not Python"))
    if plan.spec is None:
        why = plan.why_not or "nothing was traced"
        return _Changed(change, final=unknown_file(branch, path, why))
    if not any(path == p or (p.endswith("/") and path.startswith(p)) for p in plan.paths):
        return _Changed(change, final=untraced_file(branch, path, "outside the traced files"))
    try:
        source = _text(read_blob(workspace.repo, sha, path))
        changed = changed_lines(workspace.repo, baseline_sha, sha, path)
    except DifftestError as exc:  # one file never loses the run's evidence
        why = f"could not be read from git ({exc.problem})"
        return _Changed(change, unreadable=unknown_file(branch, path, why))
    if source is None:
        why = "not text in its declared encoding"
        return _Changed(change, unreadable=untraced_file(branch, path, why))
    return _Changed(change, analysis=FileAnalysis(path, source, changed))


def _judged(branch: str, changed: _Changed, executed: Executed) -> ChangedFileCoverage:
    """One changed file of `branch` against what its probes executed."""
    if changed.final is not None:
        return changed.final
    path = changed.change.path
    if executed.traced_probes == 0:
        why = "no probe or test session of this branch was traced"
        return unknown_file(branch, path, why)
    if executed.unknown:
        return unknown_file(branch, path, executed.unknown[0])
    if changed.unreadable is not None:
        return changed.unreadable
    assert changed.analysis is not None
    return changed.analysis.judge(branch, executed)


def _text(blob: bytes) -> str | None:
    """The file's text, decoded as Python decodes a source file (a BOM, a coding line)."""
    try:
        encoding, _lines = tokenize.detect_encoding(io.BytesIO(blob).readline)
        return blob.decode(encoding).removeprefix("\ufeff")
    except (SyntaxError, LookupError, UnicodeDecodeError):
        return None
