"""Changed-line coverage as judged: one branch's word and line from its changed files, and the
union of the shards' coverage (`difftest merge`), both over the evidence's own models.

The rule (docs/guarantees.md): a branch is `verified` only when every statement it changes under
`vllm/` ran in one of its probes and every changed branch point was taken both ways; a changed file
that is not Python or does not parse, a changed line no run reached, a branch point taken one way
only, read `not verified`, naming them; a probe that could not vouch for its coverage (the tracer
did not start, was stopped or replaced by the branch's code, its output cannot be trusted) makes
the branch `unknown`, never `verified`.
"""

from __future__ import annotations

from collections.abc import Iterable

from difftest.core.evidence import BranchCoverage, ChangedFileCoverage, CoverageEvidence
from difftest.core.records import FileCoverage, ProbeCoverage


def judge_branch(branch: str, files: list[ChangedFileCoverage]) -> BranchCoverage:
    """The branch's word and line (see the module's rule)."""
    if not files:
        return BranchCoverage(
            branch=branch, status="unchanged", summary="changes no file under vllm/"
        )
    unknown = [f for f in files if f.status == "unknown"]
    if unknown:
        return BranchCoverage(
            branch=branch, status="unknown", summary=f"coverage unknown: {unknown[0].why}"
        )
    names = [f.file for f in files]
    traced = [f for f in files if f.status == "traced"]
    total = sum(len(f.lines) for f in traced)
    reached = sum(len(f.reached) for f in traced)
    parts = [f"changed lines reached {reached}/{total}"]
    unreached = [
        f"{short_name(f.file, names)} {line_ranges(f.unreached)}" for f in traced if f.unreached
    ]
    if unreached:
        parts.append("not reached: " + "; ".join(unreached))
    one_way = [
        f"{short_name(f.file, names)} {line_ranges(a for a, _b in f.arcs_missing)}"
        for f in traced
        if f.arcs_missing
    ]
    if one_way:
        parts.append("taken one way only: " + "; ".join(one_way))
    untraced = [f"{short_name(f.file, names)} ({f.why})" for f in files if f.status == "not traced"]
    if untraced:
        parts.append("not traced: " + "; ".join(untraced))
    deleted = [short_name(f.file, names) for f in files if f.why == "deleted"]
    if deleted:
        parts.append("deleted: " + ", ".join(deleted))
    verified = not unreached and not one_way and not untraced
    return BranchCoverage(
        branch=branch,
        status="verified" if verified else "not verified",
        summary="; ".join(parts),
    )


def summed(parts: Iterable[ProbeCoverage]) -> ProbeCoverage:
    """What several processes of one branch traced, as one: every line and arc any of them
    executed; `unknown` (the first one's reason) where any could not vouch for its part."""
    lines: dict[str, set[int]] = {}
    arcs: dict[str, set[tuple[int, int]]] = {}
    for part in parts:
        if part.status != "ok":
            return ProbeCoverage(status="unknown", why=part.why)
        for path, data in part.files.items():
            lines.setdefault(path, set()).update(data.lines)
            arcs.setdefault(path, set()).update((a, b) for a, b in data.arcs)
    files = {
        path: FileCoverage(lines=sorted(found), arcs=sorted(arcs.get(path, set())))
        for path, found in lines.items()
    }
    return ProbeCoverage(status="ok", files=files)


def line_ranges(numbers: Iterable[int]) -> str:
    """`1188-1190, 1201`."""
    ordered = sorted(set(numbers))
    spans: list[str] = []
    start = prev = None
    for n in [*ordered, None]:
        if n is not None and prev is not None and n == prev + 1:
            prev = n
            continue
        if start is not None:
            spans.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = n
    return ", ".join(spans)


def short_name(path: str, others: Iterable[str]) -> str:
    """The file's name alone where no other listed file shares it, else its path under `vllm/`."""
    name = path.rsplit("/", 1)[-1]
    clashes = [p for p in others if p != path and p.rsplit("/", 1)[-1] == name]
    return path.removeprefix("vllm/") if clashes else name


def merge_coverage(parts: list[CoverageEvidence | None]) -> CoverageEvidence | None:
    """The shards' coverage as one run's: a changed line is reached where any shard's runs reached
    it, an arc missing only where every shard misses it, a file unknown where any shard could not
    vouch for it; a shard without coverage, or shards that disagree on a file's changed lines,
    make the branches concerned unknown (never absent, never verified). None when no shard has
    any."""
    known = [p for p in parts if p is not None]
    if not known:
        return None
    files: dict[tuple[str, str], ChangedFileCoverage] = {}
    for part in known:
        for entry in part.changed:
            key = (entry.branch, entry.file)
            files[key] = _joined(files[key], entry) if key in files else entry
    branches = list(dict.fromkeys(b.branch for p in known for b in p.branches))
    if len(known) < len(parts):
        why = "a shard holds no coverage (written before schema 13, or nothing was traced there)"
        files = {
            k: f.model_copy(update={"status": "unknown", "why": why}) for k, f in files.items()
        }
    merged = list(files.values())
    return CoverageEvidence(
        traced=known[0].traced,
        why_not=next((p.why_not for p in known if p.why_not), ""),
        changed=merged,
        branches=[judge_branch(b, [f for f in merged if f.branch == b]) for b in branches],
    )


def _joined(one: ChangedFileCoverage, other: ChangedFileCoverage) -> ChangedFileCoverage:
    if one.status != "traced":
        return one
    if other.status != "traced":
        return other
    if one.lines != other.lines:
        why = "the shards disagree on its changed lines"
        return one.model_copy(update={"status": "unknown", "why": why})
    reached = sorted(set(one.reached) | set(other.reached))
    return one.model_copy(
        update={
            "reached": reached,
            "unreached": [n for n in one.lines if n not in reached],
            "arcs_missing": sorted(_missing(one, other) | _missing(other, one)),
        }
    )


def _missing(one: ChangedFileCoverage, other: ChangedFileCoverage) -> set[tuple[int, int]]:
    """The arcs `one` misses that `other` did not take: those out of a line `other` never reached,
    or that `other` misses too."""
    theirs = {(a, b) for a, b in other.arcs_missing}
    return {(a, b) for a, b in one.arcs_missing if a not in other.reached or (a, b) in theirs}
