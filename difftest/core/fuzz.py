"""What `difftest fuzz` finds, as data: kinds of failure, findings, and the summary of a search.

A *kind* is what makes two failures different (issue 12): the branch, the
verdict, and the counter (diverge: the first counter that differs), the
invariant (broken: each one broken) or the failure (error: the exception type,
`timeout`, `did-not-finish`, or `probe` when the probe process itself failed).
The search keeps the first example of every kind, shrunk; a *finding* is one
such minimal scenario with every kind it was kept for.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from difftest.core.errors import EXIT_FAILED, EXIT_OK, EXIT_UNMEASURED, EXIT_USAGE
from difftest.core.evidence import BranchCoverage, CoverageEvidence
from difftest.core.records import ProbeRun, Reading, Result, Verdict
from difftest.core.values import format_value

#: How reasons name what a branch is compared with when no `--against` branch is given.
ORACLE = "oracle"
#: `what` of an error whose run has no failure record: the probe process died, hung or wrote a bad
#: record.
PROBE_FAILURE = "probe"


class Kind(BaseModel):
    model_config = ConfigDict(frozen=True)

    branch: str
    verdict: Verdict
    #: The counter (diverge), the invariant (broken) or the failure (error).
    what: str


class Observation(BaseModel):
    """One kind as a run showed it, with the one-line reason reports print."""

    kind: Kind
    label: str
    reason: str


def observations(
    results: list[Result], runs: list[ProbeRun], reference: str = ORACLE
) -> list[Observation]:
    """The kinds these results show, each once (its first run), in the order of `results`."""
    by_label = {r.label: r for r in runs}
    seen: set[Kind] = set()
    out: list[Observation] = []
    for result in results:
        for kind, reason in _kinds(result, by_label.get(result.label), reference):
            if kind not in seen:
                seen.add(kind)
                out.append(Observation(kind=kind, label=result.label, reason=reason))
    return out


def _kinds(result: Result, run: ProbeRun | None, reference: str) -> list[tuple[Kind, str]]:
    make = lambda what: Kind(branch=result.branch, verdict=result.verdict, what=what)  # noqa: E731
    if result.verdict == "diverge" and result.differences:
        d = result.differences[0]
        return [
            (
                make(d.counter),
                f"{d.counter}: measured {format_value(d.measured)}, {reference} "
                f"{format_value(d.expected)}",
            )
        ]
    if result.verdict == "broken":
        firsts: dict[str, str] = {}
        for v in result.violations:
            firsts.setdefault(v.invariant, f"{v.invariant}: {v.detail}")
        return [(make(name), reason) for name, reason in firsts.items()]
    if result.verdict == "error":
        failure = run.failure if run is not None else None
        if failure is None:
            what = PROBE_FAILURE
        else:
            what = failure.type if failure.kind == "exception" else failure.kind
        return [(make(what), result.error or "could not measure")]
    return []


class Finding(BaseModel):
    """A minimal scenario and the kinds it was kept for."""

    #: The scenario's name (its file's stem), what `run -k` selects.
    name: str
    #: Paths relative to the fuzz output folder.
    file: str
    evidence: str
    observations: list[Observation]
    #: The round of the search that found it, and seconds from the start of the search.
    round: int
    found_after_s: float
    #: Whether probing the written file again showed every kind again.
    reproduced: bool = True

    @property
    def verdicts(self) -> set[Verdict]:
        return {o.kind.verdict for o in self.observations}


class FirstReach(BaseModel):
    """When a changed line of a fuzzed branch was first executed by an example."""

    branch: str
    file: str
    #: The line in the branch's file.
    line: int
    #: The example that reached it first (1 = the first scenario probed; 0 = the warm-up job, which
    #: only imports the branch's code) and seconds from the start of the search.
    example: int
    after_s: float


class FuzzReport(BaseModel):
    """Everything the fuzz summary is rendered from (`fuzz.json`)."""

    #: 2: `coverage` and `first_reached`.
    schema_version: int = 2
    command: list[str] = Field(default_factory=list)
    tier: str
    seed: int
    #: What was asked: examples per round and/or seconds.
    examples: int | None = None
    time_s: float | None = None
    reading: Reading
    #: The branch compared with instead of the oracle, if any.
    against: str | None = None
    #: Whether the search was steered toward the fuzzed branches' changed code (`--guide`).
    guided: bool = False
    #: The baseline of the config written beside the findings (`found/branches.yaml`); None before
    #: any finding is written.
    baseline: str | None = None
    branches: list[str]
    #: The output folder as the command named it; finding paths are relative to it.
    out: str = "out"
    #: Branches that could not be fuzzed at all, with the reason.
    unmeasured: dict[str, str] = Field(default_factory=dict)
    #: Test cases of the last round (the examples searched), of all rounds, distinct scenarios
    #: probed.
    searched: int = 0
    calls: int = 0
    probed: int = 0
    rounds: int = 0
    elapsed_s: float = 0.0
    #: Why the search stopped before its examples ran out: `time`, `interrupted` or `flaky` (an
    #: example did not fail again when replayed: a branch that is not deterministic), with the
    #: reason.
    stopped: str | None = None
    stop_reason: str = ""
    #: Probe processes started per branch (1 unless a probe crashed or hung and was restarted).
    probe_starts: dict[str, int] = Field(default_factory=dict)
    findings: list[Finding] = Field(default_factory=list)
    #: What the examples executed of each fuzzed branch's changed lines (against the `--against`
    #: branch, else the config's baseline), judged as `run` judges them; None in a report written
    #: before schema 2.
    coverage: CoverageEvidence | None = None
    first_reached: list[FirstReach] = Field(default_factory=list)

    def coverage_of(self, branch: str) -> BranchCoverage | None:
        """The branch's changed-line word, where it was judged and could be fuzzed at all."""
        if self.coverage is None or branch in self.unmeasured:
            return None
        return next((b for b in self.coverage.branches if b.branch == branch), None)

    def not_verified(self) -> list[str]:
        """The fuzzed branches with nothing found whose changed code the examples did not all run
        (or could not vouch for): their "nothing found" checked nothing there."""
        found = {o.kind.branch for f in self.findings for o in f.observations}
        return [
            b
            for b in self.branches
            if b not in found
            and (c := self.coverage_of(b)) is not None
            and c.status in ("not verified", "unknown")
        ]

    def by_branch(self) -> dict[str, list[tuple[Observation, Finding]]]:
        """Every observation per branch (branches in fuzzing order), with the finding that holds
        it."""
        out: dict[str, list[tuple[Observation, Finding]]] = {b: [] for b in self.branches}
        for finding in self.findings:
            for obs in finding.observations:
                out.setdefault(obs.kind.branch, []).append((obs, finding))
        return out

    @property
    def first_finding_s(self) -> float | None:
        return min((f.found_after_s for f in self.findings), default=None)


def fuzz_exit_code(report: FuzzReport, require_coverage: bool = False) -> int:
    """As `run`: 1 a diverge or broken finding; 3 an error finding, a branch that could not be
    fuzzed or a search that could not go on; 2 interrupted with nothing found; then, with
    `require_coverage`, 1 a branch with nothing found whose changed code the examples did not all
    run (as the gate's); 0 nothing found."""
    verdicts = {v for f in report.findings for v in f.verdicts}
    if verdicts & {"diverge", "broken"}:
        return EXIT_FAILED
    if "error" in verdicts or report.unmeasured or report.stopped == "flaky":
        return EXIT_UNMEASURED
    if report.stopped == "interrupted":
        return EXIT_USAGE
    if require_coverage and report.not_verified():
        return EXIT_FAILED
    return EXIT_OK
