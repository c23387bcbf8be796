"""A branch's change as hunks: per step (a patch file, a replayed commit), per file, per hunk, as
`git diff` gives them; and any subset of them written back as a patch series.

`difftest blame` searches subsets of a change for the smallest one that still
makes a finding. A step's hunks are relative to the step before it, so a subset
is one patch per step holding only that step's chosen hunks, applied in order
by `git apply` like any patch series (a hunk whose context an earlier, left-out
hunk wrote does not apply: that subset cannot be measured). Within a file, the
new-side line numbers of the hunks kept are recomputed as `git diff` would
print them for that subset; `index` lines are dropped (they would name blobs
the subset never makes).
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass, replace

import git
from git.exc import GitCommandError

from difftest.build.refs._git import git_message
from difftest.build.refs.repo import repo_label
from difftest.core.errors import RefError

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(.*)$")
#: How diff text is decoded: any byte survives the round trip back into a patch file.
ENCODING, ERRORS = "utf-8", "surrogateescape"


@dataclass(frozen=True)
class Hunk:
    """One hunk of one file in one step; `number` counts from 1 across the whole change."""

    number: int
    #: Index of its step in the change (0-based).
    step: int
    path: str
    #: The file's diff header (`diff --git`, modes, `---`/`+++`), without its `index` line.
    header: str
    old_start: int
    old_lines: int
    new_start: int
    new_lines: int
    #: What follows the second `@@` (git's function context), and the hunk's lines.
    section: str
    body: str

    @property
    def header_only(self) -> bool:
        """A file change without text lines (a mode change, an empty new file)."""
        return not self.body and self.old_lines == self.new_lines == 0

    @property
    def text(self) -> str:
        """The hunk as `git diff` printed it (its `@@` line and body), or the file header alone."""
        if self.header_only:
            return self.header
        return self.range_line(self.new_start) + self.body

    def range_line(self, new_start: int) -> str:
        return (
            f"@@ -{_span(self.old_start, self.old_lines)} "
            f"+{_span(new_start, self.new_lines)} @@{self.section}\n"
        )

    @property
    def delta(self) -> int:
        return self.new_lines - self.old_lines

    @property
    def added(self) -> int:
        return sum(line.startswith("+") for line in self.body.splitlines())

    @property
    def removed(self) -> int:
        return sum(line.startswith("-") for line in self.body.splitlines())

    @property
    def lines(self) -> str:
        """Where it lands in the file after its step (`2110-2118`; a pure deletion: where it
        was)."""
        start, count = (self.new_start, self.new_lines) if self.new_lines else (self.old_start, 0)
        return str(start) if count <= 1 else f"{start}-{start + count - 1}"


@dataclass(frozen=True)
class Step:
    """One step of a change: the diff from `parent` to `commit`, split into hunks."""

    index: int
    parent: str
    commit: str
    #: The commit's subject (`Apply x.patch`, a replayed commit's own subject).
    label: str
    hunks: tuple[Hunk, ...]


def step_commits(repo: git.Repo, start: str, tip: str) -> list[tuple[str, str]]:
    """(parent, commit) for each commit on the first-parent line from `start` (exclusive) to `tip`:
    the steps difftest committed for a branch's patches and replayed commits."""
    try:
        listed = repo.git.rev_list("--reverse", "--first-parent", f"{start}..{tip}").split()
    except GitCommandError as exc:
        raise RefError(
            f"cannot list the commits from {start[:12]} to {tip[:12]} in {repo_label(repo)}: "
            f"{git_message(exc)}",
            f"check that {repo_label(repo)} is intact (`git fsck`)",
        ) from None
    parents = [start, *listed[:-1]]
    return list(zip(parents, listed, strict=True))


def split_change(repo: git.Repo, parts: list[tuple[str, str]]) -> list[Step]:
    """Each (parent, commit) diff as a step of hunks, numbered across the change in order."""
    steps: list[Step] = []
    number = 0
    for index, (parent, commit) in enumerate(parts):
        hunks = []
        for hunk in _hunks(_diff(repo, parent, commit), index):
            number += 1
            hunks.append(replace(hunk, number=number))
        steps.append(Step(index, parent, commit, _subject(repo, commit), tuple(hunks)))
    return steps


def subset_patches(steps: list[Step], chosen: Collection[int]) -> list[tuple[int, str]]:
    """(step index, patch text) for every step holding a chosen hunk (by `number`): each patch
    holds that step's chosen hunks only, in order, file by file."""
    wanted = set(chosen)
    out = []
    for step in steps:
        text = _step_patch(step, wanted)
        if text:
            out.append((step.index, text))
    return out


def patch_bytes(text: str) -> bytes:
    """A patch's text as the bytes git gave (any byte it held survives)."""
    return text.encode(ENCODING, ERRORS)


def _step_patch(step: Step, wanted: set[int]) -> str:
    parts: list[str] = []
    by_file: dict[str, list[Hunk]] = {}
    for hunk in step.hunks:
        by_file.setdefault(hunk.path, []).append(hunk)
    for hunks in by_file.values():
        if not any(h.number in wanted for h in hunks):
            continue
        parts.append(hunks[0].header)
        lost = 0  # the line count the left-out hunks before this one would have added
        for hunk in hunks:
            if hunk.number not in wanted:
                lost += hunk.delta
            elif not hunk.header_only:
                parts.append(hunk.range_line(hunk.new_start - lost) + hunk.body)
    return "".join(parts)


def _span(start: int, count: int) -> str:
    return str(start) if count == 1 else f"{start},{count}"


def _diff(repo: git.Repo, parent: str, commit: str) -> str:
    """`git diff-tree -p` of one step (plumbing: the user's diff settings do not apply)."""
    try:
        raw = repo.git.diff_tree(
            "-r",
            "-p",
            "--no-renames",
            "--no-ext-diff",
            "--no-textconv",
            "--no-color",
            "--src-prefix=a/",
            "--dst-prefix=b/",
            parent,
            commit,
            stdout_as_string=False,
            strip_newline_in_stdout=False,
        )
    except GitCommandError as exc:
        raise RefError(
            f"cannot diff {parent[:12]} against {commit[:12]} in {repo_label(repo)}: "
            f"{git_message(exc)}",
            f"check that {repo_label(repo)} is intact (`git fsck`)",
        ) from None
    return bytes(raw).decode(ENCODING, ERRORS)


def _subject(repo: git.Repo, commit: str) -> str:
    return str(repo.git.log("-1", "--format=%s", commit))


def _hunks(diff: str, step: int) -> list[Hunk]:
    """Every hunk of one diff, file by file; a file change with no hunk (a mode change, an empty
    new file) is one header-only hunk."""
    out: list[Hunk] = []
    files = re.split(r"(?m)^(?=diff --git )", diff)
    for chunk in files:
        if not chunk.startswith("diff --git "):
            continue
        lines = chunk.splitlines(keepends=True)
        first = next((i for i, line in enumerate(lines) if line.startswith("@@ ")), len(lines))
        header = "".join(line for line in lines[:first] if not line.startswith("index "))
        path = _path(header)
        starts = [i for i in range(first, len(lines)) if lines[i].startswith("@@ ")]
        if not starts:
            out.append(Hunk(0, step, path, header, 0, 0, 0, 0, "", ""))
            continue
        for at, end in zip(starts, [*starts[1:], len(lines)], strict=True):
            match = _HUNK.match(lines[at].rstrip("\n"))
            if match is None:
                raise RefError(
                    f"{path}: cannot read the hunk header {lines[at].strip()!r}",
                    "report it: git printed a diff difftest does not understand",
                )
            old_start, old_lines, new_start, new_lines, section = match.groups()
            out.append(
                Hunk(
                    0,
                    step,
                    path,
                    header,
                    int(old_start),
                    1 if old_lines is None else int(old_lines),
                    int(new_start),
                    1 if new_lines is None else int(new_lines),
                    section,
                    "".join(lines[at + 1 : end]),
                )
            )
    return out


def _path(header: str) -> str:
    """The file a diff header is about: its `+++ b/` side, or `--- a/` for a deletion."""
    for line in header.splitlines():
        if line.startswith("+++ b/"):
            return line.removeprefix("+++ b/")
    for line in header.splitlines():
        if line.startswith("--- a/"):
            return line.removeprefix("--- a/")
    first = header.splitlines()[0].removeprefix("diff --git ")
    return first.split(" b/", 1)[-1]
