"""`difftest blame` against hostile branches (slow: real vLLM, real probes).

A branch whose counting comes and goes between identical probes must never be blamed on a set of
hunks: the search's answers are chance, and a branch could steer them onto innocent hunks (#29,
case 2). The whole change and the minimal set are probed again before anything is reported; a
finding that does not come back every time reads "unstable" (exit 3). And a branch whose probes
ignore SIGINT and SIGTERM and leave children behind: Ctrl-C mid-search still stops every process it
started, at once, and leaves no report and no ref.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from difftest.core.blame import MEASURED_AGAIN
from difftest.core.evidence import read_evidence
from tests.e2e.cli_helpers import CONTROL, capture_stderr, faulty_config, interrupted_when, run_cli
from tests.faults.kit import (
    flaky_counting_patch,
    flaky_imports,
    orphan_pids,
    stubborn_counting_patch,
)
from tests.processes import survivors

pytestmark = pytest.mark.slow


def test_a_finding_that_comes_and_goes_reads_unstable_and_blames_no_hunk(
    tmp_path: Path, fixture_repo
) -> None:
    config = faulty_config(tmp_path, "flaky", flaky_counting_patch(tmp_path, fixture_repo))
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


def test_ctrl_c_stops_a_search_whose_probes_ignore_signals_and_leave_children(
    tmp_path: Path, fixture_repo
) -> None:
    config = faulty_config(tmp_path, "stubborn", stubborn_counting_patch(tmp_path, fixture_repo))
    out = tmp_path / "out"
    argv = ["blame", "-c", str(config), "stubborn", "-k", CONTROL, "--tier", "scheduler"]
    code, rest = interrupted_when([*argv, "--out", str(out)], "blame: try 2 ")
    assert code == 130, rest
    assert re.search(r"interrupted; \d+ running probe\(s\) stopped, no report written", rest), rest
    assert not (out / "evidence.json").exists() and not (out / "blame.md").exists()
    assert not (out / ".blame-subsets").exists()
    refs = fixture_repo.git.for_each_ref("--format=%(refname)", "refs/heads/difftest/")
    assert "stubborn-blame-" not in refs
    pids = orphan_pids(tmp_path)
    assert pids, "no probe of the branch ever started its child"
    assert not survivors(pids), "children the branch's probes started outlived the search"
