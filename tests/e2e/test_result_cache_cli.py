"""The result cache through the CLI: an unchanged re-run reuses, anything changed is measured again
(slow: real vLLM, real branch environments).

One scheduler scenario (the control), two branches: main and `commented` (main plus a real patch
that adds a comment line to the scheduler: a different environment with the same behaviour, so a
re-measure can only come from the cache key, never from a different result). The module's fixture
runs twice into one result cache of its own; tests that change something work on a copy of that
cache.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import pytest

from difftest.run.cache.results import CACHE_ENV
from difftest.run.cache.validated_copy import copy_path
from tests.e2e.cli_helpers import CONTROL, INIT_MARKER, SCHEDULER, capture_stderr, run_cli
from tests.factories import ROOT, shipped_branch, write_config
from tests.patching import insert_after

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("result-cache")]

REUSED = "reused from the result cache"


def _comment_patch(dest: Path, repo, text: str) -> Path:
    return insert_after(dest, repo, SCHEDULER, INIT_MARKER, f"        # {text}\n")


def _config(folder: Path, patch: Path, scenarios: Path) -> Path:
    branches = [
        shipped_branch("main"),
        {"name": "commented", "ref": "main", "patches": [str(patch)]},
    ]
    return write_config(folder, branches, scenarios_dir=str(scenarios))


def _run(config: Path, out: Path, *extra: str) -> tuple[int, str]:
    with capture_stderr() as log:
        code = run_cli(
            "run", "-c", config, "--tier", "scheduler", "-k", CONTROL, "--out", out, *extra
        )
    return code, log.getvalue()


def _evidence(out: Path) -> dict:
    return json.loads((out / "evidence.json").read_text())


def _reused(out: Path) -> dict[str, bool]:
    """branch -> whether its probe's runs came from the result cache, as the evidence says."""
    return {p["branch"]: p["reused"] is not None for p in _evidence(out)["probes"]}


def _verdicts(out: Path) -> list[tuple[str, str, str]]:
    return sorted((r["branch"], r["label"], r["verdict"]) for r in _evidence(out)["results"])


#: What a measurement repeats exactly (its duration and the logged throughput are its own).
MEASURED = ("label", "status", "totals", "outputs", "finish_reasons")


def _runs(out: Path, whole: bool = True) -> dict:
    """The evidence's runs per branch; `whole=False`: only what a new measurement repeats
    exactly."""
    runs = _evidence(out)["runs"]
    if whole:
        return runs
    return {
        branch: [{k: run[k] for k in MEASURED} for run in found] for branch, found in runs.items()
    }


@pytest.fixture(scope="session")
def cached(tmp_path_factory, fixture_repo):
    """Two identical runs into a fresh result cache: (folder, config, first out, second out,
    logs)."""
    folder = tmp_path_factory.mktemp("result-cache")
    scenarios = folder / "scenarios" / "scheduler"
    scenarios.mkdir(parents=True)
    shutil.copy(ROOT / "scenarios" / "scheduler" / f"{CONTROL}.yaml", scenarios)
    patch = _comment_patch(
        folder / "commented.patch", fixture_repo, "planted: a comment, no change in behaviour"
    )
    config = _config(folder, patch, folder / "scenarios")
    with pytest.MonkeyPatch.context() as env:
        env.setenv(CACHE_ENV, str(folder / "cache"))
        first = _run(config, folder / "first")
        second = _run(config, folder / "second")
    return {"folder": folder, "config": config, "first": first, "second": second}


def _own_cache(cached: dict, tmp_path: Path, monkeypatch) -> Path:
    """A copy of the fixture's cache for a test that changes something, and the config's
    scenarios."""
    cache = shutil.copytree(cached["folder"] / "cache", tmp_path / "cache")
    monkeypatch.setenv(CACHE_ENV, str(cache))
    return cache


def _entries(cache: Path) -> list[Path]:
    """The cache's entries (not their validated copies, `<key>.runs.json`)."""
    return sorted(p for p in cache.glob("*/*.json") if not p.name.endswith(".runs.json"))


def test_an_unchanged_rerun_reuses_every_probe_and_judges_the_same(cached):
    (code1, log1), (code2, log2) = cached["first"], cached["second"]
    first, second = cached["folder"] / "first", cached["folder"] / "second"
    assert code1 == code2 == 0
    assert REUSED not in log1 and _reused(first) == {"main": False, "commented": False}
    assert log2.count(REUSED) == 2 and _reused(second) == {"main": True, "commented": True}
    assert _verdicts(first) == _verdicts(second) and {v for _b, _l, v in _verdicts(second)} == {
        "pass"
    }
    assert _runs(first) == _runs(second)
    assert len(_entries(cached["folder"] / "cache")) == 2
    assert all(
        copy_path(entry).is_file() for entry in _entries(cached["folder"] / "cache")
    )  # reused from these
    assert "reused from the result cache" not in (first / "report.md").read_text()
    assert (
        "Runs of 2 of 2 probe(s) were reused from the result cache"
        in (second / "report.md").read_text()
    )


def test_show_reads_reused_steps_and_says_where_they_came_from(cached, capsys):
    second = cached["folder"] / "second"
    capsys.readouterr()
    code = run_cli(
        "show", "-c", cached["config"], CONTROL, "--branch", "commented", "--out", second
    )
    printed = capsys.readouterr().out
    assert code == 0
    assert (
        "these steps come from the result cache" in printed
        and "not by the run that wrote this evidence" in printed
    )
    assert "step" in printed.lower()


def _entry_of(cached: dict, cache: Path, branch: str) -> Path:
    """The cache entry of `branch`: the key the second (reusing) run's evidence recorded for it."""
    key = next(
        p["reused"]["key"]
        for p in _evidence(cached["folder"] / "second")["probes"]
        if p["branch"] == branch
    )
    return cache / key[:2] / f"{key}.json"


def test_damaged_entries_are_named_and_measured_again(cached, tmp_path, monkeypatch):
    cache = _own_cache(cached, tmp_path, monkeypatch)
    # main's entry: a counter edited, the payload's sha256 left as it was.
    main_entry = _entry_of(cached, cache, "main")
    entry = json.loads(main_entry.read_text())
    stored_hash = entry["payload_sha256"]
    records = re.sub(
        r'"num_accepted_tokens": (\d+)',
        lambda m: f'"num_accepted_tokens": {int(m[1]) + 1}',
        entry["payload"]["records"],
        count=1,
    )
    assert records != entry["payload"]["records"]
    entry["payload"]["records"] = records
    main_entry.write_text(json.dumps(entry))
    # commented's entry: a run record without the probe's nonce, the sha256 recomputed to match.
    other_entry = _entry_of(cached, cache, "commented")
    entry = json.loads(other_entry.read_text())
    entry["payload"]["records"] = entry["payload"]["records"].replace(
        entry["payload"]["nonce"], "0" * 32, 1
    )
    entry["payload_sha256"] = hashlib.sha256(
        json.dumps(entry["payload"], sort_keys=True).encode()
    ).hexdigest()
    other_entry.write_text(json.dumps(entry))
    code, log = _run(cached["config"], tmp_path / "out")
    assert code == 0
    assert (
        f"result cache entry {main_entry} is damaged (its payload does not match its sha256)" in log
    )
    assert (
        f"result cache entry {other_entry} is damaged (its records do not validate: line 1 does "
        "not carry" in log
    )
    assert _reused(tmp_path / "out") == {"main": False, "commented": False}
    assert _runs(tmp_path / "out", whole=False) == _runs(
        cached["folder"] / "first", whole=False
    )  # measured again
    stored = json.loads(
        main_entry.read_text()
    )  # stored afresh from the new measurement (a new nonce)
    assert stored["payload_sha256"] != stored_hash and records not in stored["payload"]["records"]
    assert {p.name for p in _entries(cache)} == {main_entry.name, other_entry.name}


def test_a_changed_branch_patch_is_measured_again(cached, tmp_path, monkeypatch, fixture_repo):
    _own_cache(cached, tmp_path, monkeypatch)
    patch = _comment_patch(tmp_path / "commented.patch", fixture_repo, "planted: another comment")
    config = _config(tmp_path, patch, cached["folder"] / "scenarios")
    code, log = _run(config, tmp_path / "out")
    assert code == 0 and log.count(REUSED) == 1
    assert _reused(tmp_path / "out") == {"main": True, "commented": False}
    assert _verdicts(tmp_path / "out") == _verdicts(cached["folder"] / "first")


def test_a_changed_scenario_file_is_measured_again(cached, tmp_path, monkeypatch):
    _own_cache(cached, tmp_path, monkeypatch)
    scenarios = shutil.copytree(cached["folder"] / "scenarios", tmp_path / "scenarios")
    path = scenarios / "scheduler" / f"{CONTROL}.yaml"
    path.write_text(path.read_text().replace("Control:", "Control (edited):", 1))
    config = _config(tmp_path, cached["folder"] / "commented.patch", scenarios)
    code, log = _run(config, tmp_path / "out")
    assert code == 0 and REUSED not in log
    assert _reused(tmp_path / "out") == {"main": False, "commented": False}


def test_no_cache_measures_and_verify_never_reuses(cached, tmp_path, monkeypatch, capsys):
    cache = _own_cache(cached, tmp_path, monkeypatch)
    before = {p: p.read_text() for p in _entries(cache)}
    with capture_stderr() as log:
        code = run_cli(
            "run",
            "-c",
            cached["config"],
            "--tier",
            "scheduler",
            "-k",
            CONTROL,
            "--out",
            tmp_path / "fresh",
            "--no-cache",
            "main",
        )
    assert code == 0 and REUSED not in log.getvalue()
    assert _reused(tmp_path / "fresh") == {"main": False}
    changed = [p for p, text in before.items() if p.read_text() != text]
    assert len(changed) == 1  # main's entry was stored afresh from the new measurement
    # verify re-measures a file whose runs were all reused, and neither reads nor writes the cache.
    after = {p: p.read_text() for p in _entries(cache)}
    with capture_stderr() as log:
        code = run_cli(
            "verify",
            "-c",
            cached["config"],
            cached["folder"] / "second" / "evidence.json",
            "--out",
            tmp_path / "verified",
        )
    assert code == 0, capsys.readouterr().out
    assert REUSED not in log.getvalue() and set(_reused(tmp_path / "verified").values()) == {False}
    assert {p: p.read_text() for p in _entries(cache)} == after


def test_a_gate_after_the_run_reuses_both_sides(cached, tmp_path, monkeypatch):
    _own_cache(cached, tmp_path, monkeypatch)
    with capture_stderr() as log:
        code = run_cli(
            "gate",
            "-c",
            cached["config"],
            "--base",
            "main",
            "--head",
            "commented",
            "--tier",
            "scheduler",
            "-k",
            CONTROL,
            "--out",
            tmp_path / "gate",
            "--format",
            "json",
        )
    assert code == 0 and log.getvalue().count(REUSED) == 2
    assert _reused(tmp_path / "gate") == {"main": True, "commented": True}
    assert _verdicts(tmp_path / "gate") == _verdicts(cached["folder"] / "first")
