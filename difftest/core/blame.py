"""What `difftest blame` decides and records, as data: a finding, whether a set of hunks makes it,
and the record of the search (the evidence's `blame`).

A *finding* is what a branch shows on one scenario that its base does not: the
runs with its most severe verdict (broken, else diverge) and, for each, what
makes that verdict - the invariants broken (with the requests they name; a crash
or a hang with what broke and where, line numbers aside), or the counters that
differ with their measured values. A set of hunks applied alone on the base
*makes the finding* when it gives the same verdict on the same runs, for the
same reasons: nothing less (a crash where the branch lost stats, or a probe that
dies where the branch raised, is another finding) and nothing more (one more run
broken is another finding too).
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Literal

from pydantic import BaseModel, Field

from difftest.core.breakage import COMPLETES
from difftest.core.records import Result, Verdict
from difftest.core.values import format_value
from difftest.core.verdicts import difference_reason, first_reason, violation_reason

#: What a set of hunks did, for one finding: made it, made something else (or nothing), or could
#: not be measured - its hunks do not apply, its code does not import, or its runs could not be
#: measured.
Outcome = Literal["reproduces", "gone", "does-not-apply", "does-not-import", "unmeasured"]
#: Outcomes that measured nothing: never a finding, never the end of the search.
UNMEASURED: frozenset[Outcome] = frozenset({"does-not-apply", "does-not-import", "unmeasured"})
#: The verdicts a finding can have, most severe first (a run that could not be measured is none).
FINDING_VERDICTS: tuple[Verdict, ...] = ("broken", "diverge")
#: What a set of hunks was tried for: the whole change, its steps, its hunks, the rest of the
#: change without the culprits, or `again`: the whole change and the minimal set probed once more
#: (never from a cache) before they are reported, so a finding that comes and goes is never blamed.
Phase = Literal["whole", "steps", "hunks", "rest", "again"]
#: Times the whole change and the minimal set are probed again before a minimal set is reported.
MEASURED_AGAIN = 3

#: Run label -> what makes the verdict in that run.
Signature = dict[str, list[str]]


def what(result: Result) -> list[str]:
    """What makes `result`'s verdict: each invariant broken (and the requests or counter it names),
    or each counter that differs with the value measured; nothing for a pass or an error."""
    if result.verdict == "broken":
        found = {
            v.invariant
            + (f" [{v.counter}]" if v.counter else "")
            + (f" ({', '.join(v.requests)})" if v.requests else "")
            + (f": {_without_line_numbers(v.cause)}" if v.cause else "")
            for v in result.violations
        }
        return sorted(found)
    if result.verdict == "diverge":
        return [f"{d.counter} {format_value(d.measured)}" for d in result.differences]
    return []


def _without_line_numbers(cause: str) -> str:
    """A crash's cause without its frames' line numbers (`file:123 in f` -> `file in f`): a
    harmless hunk above the crash site moves it, and must not read as another crash."""
    return re.sub(r":\d+ in ", " in ", cause)


def signature(results: list[Result], verdict: Verdict) -> Signature:
    """The runs of `results` with `verdict`, each with what makes it."""
    return {r.label: what(r) for r in results if r.verdict == verdict}


def finding_of(branch: list[Result], base: list[Result]) -> tuple[Verdict, Signature] | None:
    """What `branch` shows on one scenario that `base` does not: its most severe verdict whose runs
    and reasons differ from the base's; None when it shows nothing the base does not."""
    for verdict in FINDING_VERDICTS:
        mine = signature(branch, verdict)
        if mine and mine != signature(base, verdict):
            return verdict, mine
    return None


def own_reason(result: Result, base: list[Result]) -> str:
    """`result`'s first reason that its base's run of the same label does not share (a broken
    invariant the base keeps, a counter the base measures otherwise): what makes the branch
    worse, not a difference both show. `first_reason` where the base has no such run or shares
    every reason."""
    theirs = next((r for r in base if r.label == result.label), None)
    if theirs is None or result.verdict == "error":
        return first_reason(result)
    if result.verdict == "broken":
        kept = {(v.invariant, v.detail) for v in theirs.violations}
        for v in result.violations:
            if (v.invariant, v.detail) not in kept:
                return violation_reason(v)
    measured = {d.counter: d.measured for d in theirs.differences}
    for d in result.differences:
        if d.counter not in measured or measured[d.counter] != d.measured:
            return difference_reason(d)
    return first_reason(result)


def makes(finding: BlameFinding, results: list[Result]) -> bool:
    """Whether `results` (one scenario, every run) show exactly this finding."""
    return signature(results, finding.verdict) == finding.runs


def does_not_run(outcome: Outcome, results: list[Result]) -> bool:
    """A set that does not run: its hunks do not apply, its code does not import, it could not be
    measured, or a run crashed or hung where the base completes it."""
    if outcome in UNMEASURED:
        return True
    return any(v.invariant == COMPLETES for r in results for v in r.violations)


def is_a_crash(finding: BlameFinding) -> bool:
    """The finding is itself a crash or a hang: a hunk whose absence crashes it otherwise is not
    merely bound to the rest."""
    return any(w.startswith(COMPLETES) for whats in finding.runs.values() for w in whats)


def listed(numbers: list[int]) -> str:
    """Hunk numbers as ranges, for a person: `#3-#8, #11`."""
    runs: list[list[int]] = []
    for number in sorted(numbers):
        if runs and number == runs[-1][-1] + 1:
            runs[-1].append(number)
        else:
            runs.append([number])
    return ", ".join(f"#{r[0]}" if len(r) == 1 else f"#{r[0]}-#{r[-1]}" for r in runs) or "none"


def describe(results: list[Result]) -> str:
    """One line on what a set of hunks did on one scenario: the verdict counts and the most severe
    result's first reason."""
    if not results:
        return "no result"
    counts: Counter[str] = Counter(r.verdict for r in results)
    worst = next((v for v in ("broken", "error", "diverge") if counts[v]), "pass")
    if worst == "pass":
        return f"passes all {len(results)} runs"
    words = {"broken": "broken", "error": "could not be measured", "diverge": "diverges"}
    example = next(r for r in results if r.verdict == worst)
    return f"{words[worst]} in {counts[worst]}/{len(results)} runs: {first_reason(example)}"


class BlameHunk(BaseModel):
    """One hunk of the blamed change, as `git diff` gave it."""

    number: int
    #: Its step in the change (1-based: the patch, or the replayed commit).
    step: int
    file: str
    #: Where it lands in the file after its step ("2110-2118").
    lines: str
    added: int
    removed: int
    #: Its `@@` line and body (a file header alone for a change without text lines).
    text: str
    #: It lies under `vllm/`: a branch environment carries it (others never reach a probe).
    carried: bool


class BlameStep(BaseModel):
    """One step of the blamed change: a patch file or a replayed commit (or the whole diff)."""

    number: int
    label: str
    parent: str
    commit: str


class SubsetTry(BaseModel):
    """One set of hunks, applied alone on the base and measured (or not)."""

    number: int
    hunks: list[int]
    phase: Phase
    #: sha256 of its patch series: tries are cached by it.
    digest: str
    #: The branch it was measured as; None when its hunks did not apply.
    branch: str | None = None
    #: Scenario -> what it did there, and that in one line.
    outcomes: dict[str, Outcome] = Field(default_factory=dict)
    details: dict[str, str] = Field(default_factory=dict)
    #: A probe measured it now; False: its runs came from the result cache, or nothing could run.
    probed: bool = False
    reused: bool = False
    seconds: float = 0.0


class BlameFinding(BaseModel):
    """One finding and the hunks that make it."""

    scenario: str
    tier: str
    verdict: Verdict
    #: The finding: run label -> what makes the verdict there.
    runs: Signature
    #: The first run's reason, in one line.
    reason: str
    #: The hunks that make it, by number (empty when the search could not say: `problem`).
    minimal: list[int] = Field(default_factory=list)
    problem: str = ""
    #: The steps kept before the hunks were searched (all of them for a change of one step).
    steps: list[int] = Field(default_factory=list)
    #: Hunk number -> the try that shows the finding goes without it.
    needed: dict[int, int] = Field(default_factory=dict)
    #: The try of the minimal set, and of the rest of the change without it (None: nothing left).
    culprit: int | None = None
    rest: int | None = None
    #: Every try the search asked about, in order (a try asked twice is measured once).
    asked: list[int] = Field(default_factory=list)
    #: Hunks of the minimal set bound to it: without any one of them the rest does not run
    #: (`does_not_run`), so they are needed for the branch to run at all, not for the finding; the
    #: other hunks of the set are the unit that makes it. Empty when the finding is a crash itself.
    bound: list[int] = Field(default_factory=list)
    #: The tries that probed the whole change and the minimal set again (`MEASURED_AGAIN` each).
    again: list[int] = Field(default_factory=list)
    #: The finding did not come back every time the same code was probed: no set is reported.
    unstable: bool = False


class BlameEvidence(BaseModel):
    """The search of `difftest blame`: the change, every set of hunks tried, and each finding's
    minimal set (schema 11 of the evidence file)."""

    branch: str
    #: The base the hunks were applied on.
    against: str
    steps: list[BlameStep]
    hunks: list[BlameHunk]
    findings: list[BlameFinding]
    tries: list[SubsetTry]
    #: The config pinning every measured set as a patch series, relative to the evidence's folder.
    config: str
    #: Probes started, and the search's wall time.
    probes: int = 0
    wall_s: float = 0.0

    def tried(self, number: int) -> SubsetTry:
        return next(t for t in self.tries if t.number == number)

    def hunk(self, number: int) -> BlameHunk:
        return next(h for h in self.hunks if h.number == number)
