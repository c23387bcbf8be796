"""What `difftest blame`'s report says, decided once for every format (terminal, Markdown).

Per finding: the hunks that make it, each with what the finding became without
it; every hunk left out with why (the minimal set makes the finding without it,
its step was left out, or it lies outside `vllm/` where no probe sees it); what
the rest of the change does without the culprits; and where the stats first part
from the oracle - with only the culprits, without them, on the base - read from
the runs' steps as `difftest show` reads them (`reports.trace`); and the command
that measures it again. Built from the evidence's `blame` and the recorded runs
only.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from difftest import tiers
from difftest.core.blame import BlameEvidence, BlameFinding, BlameHunk, listed
from difftest.core.values import format_value
from difftest.reports.sources import BlameReport
from difftest.reports.trace import FIELDS, build_trace

#: How many differing fields a first-step line names before "and N more".
FIELDS_NAMED = 3


@dataclass(frozen=True)
class HunkLine:
    hunk: BlameHunk
    #: Why it is in the set (what the finding became without it), or why it was left out.
    why: str
    #: The try that shows it (None: no try is needed to say it).
    proof: int | None = None


@dataclass(frozen=True)
class Parting:
    """Where one branch's stats first part from the oracle in the finding's run."""

    who: str
    branch: str
    #: "step 1: num_drafts 1 (oracle 2), ..." or "every step agrees with the oracle", or why there
    #: is nothing to read.
    where: str


@dataclass(frozen=True)
class FindingView:
    finding: BlameFinding
    headline: str
    #: Why the search ended without a set ("" when it found one).
    problem: str
    culprits: list[HunkLine]
    left_out: list[HunkLine]
    #: The culprits bound to the set (without any of them the rest does not run); the others make
    #: the finding. Empty: every culprit is needed for the finding itself.
    bound: list[HunkLine]
    rest: str
    label: str
    partings: list[Parting]
    reproduce: str


#: What a bound hunk is, in the words every format uses.
BOUND = "bound: without any one of them the rest does not run"


def units(view: FindingView) -> list[tuple[str, list[HunkLine]]]:
    """The culprits as the units a person reads: the hunks that make the finding, and those bound
    to them (needed for the branch to run at all); one unit when none is bound, or all are."""
    bound = {e.hunk.number for e in view.bound}
    makers = [e for e in view.culprits if e.hunk.number not in bound]
    if not bound:
        return [("", view.culprits)]
    if not makers:
        return [(BOUND + "; together they make it", view.culprits)]
    return [
        ("makes it: without it the rest runs and the finding goes", makers),
        (BOUND, view.bound),
    ]


def made_by(view: FindingView) -> str:
    """What follows "made by N hunks (try T)": `, each needed`, or how they split into units:
    `: #5 makes it, #3, #4, #6-#8 are bound to it` (terminal and Markdown)."""
    count = len(view.culprits)
    if not view.bound:
        return ", each needed" if count > 1 else ", needed"
    if len(view.bound) == count:
        return ", bound together"
    (_, makers), (_, bound) = units(view)
    verb, them = ("makes", "it") if len(makers) == 1 else ("make", "them")
    are = "is" if len(bound) == 1 else "are"
    return (
        f": {listed([e.hunk.number for e in makers])} {verb} it, "
        f"{listed([e.hunk.number for e in bound])} {are} bound to {them}"
    )


def hunk_place(hunk: BlameHunk) -> str:
    """`vllm/x.py 2110-2118 (+3 -0)`."""
    return f"{hunk.file} {hunk.lines} (+{hunk.added} -{hunk.removed})"


def summary(blame: BlameEvidence) -> str:
    """The change and the search in one line."""
    files = len({h.file for h in blame.hunks})
    carried = sum(h.carried for h in blame.hunks)
    steps = f", {len(blame.steps)} steps" if len(blame.steps) > 1 else ""
    reused = sum(t.reused for t in blame.tries)
    cached = f", {reused} from the result cache" if reused else ""
    return (
        f"{len(blame.hunks)} hunks in {files} files{steps} ({carried} under vllm/) · "
        f"{len(blame.tries)} sets tried ({blame.probes} probed{cached}) · {blame.wall_s:.1f} s"
    )


def views(report: BlameReport) -> list[FindingView]:
    blame = report.evidence.blame
    assert blame is not None, "a blame report holds the search"
    return [_view(report, blame, f) for f in blame.findings]


def _view(report: BlameReport, blame: BlameEvidence, finding: BlameFinding) -> FindingView:
    mine = [r for r in report.evidence.results if r.branch == blame.branch]
    runs = sum(r.scenario == finding.scenario for r in mine)
    headline = (
        f"{finding.verdict} in {len(finding.runs)} of {runs} runs on {blame.branch}: "
        f"{finding.reason}"
    )
    label = next(iter(finding.runs), "")
    reproduce = shlex.join(
        [
            "difftest",
            "run",
            "-c",
            str(Path(report.out) / blame.config),
            "--tier",
            finding.tier,
            "-k",
            finding.scenario,
        ]
    )
    if not finding.minimal:
        return FindingView(finding, headline, finding.problem, [], [], [], "", label, [], reproduce)
    culprits = [
        HunkLine(blame.hunk(n), _without(blame, finding, n), finding.needed.get(n))
        for n in finding.minimal
    ]
    left_out = [
        HunkLine(h, *_left_out(finding, h)) for h in blame.hunks if h.number not in finding.minimal
    ]
    return FindingView(
        finding,
        headline,
        "",
        culprits,
        left_out,
        [c for c in culprits if c.hunk.number in finding.bound],
        _rest(blame, finding),
        label,
        _partings(report, blame, finding, label),
        reproduce,
    )


def _without(blame: BlameEvidence, finding: BlameFinding, number: int) -> str:
    """What the finding became without hunk `number` (the set less that hunk, as tried)."""
    proof = finding.needed.get(number)
    if proof is None:
        return "not tried"
    if proof == 0:
        return f"nothing of the change is left, and {blame.against} does not show it"
    tried = blame.tried(proof)
    outcome = tried.outcomes.get(finding.scenario, "unmeasured")
    detail = tried.details.get(finding.scenario, "")
    if outcome == "does-not-apply":
        return f"the other hunks do not apply: {detail}"
    if outcome == "does-not-import":
        return f"the code does not import: {detail}"
    return detail


def _left_out(finding: BlameFinding, hunk: BlameHunk) -> tuple[str, int | None]:
    if not hunk.carried:
        return "outside vllm/: no branch environment carries it, so no probe can see it", None
    if finding.steps and hunk.step not in finding.steps:
        return f"its step {hunk.step} was left out: the finding persists without it", None
    return "the finding persists without it", finding.culprit


def _rest(blame: BlameEvidence, finding: BlameFinding) -> str:
    if finding.rest is None:
        return "nothing of the change under vllm/ is left without them"
    tried = blame.tried(finding.rest)
    detail = tried.details.get(finding.scenario, "")
    return f"{listed(tried.hunks)} (try {tried.number}): {detail}"


def _partings(
    report: BlameReport, blame: BlameEvidence, finding: BlameFinding, label: str
) -> list[Parting]:
    """Where the stats first part from the oracle in run `label`: with only the culprits, the rest
    of the change without them, the base, and the whole branch."""
    chosen: list[tuple[str, str | None]] = [
        ("with only these hunks", _branch_of(blame, finding.culprit)),
        ("without them (the rest of the change)", _branch_of(blame, finding.rest)),
        (f"{blame.against} (none of the change)", blame.against),
        (f"{blame.branch} (all of it)", blame.branch),
    ]
    return [
        Parting(who, branch, _where(report, finding, branch, label))
        for who, branch in chosen
        if branch is not None
    ]


def _branch_of(blame: BlameEvidence, number: int | None) -> str | None:
    if number is None or number == 0:
        return None
    return blame.tried(number).branch


def _where(report: BlameReport, finding: BlameFinding, branch: str, label: str) -> str:
    run = (report.recorded or {}).get((branch, finding.scenario, label))
    scenario = (report.scenarios or {}).get(finding.scenario)
    if run is None or scenario is None:
        return "no steps recorded"
    if not run.steps:
        return f"no steps recorded ({run.error or 'the run was not measured'})"
    trace = build_trace(
        tiers.probe_tier(finding.tier), scenario, run, report.evidence.reading, branch
    )
    first = trace.first
    if first is None:
        return "every step agrees with the oracle"
    step = trace.steps[first]
    named = []
    for name in step.differs[:FIELDS_NAMED]:
        got = "none" if not step.recorded.reported else _value(step.recorded.value(name))
        want = _value(step.expected.value(name)) if step.expected is not None else "?"
        named.append(f"{FIELDS[name]} {got} (oracle {want})")
    more = len(step.differs) - FIELDS_NAMED
    return f"step {step.step}: " + ", ".join(named) + (f" and {more} more" if more > 0 else "")


def _value(value: object) -> str:
    if isinstance(value, list):
        return " ".join(str(v) for v in value)
    return format_value(value)
