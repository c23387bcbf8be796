"""Every serving condition is reached: its regression is flagged, its refactor is not (slow).

For each condition of `tests/conditions/kit.py`, on the real scheduler of each
branch (main plus the kit's patch):
- `difftest gate --base main --head MUTANT -k SCENARIO` exits 1, and with the
  refactor as head it exits 0 (not worse);
- `difftest fuzz --against main --examples 300` finds every mutant (its
  findings, shrunk, still under the condition), and nothing on any refactor.
Main's gate runs are reused from a result cache of the test session's own,
shared by the xdist workers (the cache is keyed by everything a run depends on;
two workers may both measure an entry not yet there, never read a half-written
one).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from difftest.run.coverage.tracing_job import SWITCH_ENV as COVERAGE_SWITCH
from tests.conditions.kit import CONDITIONS, Condition
from tests.e2e.cli_helpers import run_cli
from tests.factories import shipped_branch, write_config
from tests.sessions import session_folder

pytestmark = pytest.mark.slow

FUZZ_EXAMPLES = 300


def _branch(kind: str, condition: Condition) -> str:
    return f"{kind}-{condition.slug}"


@pytest.fixture(scope="session")
def kit_config(tmp_path_factory: pytest.TempPathFactory, fixture_repo) -> Path:
    """main, and a mutant and a refactor branch per condition."""
    tmp = tmp_path_factory.mktemp("conditions")
    branches = [shipped_branch("main")]
    for c in CONDITIONS:
        for kind, edit in (("mutant", c.mutant), ("refactor", c.refactor)):
            patch = edit.patch(tmp / f"{_branch(kind, c)}.patch", fixture_repo)
            branches.append({"name": _branch(kind, c), "ref": "main", "patches": [str(patch)]})
    return write_config(tmp, branches)


@pytest.fixture(scope="session")
def result_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The module's result cache, one for the test session (both xdist workers write and read it:
    an entry is written whole, then renamed into place)."""
    return session_folder(tmp_path_factory, "conditions-result-cache")


def _gate(config: Path, head: str, scenario: str, out: Path, cache: Path, monkeypatch) -> dict:
    monkeypatch.setenv("DIFFTEST_RESULT_CACHE", str(cache))
    code = run_cli(
        "gate", "-c", config, "--base", "main", "--head", head, "--tier", "scheduler",
        "-k", scenario, "--format", "json", "--out", out,
    )  # fmt: skip
    document = json.loads((out / "evidence.json").read_text())
    return {"code": code, "results": document["results"]}


@pytest.mark.parametrize("condition", CONDITIONS, ids=lambda c: c.slug)
def test_gate_flags_the_conditions_regression_and_not_its_refactor(
    condition: Condition, kit_config: Path, result_cache: Path, tmp_path: Path, monkeypatch, capsys
) -> None:
    mutant = _gate(
        kit_config,
        _branch("mutant", condition),
        condition.scenario,
        tmp_path / "mutant",
        result_cache,
        monkeypatch,
    )
    capsys.readouterr()
    worse = [
        r
        for r in mutant["results"]
        if r["branch"] == _branch("mutant", condition) and r["verdict"] != "pass"
    ]
    assert mutant["code"] == 1, f"{condition.does}: not flagged by gate"
    assert worse, "the gate failed without a verdict of the mutant's to show for it"
    refactor = _gate(
        kit_config,
        _branch("refactor", condition),
        condition.scenario,
        tmp_path / "refactor",
        result_cache,
        monkeypatch,
    )
    capsys.readouterr()
    assert refactor["code"] == 0, f"{condition.name}: the refactor was flagged"
    main = {
        (r["scenario"], r["label"]): r["verdict"]
        for r in refactor["results"]
        if r["branch"] == "main"
    }
    same = {
        (r["scenario"], r["label"]): r["verdict"]
        for r in refactor["results"]
        if r["branch"] == _branch("refactor", condition)
    }
    assert same == main


def _fuzz(config: Path, branches: list[str], out: Path) -> dict:
    """`fuzz --against main`, untraced: these searches look for regressions, not coverage (the
    tracer's share of each example is saved; tests/e2e/test_fuzz_cli.py keeps fuzz's coverage)."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv(COVERAGE_SWITCH, "off")
        code = run_cli(
            "fuzz", "-c", config, "--against", "main", "--examples", FUZZ_EXAMPLES,
            "--out", out, *branches,
        )  # fmt: skip
    summary = json.loads((out / "fuzz.json").read_text())
    summary["exit_code"] = code
    return summary


#: Since #49's draws (per-request metrics, short async proposals, short contexts, log intervals,
#: async KV loads) the seeded 300-example search no longer reaches the preemption mutant; the
#: gate still flags it. Strict: a search that finds it again fails here, and the mark goes.
FUZZ_MISSES = {
    "preemption": "300 examples of the seeded search no longer reach it since #49's draws",
}


@pytest.mark.parametrize(
    "condition",
    [
        pytest.param(c, marks=pytest.mark.xfail(strict=True, reason=FUZZ_MISSES[c.slug]))
        if c.slug in FUZZ_MISSES
        else c
        for c in CONDITIONS
    ],
    ids=lambda c: c.slug,
)
def test_fuzz_against_main_finds_the_regression_under_its_condition(
    condition: Condition, kit_config: Path, tmp_path: Path, capsys
) -> None:
    """The mutant is found, and each of its findings, shrunk, still has the condition it needs."""
    out = tmp_path / "fuzz"
    summary = _fuzz(kit_config, [_branch("mutant", condition)], out)
    capsys.readouterr()
    assert not summary["unmeasured"], summary["unmeasured"]
    assert summary["findings"], f"{condition.does}: not found by fuzz --against main"
    for finding in summary["findings"]:
        raw = yaml.safe_load((out / finding["file"]).read_text())
        assert condition.present(raw), f"{finding['file']} lost the condition: {raw}"
    assert summary["exit_code"] == 1


@pytest.mark.timeout(2400)
def test_fuzz_against_main_finds_nothing_on_the_refactors(
    kit_config: Path, tmp_path: Path, capsys
) -> None:
    refactors = [_branch("refactor", c) for c in CONDITIONS]
    summary = _fuzz(kit_config, refactors, tmp_path / "fuzz")
    capsys.readouterr()
    assert not summary["unmeasured"], summary["unmeasured"]
    assert summary["searched"] == FUZZ_EXAMPLES
    assert summary["findings"] == [], [f["file"] for f in summary["findings"]]
    assert summary["exit_code"] == 0
