"""Which changed lines of the fuzzed branches the examples reached, and when each first was.

Every example's job traces the compared branches' changed files (`run.coverage.tracing_job`), as
`run`'s jobs do; each warm probe reports what each example executed (`probe.tracing`). The host
sums them per branch and judges the sum exactly as `run` judges a branch's probes
(`run.coverage.judge.ChangedCode`: the files read from git and parsed once, judged again after
each example that ran something new): a campaign that found nothing on a branch whose changed
lines no example ran reads "not verified", naming them, never a plain "nothing found". Each time
an example adds to what a branch executed, the changed lines it reached first are noted with the
example's number and time: what `fuzz.json` reports as `first_reached`.

An example whose probe died or hung adds nothing (its process never reported what it executed;
the lines only it ran read unreached, never reached): the campaign's other examples keep counting.
A record that came back but cannot be vouched for (the tracer stopped or replaced, output that
cannot be trusted) makes the branch's coverage unknown for the whole campaign.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from difftest.build.workspace import Workspace
from difftest.core.evidence import CoverageEvidence
from difftest.core.fuzz import FirstReach
from difftest.run.coverage.changed import Executed
from difftest.run.coverage.judge import ChangedCode, targets_of
from difftest.run.coverage.tracing_job import TracePlan
from difftest.run.probes.runner import BranchRun


class FuzzReach:
    """The campaign's coverage of the fuzzed branches' changed lines, against `baseline`."""

    def __init__(self, workspace: Workspace, baseline: str, plan: TracePlan, tier: str) -> None:
        self.workspace = workspace
        self.baseline = baseline
        self.plan = plan
        self.tier = tier
        #: Per branch, what its examples executed, summed.
        self._executed: dict[str, Executed] = {}
        self._first: dict[tuple[str, str, int], FirstReach] = {}
        self._changed: ChangedCode | None = None
        #: Branches whose changed-line word can no longer change: all reached (`verified`), or
        #: `unknown` for the rest of the campaign. Their examples go untraced from then on.
        self._settled: set[str] = set()
        self._target_cache: dict[str, dict[str, tuple[set[int], set[tuple[int, int]]]]] = {}
        self._started = time.monotonic()

    def traces(self, branch: str) -> bool:
        """Whether `branch`'s next example is traced: a branch whose changed lines are judged (not
        the baseline) until its word is settled. Tracing costs a warm probe's runs about twice
        their time on Python 3.11 (docs/benchmarks.md), for nothing once every changed line ran."""
        return branch != self.baseline and branch not in self._settled

    def start_clock(self) -> None:
        """Times are seconds from here (the search's start, as a finding's are)."""
        self._started = time.monotonic()

    def add(self, example: int, delivered: Mapping[str, BranchRun]) -> None:
        """One example's answers (0: the warm-up job, which imports the branch's code)."""
        grew = False
        for branch, run in delivered.items():
            if run.coverage is not None and run.exited_cleanly:
                executed = self._executed.setdefault(branch, Executed())
                grew |= executed.add(self.tier, run.coverage)
                if executed.unknown:
                    self._settled.add(branch)
        if grew:
            after_s = max(0.0, time.monotonic() - self._started) if example else 0.0
            self._note_first(example, round(after_s, 3))

    def score(self, delivered: Mapping[str, BranchRun]) -> float:
        """How much of the judged branches' changed code this example ran: its changed statements
        and the arcs out of its changed branch points, counted per branch (what a guided search
        climbs; a branch no longer traced adds nothing)."""
        total = 0
        for branch, run in delivered.items():
            coverage = run.coverage
            if branch == self.baseline or coverage is None or coverage.status != "ok":
                continue
            for path, (lines, arcs) in self._targets(branch).items():
                data = coverage.files.get(path)
                if data is not None:
                    total += len(lines.intersection(data.lines))
                    total += len(arcs.intersection((a, b) for a, b in data.arcs))
        return float(total)

    def _targets(self, branch: str) -> dict[str, tuple[set[int], set[tuple[int, int]]]]:
        if branch not in self._target_cache:
            self._target_cache[branch] = targets_of(self._code(), branch)
        return self._target_cache[branch]

    def _code(self) -> ChangedCode:
        if self._changed is None:
            self._changed = ChangedCode.of(self.workspace, self.baseline, self.plan)
        return self._changed

    def evidence(self) -> CoverageEvidence:
        return self._code().judged(self._executed)

    def first_reached(self) -> list[FirstReach]:
        return sorted(self._first.values(), key=lambda r: (r.branch, r.file, r.line))

    def _note_first(self, example: int, after_s: float) -> None:
        evidence = self.evidence()
        self._settled |= {
            b.branch for b in evidence.branches if b.status in ("verified", "unknown", "unchanged")
        }
        for entry in evidence.changed:
            for line in entry.reached:
                key = (entry.branch, entry.file, line)
                if key not in self._first:
                    self._first[key] = FirstReach(
                        branch=entry.branch,
                        file=entry.file,
                        line=line,
                        example=example,
                        after_s=after_s,
                    )
