"""`difftest blame` against hostile branches (slow: real vLLM, real probes).

A branch whose counting comes and goes between identical probes must never be blamed on a set of
hunks: the search's answers are chance, and a branch could steer them onto innocent hunks (#29,
case 2). The whole change and the minimal set are probed again before anything is reported; a
finding that does not come back every time reads "unstable" (exit 3).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from difftest.core.blame import MEASURED_AGAIN
from difftest.core.evidence import read_evidence
from tests.e2e.cli_helpers import CONTROL, capture_stderr, run_cli
from tests.factories import shipped_branch, write_config
from tests.faults.kit import flaky_counting_patch, flaky_imports

pytestmark = pytest.mark.slow


def test_a_finding_that_comes_and_goes_reads_unstable_and_blames_no_hunk(
    tmp_path: Path, fixture_repo
) -> None:
    patch = flaky_counting_patch(tmp_path, fixture_repo)
    config = write_config(
        tmp_path,
        [shipped_branch("main"), {"name": "flaky", "ref": "main", "patches": [str(patch)]}],
    )
    out = tmp_path / "out"
    with capture_stderr() as log:
        code = run_cli(
            "blame", "-c", config, "flaky", "-k", CONTROL, "--tier", "scheduler", "--out", out
        )
    assert code == 3, log.getvalue()[-3000:]
    blamed = read_evidence(out / "evidence.json").blame
    assert blamed is not None
    (finding,) = blamed.findings
    assert finding.unstable and finding.minimal == [] and finding.culprit is None
    assert finding.problem.startswith("unstable: the same code did not make it every time")
    assert len(finding.again) >= MEASURED_AGAIN
    again = [blamed.tried(n) for n in finding.again]
    assert {t.phase for t in again} == {"again"} and all(t.probed for t in again)
    assert {t.outcomes[CONTROL] for t in again} >= {"gone"}
    # The comment-only hunk (the scheduler's) is in no reported set: nothing is reported.
    assert "No set of hunks found: unstable" in (out / "blame.md").read_text()
    assert "unstable" in log.getvalue()
    assert flaky_imports(tmp_path) >= MEASURED_AGAIN  # its probes really ran the branch's code
