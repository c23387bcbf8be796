"""The evidence file: everything a verdict rests on, in one versioned JSON file.

A report can be rebuilt from it, and a reviewer can check what was compared:
which base wheel, which commits and patches, which scenario files (by hash),
which oracle reading, and the raw probe runs. The schema version is read
before anything else; a file of an older version is brought up to date by
explicit upgrade steps (`UPGRADES`, as asv's results files do), and a file of
an unknown version fails with a message instead of a pydantic dump.

Versions: 1 (results keyed by `order`, statement as `explanation`); 2 (results
keyed by run `label`, `statement`; runs carry their `role` and the probe's
`failure`; scenarios not run on this base say why in `skipped`); 3 (`probes`:
each probe's job and records file with its sha256 and nonce, so `difftest show`
can trust the step records next to the evidence; violations may name
`requests`); 4 (`baseline`: the branch crashes and hangs were judged against;
the base fingerprint's `wheel_hash` is the wheel's identity, `identity: 2`, the
same in every cache and clone); 5 (branches record what was transplanted —
original SHA, merge-base, replayed commits — and the members of a stack); 6 (the
tests tier: `tests` holds every (test source, code branch, test, outcome,
message) and `test_sources` where each source's tests came from); 7 (a probe whose
runs came from the result cache says so in `probes[].reused`: its key, when it
was measured and how long that took; a run of one shard of the work says which in
`shard`); 8 (how each probe started: `launch`, `launch_note`); 9 (each probe's process
`outcome`, the `reference_branches`); 10 (a probe run on a Ray cluster names its `node`, and the
attempts that node replaced); 11 (`blame`: the search of `difftest blame` - the change's hunks,
every set of them tried, and each finding's minimal set; None for every other command); 12 (each
scenario's serving `conditions` in words; a crash's or hang's violation holds its `cause`, what
broke without the baseline's part).
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import BaseModel, Field, ValidationError

from difftest import __version__
from difftest.core.blame import BlameEvidence
from difftest.core.errors import DifftestError
from difftest.core.outcome import ProcessOutcome
from difftest.core.records import ProbeRun, Reading, Result, TestRecord

SCHEMA_VERSION: Final = "13"
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


class BaseEvidence(BaseModel):
    """The shared vLLM wheel every branch overlays its Python files on."""

    requirement: str
    python: str | None = None
    platform: str = ""
    fingerprint: dict[str, Any] = Field(default_factory=dict)


class ReplayedCommit(BaseModel):
    """One transplanted commit: the original, and the commit difftest wrote for it."""

    original: str
    sha: str


class TransplantEvidence(BaseModel):
    """A branch's own commits, replayed onto the base wheel's commit."""

    #: Whose commits: the branch itself, or a member of a stack.
    branch: str
    ref: str
    #: The commit `ref` named before transplanting.
    original_sha: str
    mainline: str
    merge_base: str
    #: `repo.base_ref` and its commit: where the commits were replayed.
    onto: str
    onto_sha: str
    replayed: list[ReplayedCommit] = Field(default_factory=list)
    #: The range held merge commits, so it was replayed as one step (its net diff).
    squashed: bool = False


class BranchEvidence(BaseModel):
    """What one branch really was: the ref asked for, the commit built, the patches applied."""

    ref: str
    #: The commit the environment was built from (after patches and replays, if any).
    sha: str | None = None
    #: The commit the branch's steps start from (`ref`; `repo.base_ref` when transplanted).
    ref_sha: str | None = None
    #: Patch file path -> sha256 of its content.
    patches: dict[str, str] = Field(default_factory=dict)
    transplants: list[TransplantEvidence] = Field(default_factory=list)
    #: The branches a stack composes, in order.
    stack: list[str] = Field(default_factory=list)
    fingerprint: dict[str, Any] = Field(default_factory=dict)


class ScenarioEvidence(BaseModel):
    file: str
    sha256: str
    seed: int
    tier: str
    statement: str = ""
    #: The serving conditions it runs under, in words (`prefix caching`, `two steps in flight`);
    #: none: the plain case.
    conditions: list[str] = Field(default_factory=list)
    #: Why the scenario was not run on this base (e.g. it needs CUDA), if it was not.
    skipped: str | None = None


class ReusedProbe(BaseModel):
    """Runs read from the result cache instead of measured now (`run.cache.results`)."""

    #: The cache key: sha256 of everything the runs depend on.
    key: str
    #: When the probe that measured them ended (ISO 8601, UTC).
    measured_at: str
    #: How long that probe took.
    duration_s: float = 0.0


class ProbeNode(BaseModel):
    """The Ray cluster node a probe ran on (`--executor ray`): where its records were measured."""

    #: Ray's node id (hex).
    id: str
    #: The node's address (its IP).
    address: str
    #: Earlier attempts of this probe that ended without its output, each naming its node and why
    #: (a node that died mid-probe, a node refused for another base).
    retried: list[str] = Field(default_factory=list)

    def name(self) -> str:
        """How logs and reports name the node: its address and the start of its id."""
        return f"{self.address} (node {self.id[:12]})"


class ProbeFiles(BaseModel):
    """One probe's files (one branch, one tier), so the step records can be re-read and trusted
    later.

    The step records stay in the JSONL file (the evidence keeps runs without
    steps). A reader checks both files' sha256 (any edit after the run shows)
    and then validates the records exactly as the runner did, with the nonce
    the probe stamped them with; the probe is over, so the nonce guards nothing
    any more and may be published.
    """

    branch: str
    tier: str
    #: Paths relative to the folder holding evidence.json.
    job: str
    job_sha256: str
    records: str
    records_sha256: str
    nonce: str
    #: The probe exited 0 without being killed (the runner reads a missing trailer differently
    #: then).
    exited_cleanly: bool = True
    #: Set when these files came from the result cache, written by an earlier probe (None: measured
    #: now).
    reused: ReusedProbe | None = None
    #: How the probe process started: "forked" from the tier's warm fork server, or "fresh" (an
    #: interpreter of its own); None when the runs were reused from the result cache.
    launch: Literal["fresh", "forked"] | None = None
    #: Why a probe that was to be forked started fresh ("" when it did not have to).
    launch_note: str = ""
    #: How the probe process ended, as the judging door weighed it (`core.outcome`); None in files
    #: written before schema 9 (then `exited_cleanly` is all that is known).
    outcome: ProcessOutcome | None = None
    #: The cluster node that ran the probe (`--executor ray`); None for a probe of this machine.
    node: ProbeNode | None = None


class TestSourceEvidence(BaseModel):
    """Where one source of tests of the tests tier came from, and what it selected."""

    __test__ = False  # not a pytest test class, despite the name

    #: The branch whose tree holds the tests (the baseline for `upstream`).
    origin: str
    #: That tree's commit.
    sha: str | None = None
    #: What was selected: pytest arguments for `upstream`, the node ids a branch adds or changes
    #: otherwise.
    selection: list[str] = Field(default_factory=list)
    keyword: str | None = None
    #: Other branches whose test changes are identical (their tests ran once, under this source).
    same_as: list[str] = Field(default_factory=list)
    #: How it ran: in the shared session (baseline tree, changed modules grafted in) or on its own
    #: tree.
    session: str = ""
    note: str = ""


class ShardEvidence(BaseModel):
    """One slice of a comparison (`run --shard I/N`): `difftest merge` joins the N slices into
    one."""

    index: int
    count: int
    #: Every selected scenario, in the order one whole run judges them (the merge restores it).
    order: list[str] = Field(default_factory=list)


class ProtectionEvidence(BaseModel):
    """Whether the probes ran confined (`run.probes.sandbox`): everything read-only to a branch's
    code but its own scratch folder. Unconfined runs are only as trustworthy as the branches."""

    confined: bool
    #: Why not, when not (`DIFFTEST_SANDBOX=off`, user namespaces forbidden, ...).
    why_not: str = ""
    #: Confined, but in a `DIFFTEST_HOME` where probes ran unconfined before: since when
    #: (`run.probes.taint`); "" when not.
    home_unconfined_since: str = ""


class ChangedFileCoverage(BaseModel):
    """One file a branch changes under `vllm/` relative to the baseline, and which of its changed
    lines that branch's own probes executed (line numbers in the branch's file, `run.coverage`)."""

    branch: str
    file: str
    #: `traced`: judged line by line; `not traced`: not Python, or does not parse (`why`);
    #: `unknown`: a probe of the branch could not vouch for its coverage (`why`).
    status: Literal["traced", "not traced", "unknown"]
    why: str = ""
    #: The changed lines that are statements (what can be executed at all).
    lines: list[int] = Field(default_factory=list)
    reached: list[int] = Field(default_factory=list)
    unreached: list[int] = Field(default_factory=list)
    #: Arcs out of changed branch points (`if`, `while`, a boolean expression) that no run took.
    arcs_missing: list[tuple[int, int]] = Field(default_factory=list)


class BranchCoverage(BaseModel):
    """One branch's changed-line coverage in a word (`run.coverage.judge_branch`)."""

    branch: str
    #: `verified`: every changed statement ran and every changed branch point went both ways;
    #: `not verified`: some did not, or could not be traced; `unknown`: its probes could not vouch
    #: for their coverage; `unchanged`: it changes no file under `vllm/` relative to the baseline.
    status: Literal["verified", "not verified", "unknown", "unchanged"]
    #: One line, as every report prints it.
    summary: str


class CoverageEvidence(BaseModel):
    """What the probes executed of the lines each branch changes (`run.coverage`)."""

    #: The files traced in every probe (`vllm/...`, a folder ending in `/`).
    traced: list[str] = Field(default_factory=list)
    #: Why no probe was traced ("" when they were).
    why_not: str = ""
    changed: list[ChangedFileCoverage] = Field(default_factory=list)
    branches: list[BranchCoverage] = Field(default_factory=list)


class Evidence(BaseModel):
    schema_version: Literal["13"] = SCHEMA_VERSION
    created_at: datetime = Field(default_factory=lambda: datetime.now(UTC))
    difftest_version: str = __version__
    #: The command line that produced the file (argv).
    command: list[str] = Field(default_factory=list)
    reading: Reading
    #: The branch a crash or a hang was judged against (`core.breakage`): the config's baseline, the
    #: gate's base; None in files written before schema 4.
    baseline: str | None = None
    #: Branches measured only to judge the named ones against (the baseline when it was not named):
    #: their runs and probes are kept, their results are not reported.
    reference_branches: list[str] = Field(default_factory=list)
    #: sha256 of the caller's variables that reached the probes
    #: (`run.probes.environ.passed_environ`): shards measured under other ones are not one
    #: comparison. None in files written before it was recorded.
    probe_environ_sha256: str | None = None
    #: Whether the probes ran confined; None in files written before it was recorded.
    protection: ProtectionEvidence | None = None
    base: BaseEvidence
    branches: dict[str, BranchEvidence] = Field(default_factory=dict)
    scenarios: dict[str, ScenarioEvidence] = Field(default_factory=dict)
    results: list[Result] = Field(default_factory=list)
    #: Raw probe runs per branch, kept so verdicts can be re-checked offline.
    runs: dict[str, list[ProbeRun]] | None = None
    #: Where each probe's step records are, and how to trust them.
    probes: list[ProbeFiles] = Field(default_factory=list)
    #: The tests tier: every test of every source on every branch's code, with its judgement.
    tests: list[TestRecord] = Field(default_factory=list)
    #: The tests tier's sources by label (`upstream`, `from:<branch>`).
    test_sources: dict[str, TestSourceEvidence] = Field(default_factory=dict)
    #: Set on a shard's partial evidence (`run --shard`); None for a whole run and for a merge.
    shard: ShardEvidence | None = None
    #: Set by `difftest blame`: the hunks searched, every set tried, each finding's minimal set.
    blame: BlameEvidence | None = None
    #: Which changed lines each branch's probes executed; None in files written before schema 13.
    coverage: CoverageEvidence | None = None


def evidence_json(evidence: Evidence) -> str:
    """Stable text: sorted keys, indent 2, trailing newline (diff-friendly). A lone surrogate (no
    UTF-8 file can hold one) is written as its JSON escape, so the file reads back the same."""
    text = (
        json.dumps(evidence.model_dump(mode="json"), sort_keys=True, indent=2, ensure_ascii=False)
        + "\n"
    )
    return _LONE_SURROGATE.sub(lambda m: f"\\u{ord(m[0]):04x}", text)


def write_evidence(evidence: Evidence, path: str | Path) -> Path:
    """Write atomically: a reader never sees half a file, even if we are killed."""
    return atomic_write_text(Path(path), evidence_json(evidence))


def read_evidence(path: str | Path) -> Evidence:
    """Load and validate an evidence file, or raise DifftestError naming the problem and the fix."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DifftestError(
            f"evidence file {str(path)!r} does not exist",
            "pass the evidence.json written by `difftest run`",
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DifftestError(
            f"cannot read evidence file {str(path)!r}: {exc}", "check the path and its permissions"
        ) from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DifftestError(
            f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})",
            "the file is damaged or truncated; run difftest again to produce a new one",
        ) from None
    if not isinstance(raw, dict):
        raise DifftestError(
            f"{path}: not an evidence file (top level is not an object)",
            "pass the evidence.json written by difftest",
        )
    version = raw.get("schema_version")
    while version in UPGRADES:
        raw = UPGRADES[version](raw)
        version = raw.get("schema_version")
    if version != SCHEMA_VERSION:
        readable = ", ".join(repr(v) for v in [*UPGRADES, SCHEMA_VERSION])
        raise DifftestError(
            f"{path}: evidence schema version {version!r}; "
            f"this difftest ({__version__}) reads versions {readable}",
            "open it with the difftest version that wrote it, or run difftest again",
        )
    try:
        return Evidence.model_validate(raw)
    except ValidationError as exc:
        problems = "\n".join(
            f"  {'.'.join(str(p) for p in err['loc']) or '(top level)'}: {err['msg']}"
            for err in exc.errors()[:10]
        )
        more = f"\n  ... and {exc.error_count() - 10} more" if exc.error_count() > 10 else ""
        raise DifftestError(
            f"{path}: invalid evidence file\n{problems}{more}",
            "the file was edited or written by a different tool; run difftest again",
        ) from None


def written_version(path: str | Path) -> str:
    """The schema version a (readable) evidence file was written in, before any upgrade: what an
    older file could not record is not held against a re-run (`core.reproduction`)."""
    return str(json.loads(Path(path).read_text(encoding="utf-8")).get("schema_version"))


def upgrade_from_1(raw: dict[str, Any]) -> dict[str, Any]:
    """Version 1 -> 2: results' `order` -> `label`, `explanation` -> `statement`; runs gain
    `role`."""
    out = {**raw, "schema_version": "2"}
    results = []
    for result in raw.get("results") or []:
        result = dict(result)
        if "order" in result:
            result["label"] = result.pop("order")
        if "explanation" in result:
            result["statement"] = result.pop("explanation")
        results.append(result)
    out["results"] = results
    if raw.get("runs"):
        out["runs"] = {
            branch: [_run_from_1(run) for run in runs] for branch, runs in raw["runs"].items()
        }
    return out


def _run_from_1(run: dict[str, Any]) -> dict[str, Any]:
    """A version-1 run: its role was in `notes.role` (engine) or the label's prefix."""
    run = dict(run)
    notes = dict(run.get("notes") or {})
    label = str(run.get("label", ""))
    if notes.pop("role", None) == "reference" or label.startswith("reference:"):
        run["role"] = "reference"
    else:
        run["role"] = "alone" if label.startswith("alone:") else "batch"
    run["notes"] = notes
    return run


def upgrade_from_2(raw: dict[str, Any]) -> dict[str, Any]:
    """Version 2 -> 3: nothing moves; `probes` (absent: the step records cannot be trusted) and
    violations' `requests` are new and optional."""
    return {**raw, "schema_version": "3"}


def upgrade_from_3(raw: dict[str, Any]) -> dict[str, Any]:
    """Version 3 -> 4: no `baseline` recorded (verify then uses the config's); the base's
    `wheel_hash` stays as written (identity version 1: comparable in the same cache only)."""
    return {**raw, "schema_version": "4", "baseline": None}


def upgrade_from_4(raw: dict[str, Any]) -> dict[str, Any]:
    """Version 4 -> 5: branches gain `transplants` and `stack` (a version-4 branch had neither)."""
    branches = {
        name: {"transplants": [], "stack": [], **branch}
        for name, branch in (raw.get("branches") or {}).items()
    }
    return {**raw, "schema_version": "5", "branches": branches}


def upgrade_from_5(raw: dict[str, Any]) -> dict[str, Any]:
    """Version 5 -> 6: no tests tier yet, so no test records and no test sources."""
    return {
        **raw,
        "schema_version": "6",
        "tests": raw.get("tests") or [],
        "test_sources": raw.get("test_sources") or {},
    }


def upgrade_from_6(raw: dict[str, Any]) -> dict[str, Any]:
    """Version 6 -> 7: no result cache yet, so every probe was measured by the run that wrote the
    file."""
    probes = [
        {**probe, "reused": None} if isinstance(probe, dict) else probe
        for probe in raw.get("probes") or []
    ]
    return {**raw, "schema_version": "7", "probes": probes}


def upgrade_from_7(raw: dict[str, Any]) -> dict[str, Any]:
    """Version 7 -> 8: no fork server yet, so every probe measured by the run started fresh."""
    probes = [
        {**probe, "launch": None if probe.get("reused") else "fresh", "launch_note": ""}
        if isinstance(probe, dict)
        else probe
        for probe in raw.get("probes") or []
    ]
    return {**raw, "schema_version": "8", "probes": probes}


def upgrade_from_8(raw: dict[str, Any]) -> dict[str, Any]:
    """Version 8 -> 9: probes gain their process outcome (unknown before), files their reference
    branches (none)."""
    return {**raw, "schema_version": "9", "reference_branches": []}


def upgrade_from_9(raw: dict[str, Any]) -> dict[str, Any]:
    """Version 9 -> 10: no Ray executor yet, so every probe ran on the machine that wrote the
    file."""
    probes = [
        {**probe, "node": None} if isinstance(probe, dict) else probe
        for probe in raw.get("probes") or []
    ]
    return {**raw, "schema_version": "10", "probes": probes}


def upgrade_from_10(raw: dict[str, Any]) -> dict[str, Any]:
    """Version 10 -> 11: no `difftest blame` yet, so no search recorded."""
    return {**raw, "schema_version": "11", "blame": None}


def upgrade_from_11(raw: dict[str, Any]) -> dict[str, Any]:
    """Version 11 -> 12: conditions were not recorded (a listing of the scenario file has them),
    and a crash's cause was only in its violation's detail."""
    scenarios = {
        name: {**info, "conditions": []} if isinstance(info, dict) else info
        for name, info in (raw.get("scenarios") or {}).items()
    }
    return {**raw, "schema_version": "12", "scenarios": scenarios}


def upgrade_from_12(raw: dict[str, Any]) -> dict[str, Any]:
    """Version 12 -> 13: nothing was traced, so no changed line is known to have run."""
    return {**raw, "schema_version": "13", "coverage": None}


#: schema version -> the step that brings a file of that version one version up.
UPGRADES = {
    "1": upgrade_from_1,
    "2": upgrade_from_2,
    "3": upgrade_from_3,
    "4": upgrade_from_4,
    "5": upgrade_from_5,
    "6": upgrade_from_6,
    "7": upgrade_from_7,
    "8": upgrade_from_8,
    "9": upgrade_from_9,
    "10": upgrade_from_10,
    "11": upgrade_from_11,
    "12": upgrade_from_12,
}


def atomic_write_text(path: Path, text: str) -> Path:
    """Write `text` to a temporary file next to `path`, then rename it over `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes it private; reports are meant to be shared
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
